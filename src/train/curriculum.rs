//! Which task each group trains on (`[tasks] sampling`): uniformly, or by learning
//! progress.
//!
//! With many tasks, uniform sampling spends most rollouts on tasks the policy already
//! solves every time or cannot solve at all; neither gives a group-relative estimator any
//! signal (all rewards equal). `"progress"` draws a task in proportion to how learnable it
//! looks now, `p (1 − p)` with p its recent training success, mixed with a uniform share
//! (`progress_mix`) so that no task is starved and a task the policy forgot comes back.
//!
//! p is a posterior mean under a Beta(1, 1) prior over the task's recent training rollouts,
//! `(s + 1) / (n + 2)`, where s and n are success and episode counts that fade by
//! [`FADE`] each iteration (about the last ten iterations count). An unseen task has p =
//! 1/2, the most learnable, so every task is tried early. Infrastructure failures
//! (`env_error`, `policy_error`) do not count. The counts are part of the trainer state,
//! so a resumed run draws exactly what an uninterrupted one would.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// How the trainer picks the task of each group (`[tasks] sampling`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TaskSampling {
    /// Every task equally often.
    #[default]
    Uniform,
    /// In proportion to `p (1 − p)` of each task's recent success, mixed with uniform.
    Progress,
}

/// How much of a task's counts survives each iteration.
pub const FADE: f64 = 0.9;

/// A task's faded training counts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct TaskTally {
    /// Counted episodes (faded).
    pub episodes: f64,
    /// Of those, successes (faded).
    pub successes: f64,
}

impl TaskTally {
    /// The posterior-mean success `(s + 1) / (n + 2)`.
    pub fn success(&self) -> f64 {
        (self.successes + 1.0) / (self.episodes + 2.0)
    }

    /// How learnable the task looks: `p (1 − p)`, at most 1/4 (p = 1/2).
    pub fn learnability(&self) -> f64 {
        let p = self.success();
        p * (1.0 - p)
    }
}

/// Fade every task's counts by [`FADE`] and add one iteration's (task id → (counted
/// episodes, successes)).
pub fn update(tallies: &mut BTreeMap<String, TaskTally>, iteration: &BTreeMap<String, (usize, usize)>) {
    for t in tallies.values_mut() {
        t.episodes *= FADE;
        t.successes *= FADE;
    }
    for (id, &(n, s)) in iteration {
        let t = tallies.entry(id.clone()).or_default();
        t.episodes += n as f64;
        t.successes += s as f64;
    }
}

/// The probability of drawing each of `ids` under progress sampling: a share `mix` spread
/// evenly, the rest in proportion to each task's learnability. Sums to 1.
pub fn progress_weights(ids: &[String], tallies: &BTreeMap<String, TaskTally>, mix: f64) -> Vec<f64> {
    let l: Vec<f64> =
        ids.iter().map(|id| tallies.get(id).copied().unwrap_or_default().learnability()).collect();
    let total: f64 = l.iter().sum();
    let k = ids.len().max(1) as f64;
    l.iter().map(|x| mix / k + (1.0 - mix) * x / total.max(f64::MIN_POSITIVE)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("t{i}")).collect()
    }

    #[test]
    fn unseen_tasks_are_drawn_evenly() {
        let w = progress_weights(&ids(4), &BTreeMap::new(), 0.2);
        for x in &w {
            assert!((x - 0.25).abs() < 1e-12, "{w:?}");
        }
    }

    #[test]
    fn solved_and_hopeless_tasks_lose_weight_to_a_half_solved_one() {
        let mut t = BTreeMap::new();
        update(
            &mut t,
            &[("t0".to_string(), (64, 64)), ("t1".to_string(), (64, 0)), ("t2".to_string(), (64, 32))]
                .into_iter()
                .collect(),
        );
        let w = progress_weights(&ids(3), &t, 0.2);
        assert!((w.iter().sum::<f64>() - 1.0).abs() < 1e-12);
        assert!(w[2] > 0.75, "{w:?}");
        assert!((w[0] - w[1]).abs() < 1e-12, "all and none are equally unlearnable: {w:?}");
        // The uniform share keeps them alive: at least mix / k each.
        assert!(w[0] >= 0.2 / 3.0, "{w:?}");
        // Hand value: p = 65/66, l = 65/66²; p = 33/66 = 1/2, l = 1/4.
        let (l0, l2) = (65.0 / 66.0 / 66.0, 0.25);
        let expect0 = 0.2 / 3.0 + 0.8 * l0 / (2.0 * l0 + l2);
        assert!((w[0] - expect0).abs() < 1e-12, "{} vs {expect0}", w[0]);
    }

    #[test]
    fn counts_fade_so_a_forgotten_task_comes_back() {
        let mut t = BTreeMap::new();
        update(&mut t, &[("t0".to_string(), (100, 100))].into_iter().collect());
        let solved = t["t0"].learnability();
        for _ in 0..30 {
            update(&mut t, &BTreeMap::new());
        }
        assert!((t["t0"].episodes - 100.0 * FADE.powi(30)).abs() < 1e-9);
        assert!(t["t0"].learnability() > 10.0 * solved, "{:?}", t["t0"]);
    }
}
