//! Replay: re-execute recorded trajectories from their task and seed in the browser and
//! check that every step's reward, status and frame reproduce.

use super::store::{StoredTrajectory, TrajectorySet, TRAJECTORIES_FILE};
use crate::env::{BrowserConfig, EnvConfig, EpisodeRules, GuiAction, GuiEnv, Pointer, ScreenState};
use anyhow::Context;
use image::RgbImage;
use serde::Serialize;
use std::collections::BTreeMap;
use std::sync::Arc;

/// Mean absolute pixel difference above which a frame counts as different (0..255 scale).
/// Small enough to catch a moved button, large enough to ignore a blinking text caret.
pub const FRAME_TOLERANCE: f64 = 0.5;

/// Mean absolute difference per channel of two images (255 if their sizes differ).
pub fn mean_abs_diff(a: &RgbImage, b: &RgbImage) -> f64 {
    if a.dimensions() != b.dimensions() {
        return 255.0;
    }
    let total: u64 = a.as_raw().iter().zip(b.as_raw()).map(|(x, y)| x.abs_diff(*y) as u64).sum();
    total as f64 / a.as_raw().len().max(1) as f64
}

/// Where and why a replay first went another way.
#[derive(Debug, Clone, Serialize)]
pub struct Divergence {
    /// 0-based step index (the frame before this step, or this step's result, differed).
    pub step: usize,
    /// What differed.
    pub what: String,
}

/// The replay of one trajectory.
#[derive(Debug, Clone, Serialize)]
pub struct ReplayReport {
    /// Line in trajectories.jsonl.
    pub line: usize,
    /// Task id.
    pub task_id: String,
    /// Seed.
    pub seed: u64,
    /// Outcome and every step reproduced.
    pub reproduced: bool,
    /// Not replayed: the recorded episode ended in an infrastructure failure (a browser,
    /// policy or judge error), which says nothing of the task for a replay to reproduce.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub skipped: Option<String>,
    /// Recorded outcome status and reward.
    pub recorded: (String, f64),
    /// Replayed outcome status and reward.
    pub replayed: (String, f64),
    /// Mean absolute pixel difference of each frame (before each step, then the final one)
    /// that could be compared.
    pub frame_diffs: Vec<f64>,
    /// Recorded frames that could not be read (missing or damaged files), so not compared;
    /// the rest of the episode is still checked.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub unreadable_frames: Vec<String>,
    /// The first step that differs, if any.
    pub divergence: Option<Divergence>,
    /// Set when the screen and the recorded frames differ in size (the task's viewport
    /// changed since), which makes every frame differ.
    #[serde(skip)]
    resized: Option<String>,
}

/// Replay every trajectory of a set. Tasks are checked up front: one that no longer
/// exists is an error naming the file and line.
pub async fn replay_set(set: &TrajectorySet, cfg: &EnvConfig) -> anyhow::Result<Vec<ReplayReport>> {
    let file = set.dir.join(TRAJECTORIES_FILE);
    let mut tasks = BTreeMap::new();
    for st in &set.trajectories {
        let id = &st.trajectory.task_id;
        if !tasks.contains_key(id) {
            let t = crate::tasks::load_task(id).with_context(|| {
                // A website spec is recorded by its path as given, relative to where guirl ran.
                let relative_spec = id.ends_with(".toml") && std::path::Path::new(id).is_relative();
                let hint = match (relative_spec, std::env::current_dir()) {
                    (true, Ok(here)) => format!(
                        " from {} (a spec path is recorded as it was given: run replay from the folder \
                         the set was recorded in)",
                        here.display()
                    ),
                    _ => String::new(),
                };
                format!("{}:{}: task {id} cannot be loaded{hint}", file.display(), st.line)
            })?;
            tasks.insert(id.clone(), t);
        }
    }
    // A spec edited since (its digest differs): its episodes may well diverge, and why.
    let mut changed: BTreeMap<&str, (usize, usize)> = BTreeMap::new();
    for st in &set.trajectories {
        let t = &st.trajectory;
        if t.task_digest.is_some() && t.task_digest.as_deref() != tasks[&t.task_id].source_digest() {
            changed.entry(&t.task_id).or_insert((st.line, 0)).1 += 1;
        }
    }
    for (id, (line, n)) in changed {
        tracing::warn!(
            "{}:{line}: the spec {id} has changed since it was recorded (its contents differ; {n} \
             episode{} of it): they may not reproduce",
            file.display(),
            if n == 1 { "" } else { "s" }
        );
    }
    let covered = set.trajectories.iter().filter(|st| !st.trajectory.final_frame_is_the_page()).count();
    if covered > 0 {
        tracing::warn!(
            "{}: {covered} MiniWoB++ episode{} recorded by an older guirl (trajectory format v1), whose \
             final frame shows MiniWoB++'s START cover, not the page: {} not compared",
            file.display(),
            if covered == 1 { "" } else { "s" },
            if covered == 1 { "its final frame is" } else { "their final frames are" }
        );
    }
    // One env per task, rules and pointer: an episode replays under the rules it was
    // recorded with, its pages told of the pointer they were then.
    let mut envs: BTreeMap<(String, EpisodeRules, Pointer), GuiEnv> = BTreeMap::new();
    let mut reports = Vec::new();
    for st in &set.trajectories {
        let t = &st.trajectory;
        let (id, rules, pointer) = (t.task_id.clone(), t.rules, t.pointer());
        let env = envs.entry((id.clone(), rules, pointer)).or_insert_with(|| {
            let browser = BrowserConfig { pointer, ..cfg.browser.clone() };
            GuiEnv::new(Arc::clone(&tasks[&id]), EnvConfig { rules, browser, ..cfg.clone() })
        });
        reports.push(replay_one(set, st, env).await?);
    }
    for (_, mut env) in envs {
        env.close().await;
    }
    Ok(reports)
}

/// The difference between the recorded frame `name` and the screen now, if one was
/// recorded and reads; one that does not read is noted in the report (a lost file says
/// nothing of the env, and the episode's actions and rewards are still worth checking).
fn frame_diff(
    set: &TrajectorySet,
    name: &Option<String>,
    obs: &ScreenState,
    report: &mut ReplayReport,
) -> Option<f64> {
    let name = name.as_ref()?;
    match set.load_frame(name) {
        Ok(frame) if frame.dimensions() != obs.screenshot.dimensions() => {
            let ((w, h), (rw, rh)) = (obs.screenshot.dimensions(), frame.dimensions());
            report.resized.get_or_insert(format!("the screen is {w}x{h}, the recorded frames {rw}x{rh}"));
            Some(255.0)
        }
        Ok(frame) => Some(mean_abs_diff(&frame, &obs.screenshot)),
        Err(e) => {
            tracing::warn!("line {}: frame not compared: {e:#}", report.line);
            report.unreadable_frames.push(name.clone());
            None
        }
    }
}

async fn replay_one(
    set: &TrajectorySet,
    st: &StoredTrajectory,
    env: &mut GuiEnv,
) -> anyhow::Result<ReplayReport> {
    let t = &st.trajectory;
    let mut report = ReplayReport {
        line: st.line,
        task_id: t.task_id.clone(),
        seed: t.seed,
        reproduced: false,
        skipped: None,
        recorded: (t.outcome.status.to_string(), t.outcome.reward),
        replayed: ("env_error".into(), 0.0),
        frame_diffs: vec![],
        unreadable_frames: vec![],
        divergence: None,
        resized: None,
    };
    if t.outcome.status.is_infrastructure_failure() {
        report.skipped = Some(format!(
            "recorded {}: an infrastructure failure, not an outcome of the task",
            t.outcome.status
        ));
        report.replayed = ("not replayed".into(), 0.0);
        return Ok(report);
    }
    let diverge = |report: &mut ReplayReport, step: usize, what: String| {
        report.divergence.get_or_insert(Divergence { step, what });
    };
    env.set_max_steps(t.max_steps);
    let (mut obs, _) = match env.reset(t.seed).await {
        Ok(r) => r,
        Err(e) => {
            diverge(&mut report, 0, format!("reset failed: {e}"));
            return Ok(report);
        }
    };
    if obs.instruction != t.instruction {
        diverge(&mut report, 0, format!("instruction {:?} instead of {:?}", obs.instruction, t.instruction));
    }
    let mut total = 0.0;
    let mut status = crate::env::EpisodeStatus::Running;
    // The screens a judge sees besides the final one.
    let mut recent: Vec<std::sync::Arc<image::RgbImage>> = Vec::new();
    for (i, step) in t.steps.iter().enumerate() {
        recent.push(obs.screenshot.clone());
        if let Some(d) = frame_diff(set, &step.frame, &obs, &mut report) {
            report.frame_diffs.push(d);
            if d > FRAME_TOLERANCE {
                let why = match &report.resized {
                    Some(r) => format!("{r} (the task's viewport changed?)"),
                    None => format!("the screen before step {i} differs (mean abs diff {d:.2})"),
                };
                diverge(&mut report, i, why);
            }
        }
        let out = match GuiAction::parse(&step.action) {
            Ok(a) => env.step(&a).await,
            Err(e) => {
                // A policy's unparsable answer is recorded with the error it got; one
                // without is an action that was taken as recorded and reads no more.
                if step.action_error.is_none() {
                    let why = format!(
                        "step {i}'s action {:?} does not parse ({e}), though it was taken when recorded",
                        step.action
                    );
                    diverge(&mut report, i, why);
                }
                env.step_text(&step.action).await
            }
        };
        let out = match out {
            Ok(o) => o,
            Err(e) => {
                diverge(&mut report, i, format!("the episode had already ended: {e}"));
                break;
            }
        };
        let (mut reward, mut step_status) = (out.reward, out.info.status);
        // A task scored by a reward model or judge: its last step is the scorer's, as when
        // recorded (a judge with a cache gives the recorded verdict again for the same screens).
        if let Some(learned) = env.task().learned_reward().filter(|l| l.decides) {
            if out.terminated || out.truncated {
                let history: Vec<String> = t.steps[..=i].iter().map(|s| s.action.clone()).collect();
                let mut shots = recent[recent.len().saturating_sub(learned.frames() - 1)..].to_vec();
                shots.push(out.obs.screenshot.clone());
                let scored = super::scoring::learned_verdict(learned, &shots, &t.instruction, &history)?;
                if let Some(e) = scored.failed {
                    // The judge being down says nothing about the task: like an episode
                    // recorded as an infrastructure failure, this one cannot be checked.
                    report.skipped = Some(format!("the judge gave no verdict at replay ({e}): not checked"));
                    report.replayed = ("judge_error".into(), 0.0);
                    return Ok(report);
                } else {
                    reward = scored.p;
                    if scored.success {
                        step_status = crate::env::EpisodeStatus::Success;
                    }
                }
            }
        }
        total += reward;
        status = step_status;
        if reward != step.reward || step_status != step.status {
            diverge(
                &mut report,
                i,
                format!(
                    "step {i} ({}) gave reward {} / {} instead of {} / {}",
                    step.action, reward, step_status, step.reward, step.status
                ),
            );
        }
        obs = out.obs;
        if out.terminated || out.truncated {
            if i + 1 < t.steps.len() {
                diverge(&mut report, i, format!("the episode ended after step {i}, the recording went on"));
            }
            break;
        }
    }
    let last = if t.final_frame_is_the_page() { &t.final_frame } else { &None };
    if let Some(d) = frame_diff(set, last, &obs, &mut report) {
        report.frame_diffs.push(d);
        if d > FRAME_TOLERANCE {
            diverge(&mut report, t.steps.len(), format!("the final screen differs (mean abs diff {d:.2})"));
        }
    }
    report.replayed = (status.to_string(), total);
    if report.replayed.0 != report.recorded.0 || report.replayed.1 != report.recorded.1 {
        let at = t.steps.len().saturating_sub(1);
        let what = format!("outcome {status} {total} instead of {} {}", t.outcome.status, t.outcome.reward);
        diverge(&mut report, at, what);
    }
    report.reproduced = report.divergence.is_none();
    Ok(report)
}
