//! `results.jsonl`: one row per finished episode attempt, appended and fsynced as each
//! episode ends. It is the bench's journal: `--resume` reads it to skip what is done, so a
//! killed bench loses no finished episode and repeats none.

use crate::env::EpisodeStatus;
use crate::rollout::Trajectory;
use anyhow::Context;
use serde::{Deserialize, Serialize};
use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::path::Path;

/// The journal's file name inside a bench folder.
pub const RESULTS_FILE: &str = "results.jsonl";

/// How many times an episode that ended as `env_error` is run again on the same seed
/// (AgentLab relaunches errored episodes up to 3 times too).
pub const MAX_RERUNS: u32 = 3;

/// One finished episode attempt.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ResultRow {
    /// Task id.
    pub task: String,
    /// The episode's seed.
    pub seed: u64,
    /// 0 for the first run of this (task, seed); then one more for each re-run: after an
    /// env error (up to 3 in a session), or of a policy or judge error at a `--resume`.
    pub attempt: u32,
    /// How it ended.
    pub status: EpisodeStatus,
    /// Sum of rewards.
    pub reward: f64,
    /// Steps taken.
    pub steps: u32,
    /// Mean wall-clock per step (policy + environment), ms.
    pub step_ms_mean: f64,
    /// Each step's wall-clock (policy + environment), ms, for the latency percentiles.
    #[serde(default)]
    pub step_ms: Vec<f64>,
    /// The policy's error, for `policy_error` (an endpoint down, a timeout, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy_error: Option<String>,
    /// The browser's error, for `env_error`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env_error: Option<String>,
    /// The judge's error, for `judge_error` (a judge reward that could not be had).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub judge_error: Option<String>,
    /// Steps whose answer or action could not be executed, with the first such error.
    #[serde(default)]
    pub invalid_steps: u32,
    /// The first invalid step's error.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_action_error: Option<String>,
    /// The instruction of the episode.
    #[serde(default)]
    pub instruction: String,
    /// The trajectory set folder holding this episode, relative to the bench folder.
    pub trajectory: String,
    /// The episode's line in that set's `trajectories.jsonl` (0-based; the viewer's `#t=`).
    #[serde(default)]
    pub index: usize,
}

impl ResultRow {
    /// The row for a recorded trajectory (attempt `attempt`, stored in `trajectory`).
    pub fn of(t: &Trajectory, attempt: u32, trajectory: &str, index: usize) -> ResultRow {
        let step_ms: Vec<f64> = t.steps.iter().map(|s| round1(s.policy_ms + s.timings.total_ms)).collect();
        let error = |s: EpisodeStatus| (t.outcome.status == s).then(|| t.outcome.error.clone()).flatten();
        let (policy_error, env_error, judge_error) = (
            error(EpisodeStatus::PolicyError),
            error(EpisodeStatus::EnvError),
            error(EpisodeStatus::JudgeError),
        );
        let invalid: Vec<&String> = t.steps.iter().filter_map(|s| s.action_error.as_ref()).collect();
        ResultRow {
            task: t.task_id.clone(),
            seed: t.seed,
            attempt,
            status: t.outcome.status,
            reward: t.outcome.reward,
            steps: t.outcome.steps,
            step_ms_mean: round1(step_ms.iter().fold(0.0, |a, b| a + b) / step_ms.len().max(1) as f64),
            step_ms,
            policy_error,
            env_error,
            judge_error,
            invalid_steps: invalid.len() as u32,
            first_action_error: invalid.first().map(|s| s.to_string()),
            instruction: t.instruction.clone(),
            trajectory: trajectory.to_string(),
            index,
        }
    }

    /// Whether this attempt settles its (task, seed): anything but an env error, or an env
    /// error after the last re-run.
    pub fn is_final(&self) -> bool {
        self.status != EpisodeStatus::EnvError || self.attempt >= MAX_RERUNS
    }
}

fn round1(x: f64) -> f64 {
    (x * 10.0).round() / 10.0
}

/// Read every row of a journal (none if the file does not exist). A torn last line, left
/// by a killed bench, is skipped with a warning (it is cut when the journal is reopened).
pub fn read_rows(path: &Path) -> anyhow::Result<Vec<ResultRow>> {
    let file = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
    };
    let mut rows = Vec::new();
    let lines: Vec<String> = BufReader::new(file).lines().collect::<Result<_, _>>()?;
    let n = lines.len();
    for (i, line) in lines.iter().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        match serde_json::from_str(line) {
            Ok(r) => rows.push(r),
            Err(e) if i + 1 == n => {
                tracing::warn!("{}: skipping a torn last line ({e})", path.display());
            }
            Err(e) => anyhow::bail!("{} line {}: {e}", path.display(), i + 1),
        }
    }
    Ok(rows)
}

/// Appends rows to a journal, each in one write followed by fsync.
pub struct Journal {
    file: File,
}

impl Journal {
    /// Open (creating) the journal for appending, cutting a torn tail first.
    pub fn open(path: &Path) -> anyhow::Result<Journal> {
        crate::rollout::store::cut_torn_tail(path)?;
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .with_context(|| format!("cannot open {} for appending", path.display()))?;
        Ok(Journal { file })
    }

    /// Append one row durably.
    pub fn append(&mut self, row: &ResultRow) -> anyhow::Result<()> {
        let mut line = serde_json::to_string(row)?;
        line.push('\n');
        self.file.write_all(line.as_bytes())?;
        self.file.sync_data()?;
        Ok(())
    }
}

/// The settled row of each (task, seed): its last attempt, if that attempt is final.
/// Also returns, for unsettled ones, the next attempt number.
pub fn settle(rows: &[ResultRow]) -> (Vec<ResultRow>, std::collections::HashMap<(String, u64), u32>) {
    let mut last: std::collections::BTreeMap<(String, u64), &ResultRow> = Default::default();
    for r in rows {
        let k = (r.task.clone(), r.seed);
        if last.get(&k).is_none_or(|p| r.attempt >= p.attempt) {
            last.insert(k, r);
        }
    }
    let mut done = Vec::new();
    let mut next = std::collections::HashMap::new();
    for (k, r) in last {
        if r.is_final() {
            done.push(r.clone());
        } else {
            next.insert(k, r.attempt + 1);
        }
    }
    (done, next)
}
