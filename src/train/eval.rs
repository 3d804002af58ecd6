//! Evaluation on held-out seeds (validation: `[eval]`, and the test split), and the best
//! checkpoint (chosen on validation only).
//!
//! Every evaluation is a candidate for `best`, the starting policy's (iteration 0: the
//! random init, `[model] init`, or the behaviour-cloned policy) included: a run whose RL
//! lowered held-out success keeps pointing at the better starting checkpoint.

use super::config::TasksConfig;
use super::seeds::TEST_SEEDS;
use crate::env::EpisodeStatus;
use crate::policy::{Sampling, TrainablePolicy};
use crate::rollout::{Collector, Job};
use crate::tasks::Task;
use std::collections::BTreeMap;
use std::sync::Arc;

/// Greedy held-out results.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct EvalResult {
    /// Success rate.
    pub success: f64,
    /// Mean reward.
    pub reward: f64,
    /// Episodes left out: browsers failed at every try ([`EVAL_TRIES`]).
    pub lost: usize,
}

/// Tries an evaluation episode gets where its browser fails (`env_error`): the rate is
/// over the held-out seeds, not lowered by a crash.
pub const EVAL_TRIES: usize = 3;

impl EvalResult {
    /// Whether this beats `best` (higher success; at equal success, higher reward). The
    /// earlier checkpoint is kept on a tie.
    pub fn beats(&self, best: Option<(f64, f64)>) -> bool {
        match best {
            None => true,
            Some((s, r)) => self.success > s || (self.success == s && self.reward > r),
        }
    }
}

/// The held-out jobs: `episodes` task/seed pairs, round-robin over the tasks, grouped
/// task by task (switching an env to another task reloads its page).
pub fn eval_jobs(tasks: &[Arc<dyn Task>], cfg: &TasksConfig, episodes: usize) -> Vec<Job> {
    let e = &cfg.eval_seeds;
    let t = tasks.len() as u64;
    let mut order: Vec<u64> = (0..episodes as u64).collect();
    order.sort_by_key(|i| i % t);
    order
        .into_iter()
        .map(|i| Job::episode(tasks[(i % t) as usize].clone(), e.start + i % e.count.max(1)))
        .collect()
}

/// The test jobs: seeds [`TEST_SEEDS`]`..+per_task` of every task, task by task: the
/// seeds `guirl bench --episodes-per-task N` runs by default, the same for every policy.
pub fn test_jobs(tasks: &[Arc<dyn Task>], per_task: usize) -> Vec<Job> {
    tasks.iter().flat_map(|t| (0..per_task as u64).map(|i| Job::episode(t.clone(), TEST_SEEDS + i))).collect()
}

/// Greedy results as counts (a split's figures pool them over runs), and which episodes
/// succeeded (two policies run on the same seeds compare episode by episode).
#[derive(Debug, Clone, PartialEq)]
pub struct EvalCounts {
    /// Successful episodes.
    pub successes: usize,
    /// Episodes run to an outcome (the rate's denominator).
    pub episodes: usize,
    /// Episodes left out: their browsers failed at every try ([`EVAL_TRIES`]).
    pub lost: usize,
    /// Mean reward.
    pub reward: f64,
    /// The seeds of the successful episodes, by task id, ascending.
    pub won: BTreeMap<String, Vec<u64>>,
}

/// Greedy success rate and mean reward of `policy` on `jobs`, an episode whose browser
/// failed run again (up to [`EVAL_TRIES`] tries).
pub async fn evaluate(
    collector: &mut Collector,
    policy: &mut dyn TrainablePolicy,
    jobs: Vec<Job>,
) -> anyhow::Result<EvalResult> {
    let c = evaluate_counts(collector, policy, jobs).await?;
    Ok(EvalResult { success: c.successes as f64 / c.episodes.max(1) as f64, reward: c.reward, lost: c.lost })
}

/// [`evaluate`], as counts.
pub async fn evaluate_counts(
    collector: &mut Collector,
    policy: &mut dyn TrainablePolicy,
    jobs: Vec<Job>,
) -> anyhow::Result<EvalCounts> {
    let sampling = policy.sampling();
    policy.set_sampling(Sampling { greedy: true, ..sampling });
    let keep = collector.keep_frames;
    collector.keep_frames = false;
    let res = collector.collect_complete(policy, jobs, EVAL_TRIES).await;
    collector.keep_frames = keep;
    policy.set_sampling(sampling);
    let crate::rollout::Completed { recs, lost, .. } = res?;
    let successes = recs.iter().filter(|r| r.trajectory.outcome.status == EpisodeStatus::Success).count();
    let reward = recs.iter().map(|r| r.trajectory.outcome.reward).sum::<f64>() / recs.len().max(1) as f64;
    let mut won: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    for r in recs.iter().filter(|r| r.trajectory.outcome.status == EpisodeStatus::Success) {
        won.entry(r.trajectory.task_id.clone()).or_default().push(r.trajectory.seed);
    }
    won.values_mut().for_each(|s| s.sort_unstable());
    Ok(EvalCounts { successes, episodes: recs.len(), lost, reward, won })
}
