//! Rollout trees (`[algo] branch = { at = "random" | "first_divergence", k = K }`): after
//! each collection, K more rollouts of every group start from one exact mid-episode state
//! of a rollout of that group, reached by replaying its seed and first `t` actions
//! ([`crate::rollout::Prefix`], checked screen by screen).
//!
//! - **Why.** A flat group compares whole episodes from the reset screen, so on a long task
//!   most of its env steps retrace the easy start, and GiGPO's step groups form only where
//!   rollouts happen to meet the same screen. Branching from a shared state gives that
//!   state K + 1 rollouts (a true same-state step group) and spends the policy's steps in
//!   the middle of the task.
//! - **Where.** `random`: a counted rollout of the group with at least two steps, drawn at
//!   random, at a step t drawn from 1 to its last step. `first_divergence`: two rollouts of
//!   the group that took the same actions up to step t and different ones at t are in the
//!   same state there, and that state decided between them; of the pairs whose rewards
//!   differ (else of all pairs), the one that parted latest gives t. A group whose rollouts
//!   part at once (t = 0) is not branched: its own start is that state.
//! - **What a branch is.** A whole episode of the group's task and seed, in the group (its
//!   id): its first t steps are the source's, replayed and marked
//!   [`crate::rollout::TrajStep::prefix`] (never trained on, and out of GiGPO's step groups),
//!   the rest sampled by the policy. Its reward is the episode's, comparable with the
//!   group's other rollouts.
//! - **Cost.** Replayed steps are real env steps and count in `env_steps`
//!   (`branch_replayed_steps` says how many). Branched rollouts are not in the rollout
//!   figures (success rate, episode length), which stay those of the flat groups;
//!   `branch_success_rate` is theirs.

use crate::env::EpisodeStatus;
use crate::rollout::{Job, Prefix, Recorded, TrainingBatch, Trajectory};
use crate::tasks::Task;
use rand::Rng;
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// `[algo] branch`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BranchConfig {
    /// Where each group is branched.
    pub at: BranchAt,
    /// K: rollouts branched from each group's chosen state.
    pub k: usize,
}

/// How the branch point of a group is chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BranchAt {
    /// A random step of a random rollout.
    Random,
    /// The latest step at which two rollouts that shared every action before it parted.
    FirstDivergence,
}

impl BranchConfig {
    /// The config's problems, as messages naming the key.
    pub fn check(&self, check: &mut dyn FnMut(bool, String)) {
        check(
            (1..=64).contains(&self.k),
            format!("algo.branch.k must be 1 to 64 rollouts branched per group, got {}", self.k),
        );
    }
}

/// A branch point of one group: (member, step t ≥ 1), or `None` when the group has none.
/// `members` are the group's rollouts; infrastructure failures and branched rollouts are
/// never sources.
pub fn branch_point(at: BranchAt, members: &[&Trajectory], rng: &mut impl Rng) -> Option<(usize, usize)> {
    let sources: Vec<usize> = (0..members.len())
        .filter(|&i| {
            let t = members[i];
            !t.outcome.status.is_infrastructure_failure() && t.branch_point() == 0
        })
        .collect();
    match at {
        BranchAt::Random => {
            let long: Vec<usize> = sources.into_iter().filter(|&i| members[i].steps.len() >= 2).collect();
            if long.is_empty() {
                return None;
            }
            let i = long[rng.gen_range(0..long.len())];
            Some((i, rng.gen_range(1..members[i].steps.len())))
        }
        BranchAt::FirstDivergence => {
            // (parted at, rewards differ, source): the latest parting, preferring pairs
            // whose rewards differ.
            let mut best: Option<(bool, usize, usize)> = None;
            for (a, &i) in sources.iter().enumerate() {
                for &j in &sources[a + 1..] {
                    let (x, y) = (members[i], members[j]);
                    let Some(t) = parted_at(x, y) else { continue };
                    let key = (x.outcome.reward != y.outcome.reward, t, i);
                    if best.is_none_or(|b| (key.0, key.1) > (b.0, b.1)) {
                        best = Some(key);
                    }
                }
            }
            best.filter(|b| b.1 >= 1).map(|(_, t, i)| (i, t))
        }
    }
}

/// The step at which two rollouts of one instance first took different actions, where
/// both took one (`None` when one's actions are the other's first ones).
fn parted_at(x: &Trajectory, y: &Trajectory) -> Option<usize> {
    x.steps.iter().zip(&y.steps).position(|(a, b)| a.action != b.action)
}

/// The branched jobs of a collection: K per group that has a branch point, in the group,
/// starting from the chosen rollout's state. Also returns how many groups had none.
pub fn jobs(
    cfg: BranchConfig,
    recs: &[Recorded],
    tasks: &[Arc<dyn Task>],
    rng: &mut impl Rng,
) -> anyhow::Result<(Vec<Job>, usize)> {
    let (batch, index) = TrainingBatch::group(recs.iter().map(|r| &r.trajectory));
    let mut out = Vec::new();
    let mut none = 0;
    for (group, members) in batch.groups.iter().zip(&index) {
        let trajs: Vec<&Trajectory> = group.trajectories.iter().collect();
        let Some((m, t)) = branch_point(cfg.at, &trajs, rng) else {
            none += 1;
            continue;
        };
        let source = &recs[members[m]];
        let task = tasks.iter().find(|x| x.id() == group.task_id).ok_or_else(|| {
            anyhow::anyhow!("branching: task {} is not among the run's tasks", group.task_id)
        })?;
        let prefix = Arc::new(Prefix::of(source, t)?);
        for _ in 0..cfg.k {
            out.push(Job {
                task: task.clone(),
                seed: group.seed,
                group: group.id,
                prefix: Some(prefix.clone()),
                stream: None,
            });
        }
    }
    Ok((out, none))
}

/// What rollout trees added to an iteration's collections.
#[derive(Debug, Clone, Copy, Default)]
pub struct BranchReport {
    /// Branched rollouts.
    pub rollouts: usize,
    /// Steps replayed to reach their branch points (env steps, counted in `env_steps`).
    pub replayed_steps: usize,
    /// Branched rollouts that ended as an infrastructure failure (a prefix that diverged
    /// from its recording is one).
    pub failed: usize,
    /// Counted branched rollouts (not infrastructure failures).
    pub counted: usize,
    /// Of those, the ones that succeeded.
    pub successes: usize,
    /// Groups with no branch point.
    pub unbranched_groups: usize,
}

impl BranchReport {
    pub(crate) fn add(&mut self, recs: &[Recorded]) {
        for r in recs {
            let t = &r.trajectory;
            self.rollouts += 1;
            self.replayed_steps += t.branch_point();
            if t.outcome.status.is_infrastructure_failure() {
                self.failed += 1;
            } else {
                self.counted += 1;
                self.successes += usize::from(t.outcome.status == EpisodeStatus::Success);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::env::EpisodeStatus;
    use crate::rollout::{Outcome, TrajStep};
    use rand::SeedableRng;

    fn traj(actions: &[&str], reward: f64, status: EpisodeStatus) -> Trajectory {
        let steps = actions.iter().map(|a| TrajStep::new(*a, 0.0, EpisodeStatus::Running)).collect();
        let outcome = Outcome { reward, status, steps: actions.len() as u32, error: None };
        Trajectory::new("t", 1, steps, outcome)
    }

    fn at(at: BranchAt, ts: &[Trajectory], seed: u64) -> Option<(usize, usize)> {
        let refs: Vec<&Trajectory> = ts.iter().collect();
        branch_point(at, &refs, &mut rand_chacha::ChaCha8Rng::seed_from_u64(seed))
    }

    #[test]
    fn first_divergence_takes_the_latest_parting_of_a_success_and_a_failure() {
        use EpisodeStatus::{Fail, Success};
        let ts = [
            traj(&["a", "b", "c", "d"], -1.0, Fail),
            traj(&["a", "b", "x"], 1.0, Success),
            // parts later from the first, but both failed: a success/failure pair wins
            traj(&["a", "b", "c", "y"], -1.0, Fail),
        ];
        assert_eq!(at(BranchAt::FirstDivergence, &ts, 0), Some((0, 2)));
        // with equal rewards everywhere the latest parting of any pair is taken
        let same = [
            traj(&["a", "b", "c"], -1.0, Fail),
            traj(&["a", "x"], -1.0, Fail),
            traj(&["a", "b", "y"], -1.0, Fail),
        ];
        assert_eq!(at(BranchAt::FirstDivergence, &same, 0), Some((0, 2)));
    }

    #[test]
    fn a_group_that_parts_at_once_or_never_is_not_branched() {
        use EpisodeStatus::Fail;
        let at_once = [traj(&["a", "b"], -1.0, Fail), traj(&["x", "b"], -1.0, Fail)];
        assert_eq!(at(BranchAt::FirstDivergence, &at_once, 0), None);
        let identical = [traj(&["a", "b"], -1.0, Fail), traj(&["a", "b"], -1.0, Fail)];
        assert_eq!(at(BranchAt::FirstDivergence, &identical, 0), None);
    }

    #[test]
    fn random_points_fall_inside_counted_unbranched_rollouts() {
        use EpisodeStatus::{EnvError, Fail};
        let mut branched = traj(&["a", "b", "c"], -1.0, Fail);
        branched.steps[0].prefix = true;
        let ts = [
            traj(&["a"], -1.0, Fail),                   // too short to branch inside
            traj(&["a", "b", "c", "d"], 0.0, EnvError), // not counted
            branched,                                   // itself a branch
            traj(&["a", "b", "c"], -1.0, Fail),
        ];
        for seed in 0..50 {
            let (m, t) = at(BranchAt::Random, &ts, seed).unwrap();
            assert_eq!(m, 3);
            assert!((1..3).contains(&t), "{t}");
        }
        assert_eq!(at(BranchAt::Random, &ts[..3], 0), None);
    }

    #[test]
    fn k_is_checked() {
        let mut errors = Vec::new();
        BranchConfig { at: BranchAt::Random, k: 0 }.check(&mut |ok, msg| {
            if !ok {
                errors.push(msg)
            }
        });
        assert!(errors[0].contains("algo.branch.k"), "{errors:?}");
    }
}
