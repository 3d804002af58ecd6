//! Re-scoring recorded episodes with a judge, offline (`guirl judge RUN_OR_SET`): every
//! episode of a trajectory set (or of every set under a folder, such as a bench's or a
//! run's) is shown to the judge as it ended: its final screenshot, the ones before it the
//! judge asks for, its instruction and actions. Where the episode's recorded status came
//! from the task's own check, the judge's verdict is compared with it (precision, recall,
//! Cohen's κ with a 95 % interval).
//!
//! The check's verdict is `success` against the agent's failures (`fail`, `truncated`,
//! `invalid_action`); episodes that ended on infrastructure (`env_error`, `policy_error`,
//! `judge_error`) or are still `running` have none, nor do episodes a judge or reward model
//! decided when they were recorded.

use super::store::{TrajectorySet, TRAJECTORIES_FILE};
use super::trajectory::Trajectory;
use crate::env::EpisodeStatus;
use crate::policy::judge::agreement::Agreement;
use crate::policy::judge::Judge;
use serde::Serialize;
use std::path::{Path, PathBuf};

/// One re-scored episode.
#[derive(Debug, Clone, Serialize)]
pub struct RescoredEpisode {
    /// Its set folder.
    pub set: PathBuf,
    /// Its 1-based line in the set's `trajectories.jsonl`.
    pub line: usize,
    /// Task and seed.
    pub task: String,
    /// Seed.
    pub seed: u64,
    /// The task's own check: success or not (None where there is none to compare with).
    pub check: Option<bool>,
    /// The judge's verdict (None when it gave none).
    pub judge: Option<bool>,
    /// Votes saying SUCCESS, of `votes`.
    pub success_votes: u32,
    /// Votes asked.
    pub votes: u32,
    /// The verdict came from the cache.
    pub cached: bool,
    /// Why the judge gave no verdict, or why the episode was not judged.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// What `guirl judge` reports.
#[derive(Debug, Clone, Serialize)]
pub struct RescoreReport {
    /// The judge (`MODEL@BASE_URL`).
    pub judge: String,
    /// The rubric's SHA-256.
    pub rubric_sha256: String,
    /// Votes per episode and the fraction of SUCCESS votes that passes.
    pub votes: u32,
    /// The threshold.
    pub threshold: f64,
    /// The set folders read.
    pub sets: Vec<PathBuf>,
    /// Episodes read.
    pub episodes: usize,
    /// Episodes with a verdict.
    pub judged: usize,
    /// Of those, verdicts from the cache.
    pub cached: usize,
    /// HTTP requests sent to the judge.
    pub requests: usize,
    /// Episodes the judge gave no verdict on (down, timing out, no verdict line): an
    /// infrastructure failure, not a failure verdict.
    pub judge_failures: usize,
    /// Episodes not shown to the judge (no final screenshot recorded).
    pub not_judged: usize,
    /// The (judge, check) table over episodes with both.
    pub agreement: Agreement,
    /// Episodes compared.
    pub compared: usize,
    /// tp / (tp + fp).
    pub precision: Option<f64>,
    /// tp / (tp + fn).
    pub recall: Option<f64>,
    /// Cohen's κ.
    pub kappa: Option<f64>,
    /// Its 95 % interval.
    pub kappa_ci95: Option<(f64, f64)>,
    /// How the interval is computed.
    pub kappa_ci_method: String,
    /// Every episode.
    pub rows: Vec<RescoredEpisode>,
}

/// The trajectory sets at `path`: the folder itself if it is one, else every set below
/// it (a bench's or a training run's folder), in path order.
pub fn find_sets(path: &Path) -> anyhow::Result<Vec<PathBuf>> {
    if !path.is_dir() {
        let what = if path.exists() { "is not a folder" } else { "does not exist" };
        anyhow::bail!(
            "{} {what}: give a trajectory set (from --record) or a folder holding sets",
            path.display()
        );
    }
    let mut found = Vec::new();
    let mut stack = vec![path.to_path_buf()];
    while let Some(dir) = stack.pop() {
        if dir.join(TRAJECTORIES_FILE).is_file() {
            found.push(dir);
            continue;
        }
        let Ok(entries) = std::fs::read_dir(&dir) else { continue };
        for e in entries.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                stack.push(e.path());
            }
        }
    }
    found.sort();
    if found.is_empty() {
        anyhow::bail!(
            "{} holds no trajectory set (no {TRAJECTORIES_FILE} in it or below it): record episodes with \
             `guirl run --record DIR` or `guirl play --record DIR`",
            path.display()
        );
    }
    Ok(found)
}

/// The check's verdict of a recorded episode, where it has one to compare with.
pub fn check_verdict(t: &Trajectory) -> Option<bool> {
    if t.judge.as_ref().is_some_and(|j| j.decided) {
        return None;
    }
    match t.outcome.status {
        EpisodeStatus::Success => Some(true),
        EpisodeStatus::Fail | EpisodeStatus::Truncated | EpisodeStatus::InvalidAction => Some(false),
        _ => None,
    }
}

/// Re-score every episode under `path` with `judge` at `threshold`.
pub fn rescore(path: &Path, judge: &Judge, threshold: f64) -> anyhow::Result<RescoreReport> {
    let sets = find_sets(path)?;
    let requests_before = judge.requests();
    let mut rows = Vec::new();
    let mut agreement = Agreement::default();
    for dir in &sets {
        let set = TrajectorySet::read(dir)?;
        for st in &set.trajectories {
            let t = &st.trajectory;
            let mut row = RescoredEpisode {
                set: dir.clone(),
                line: st.line,
                task: t.task_id.clone(),
                seed: t.seed,
                check: check_verdict(t),
                judge: None,
                success_votes: 0,
                votes: judge.spec().votes,
                cached: false,
                error: None,
            };
            match frames(&set, t, judge.spec().frames) {
                Err(e) => row.error = Some(format!("not judged: {e:#}")),
                Ok(shots) => {
                    let actions: Vec<String> = t.steps.iter().map(|s| s.action.clone()).collect();
                    match judge.judge(&shots, &t.instruction, &actions) {
                        Ok((v, cached)) => {
                            row.judge = Some(v.success(threshold));
                            row.success_votes = v.success_votes;
                            row.cached = cached;
                        }
                        Err(e) => row.error = Some(e),
                    }
                }
            }
            if let (Some(j), Some(c)) = (row.judge, row.check) {
                agreement.add(j, c);
            }
            rows.push(row);
        }
    }
    let judged = rows.iter().filter(|r| r.judge.is_some()).count();
    let not_judged =
        rows.iter().filter(|r| r.error.as_deref().is_some_and(|e| e.starts_with("not judged"))).count();
    Ok(RescoreReport {
        judge: judge.spec().name(),
        rubric_sha256: judge.rubric_hash().to_string(),
        votes: judge.spec().votes,
        threshold,
        sets,
        episodes: rows.len(),
        judged,
        cached: rows.iter().filter(|r| r.cached).count(),
        requests: judge.requests() - requests_before,
        judge_failures: rows.len() - judged - not_judged,
        not_judged,
        compared: agreement.n(),
        precision: agreement.precision(),
        recall: agreement.recall(),
        kappa: agreement.kappa(),
        kappa_ci95: agreement.kappa_ci95(),
        kappa_ci_method: "asymptotic standard error (Cohen 1960): κ ± 1.96·√(p_o(1−p_o) / (n(1−p_e)²))"
            .into(),
        agreement,
        rows,
    })
}

/// The last `k` screenshots of a recorded episode, ending with its final one.
fn frames(set: &TrajectorySet, t: &Trajectory, k: usize) -> anyhow::Result<Vec<image::RgbImage>> {
    let Some(last) = &t.final_frame else { anyhow::bail!("no final screenshot was recorded") };
    let mut names: Vec<&String> = t.steps.iter().filter_map(|s| s.frame.as_ref()).collect();
    names.push(last);
    names[names.len().saturating_sub(k.max(1))..].iter().map(|n| set.load_frame(n)).collect()
}

impl RescoreReport {
    /// The report as text lines.
    pub fn text(&self) -> String {
        let f = |x: Option<f64>| x.map_or("n/a".to_string(), |v| format!("{v:.3}"));
        let a = &self.agreement;
        let ci = self.kappa_ci95.map_or("n/a".to_string(), |(lo, hi)| format!("[{lo:.3}, {hi:.3}]"));
        format!(
            "judge {} (rubric sha256 {}…), {} vote(s), threshold {}\n\
             episodes {} in {} set(s): judged {} ({} from the cache, {} requests), judge failures {}, not judged {}\n\
             against the task's check ({} episodes): tp {} fp {} fn {} tn {}\n\
             precision {}  recall {}  kappa {}  95% CI {ci} (asymptotic SE)\n",
            self.judge,
            &self.rubric_sha256[..12.min(self.rubric_sha256.len())],
            self.votes,
            self.threshold,
            self.episodes,
            self.sets.len(),
            self.judged,
            self.cached,
            self.requests,
            self.judge_failures,
            self.not_judged,
            self.compared,
            a.tp,
            a.fp,
            a.fn_,
            a.tn,
            f(self.precision),
            f(self.recall),
            f(self.kappa),
        )
    }
}
