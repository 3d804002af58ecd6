//! REINFORCE++ (Hu 2025): no critic and no group baseline; each step's return is the
//! discounted sum of the rewards from that step on, and the returns of the whole batch
//! are whitened, which is what keeps the update's scale steady across batches.
//!
//! ```text
//! G_t = Σ_{k ≥ t} γ^{k−t} r_k                      (r_k: the step's reward; the episode's
//!                                                 training reward is the sum of its r_k)
//! A_t = (G_t − mean_batch G) / (std_batch G + eps)  (population std over every step of
//!                                                 every counted rollout)
//! ```
//!
//! The paper also folds a per-token KL penalty into the rewards; here the KL stays a loss
//! term (`[algo] beta`), as for every other kind.

use super::{mean_std, AdvantageStats, StepAdvantages};
use crate::rollout::{Group, TrainingBatch, Trajectory};

/// The per-step rewards of `t`, with the last step carrying whatever makes them sum to the
/// episode's training reward (which the truncation / give-up corrections may have set).
pub fn step_rewards(t: &Trajectory) -> Vec<f64> {
    let mut r: Vec<f64> = t.steps.iter().map(|s| s.reward).collect();
    if let Some(last) = r.last_mut() {
        let sum: f64 = t.steps.iter().map(|s| s.reward).sum();
        *last += t.outcome.reward - sum;
    }
    r
}

/// Discounted returns `G_t = r_t + γ G_{t+1}` of a reward sequence.
pub fn discounted_returns(rewards: &[f64], gamma: f64) -> Vec<f64> {
    let mut g = vec![0.0; rewards.len()];
    let mut acc = 0.0;
    for t in (0..rewards.len()).rev() {
        acc = rewards[t] + gamma * acc;
        g[t] = acc;
    }
    g
}

/// Each step's discounted return from that step on, `[trajectory][step]`; `None` for
/// rollouts that failed through no fault of the agent (left out of every statistic).
pub fn group_returns(group: &Group, gamma: f64) -> Vec<Option<Vec<f64>>> {
    let of = |t: &Trajectory| {
        (!t.outcome.status.is_infrastructure_failure()).then(|| discounted_returns(&step_rewards(t), gamma))
    };
    group.trajectories.iter().map(of).collect()
}

/// [`group_returns`] of every group, `[group][trajectory][step]`.
pub fn batch_returns(batch: &TrainingBatch, gamma: f64) -> Vec<Vec<Option<Vec<f64>>>> {
    batch.groups.iter().map(|g| group_returns(g, gamma)).collect()
}

/// Batch-whitened discounted returns, `[group][trajectory][step]`; `None` for `env_error`.
pub fn reinforce_pp_advantages(
    batch: &TrainingBatch,
    gamma: f64,
    eps: f64,
) -> (StepAdvantages, AdvantageStats) {
    let mut st = AdvantageStats { groups: batch.groups.len(), ..Default::default() };
    let returns = batch_returns(batch, gamma);
    let all: Vec<f64> = returns.iter().flatten().flatten().flatten().copied().collect();
    let (mean, std) = mean_std(&all);
    let mut advs = Vec::new();
    let out = returns
        .into_iter()
        .map(|row| {
            row.into_iter()
                .map(|r| {
                    r.map(|g| {
                        let a: Vec<f64> = g.iter().map(|x| (x - mean) / (std + eps)).collect();
                        advs.extend(&a);
                        a
                    })
                })
                .collect()
        })
        .collect();
    for g in &batch.groups {
        let rewards = g.valid_rewards();
        st.env_errors += g.trajectories.len() - rewards.len();
        st.empty_groups += usize::from(rewards.is_empty());
        st.counted += rewards.len();
    }
    // The baseline is the batch's: a group of equal rewards still has signal.
    st.all_equal_groups = super::silent_groups(&out);
    st.baseline_mean = mean;
    (st.relative_reward_mean, st.relative_reward_std) = (0.0, std);
    (st.adv_mean, st.adv_std) = mean_std(&advs);
    (out, st)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::env::EpisodeStatus;
    use crate::rollout::{Group, Outcome, TrajStep};
    use EpisodeStatus::{EnvError, Fail, Running, Success};

    fn traj(step_rewards: &[f64], outcome: f64, status: EpisodeStatus) -> Trajectory {
        let steps = step_rewards.iter().map(|&r| TrajStep::new("click(1, 1)", r, Running)).collect();
        Trajectory::new(
            "t",
            0,
            steps,
            Outcome { reward: outcome, status, steps: step_rewards.len() as u32, error: None },
        )
    }

    #[test]
    fn discounted_and_whitened_by_hand() {
        // γ = 0.5. Rollout a: 3 steps, rewards 0, 0, 1 (outcome 1): G = [0.25, 0.5, 1].
        // Rollout b: 2 steps, step rewards 0, 0 but a training reward of −1 (a give-up
        // scored by the trainer): the last step carries it, r = [0, −1], G = [−0.5, −1].
        // Rollout c is an env_error: no advantage, not in the statistics.
        let batch = TrainingBatch {
            groups: vec![Group {
                task_id: "t".into(),
                seed: 0,
                id: None,
                trajectories: vec![
                    traj(&[0.0, 0.0, 1.0], 1.0, Success),
                    traj(&[0.0, 0.0], -1.0, Fail),
                    traj(&[0.0], 0.0, EnvError),
                ],
            }],
        };
        let (a, st) = reinforce_pp_advantages(&batch, 0.5, 0.0);
        // Returns {0.25, 0.5, 1, −0.5, −1}: mean 0.05, population variance
        // (0.04 + 0.2025 + 0.9025 + 0.3025 + 1.1025) / 5 = 0.51, std 0.7141428.
        let (m, s) = (0.05, 0.51f64.sqrt());
        let want_a = [0.25, 0.5, 1.0].map(|g| (g - m) / s);
        let want_b = [-0.5, -1.0].map(|g| (g - m) / s);
        let got_a = a[0][0].as_ref().unwrap();
        let got_b = a[0][1].as_ref().unwrap();
        for (g, w) in got_a.iter().zip(want_a).chain(got_b.iter().zip(want_b)) {
            assert!((g - w).abs() < 1e-12, "{g} vs {w}");
        }
        assert!(a[0][2].is_none());
        assert_eq!((st.counted, st.env_errors), (2, 1));
        assert!(st.adv_mean.abs() < 1e-12 && (st.adv_std - 1.0).abs() < 1e-12, "{st:?}");
    }
}
