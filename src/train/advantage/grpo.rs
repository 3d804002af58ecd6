//! Group-relative advantages (GRPO): each rollout is judged against the other rollouts of
//! the same task instance, so no value network is needed.
//!
//! ```text
//! GRPO:      A_i = (R_i − mean_g(R)) / (std_g(R) + eps)      std: population (÷ n)
//! Dr. GRPO:  A_i =  R_i − mean_g(R)                          (scale_std = false)
//! ```
//!
//! Rollouts that ended as `env_error` (the browser failed, not the agent) are left out of
//! their group's mean and std and get no advantage (`None`): the trainer must not train
//! on them. A group whose counted rewards are all equal gives every member advantage 0,
//! so its policy-gradient term is zero (only the KL and entropy terms still act on it).

use super::{mean_std, per_group, AdvantageStats};
use crate::rollout::TrainingBatch;

/// Advantages of every trajectory of `batch`, indexed `[group][trajectory]` like
/// `batch.groups[g].trajectories[i]`; `None` for `env_error` rollouts.
///
/// `scale_std`: divide by the group's std (GRPO) or not (Dr. GRPO). `eps` keeps the
/// division finite for all-equal groups (whose numerators are 0 anyway).
pub fn group_advantages(
    batch: &TrainingBatch,
    scale_std: bool,
    eps: f64,
) -> (Vec<Vec<Option<f64>>>, AdvantageStats) {
    per_group(batch, |rewards| {
        // A_i = (R_i − mean) / (std + eps)   or   A_i = R_i − mean
        let (mean, std) = mean_std(rewards);
        move |r| if scale_std { (r - mean) / (std + eps) } else { r - mean }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::env::EpisodeStatus;
    use crate::rollout::{Group, Outcome, Trajectory};

    fn traj(reward: f64, status: EpisodeStatus) -> Trajectory {
        Trajectory::new("t", 0, vec![], Outcome { reward, status, steps: 1, error: None })
    }

    fn group(seed: u64, rs: &[(f64, EpisodeStatus)]) -> Group {
        Group {
            task_id: "t".into(),
            seed,
            id: Some(seed),
            trajectories: rs.iter().map(|&(r, s)| traj(r, s)).collect(),
        }
    }

    use EpisodeStatus::{EnvError, Fail, Success};

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-12
    }

    fn batch() -> TrainingBatch {
        TrainingBatch {
            groups: vec![
                // g0: rewards {1, 0, 0, 1}: mean 0.5, population std 0.5.
                group(0, &[(1.0, Success), (0.0, Fail), (0.0, Fail), (1.0, Success)]),
                // g1: all equal {1, 1, 1}: advantages 0.
                group(1, &[(1.0, Success), (1.0, Success), (1.0, Success)]),
                // g2: {1, 0, 0} counted, the env_error (reward 0) is left out:
                //     mean 1/3, std sqrt(((2/3)² + 2(1/3)²)/3) = sqrt(2)/3.
                group(2, &[(1.0, Success), (0.0, Fail), (0.0, EnvError), (0.0, Fail)]),
                // g3: nothing counted.
                group(3, &[(0.0, EnvError)]),
            ],
        }
    }

    #[test]
    fn grpo_advantages_with_std_scaling() {
        let eps = 1e-6;
        let (a, st) = group_advantages(&batch(), true, eps);
        // g0: (1 − 0.5) / (0.5 + eps) = ±0.5 / 0.500001
        let h = 0.5 / (0.5 + eps);
        assert!(close(a[0][0].unwrap(), h) && close(a[0][1].unwrap(), -h));
        assert!(close(a[0][2].unwrap(), -h) && close(a[0][3].unwrap(), h));
        // g1: (1 − 1) / (0 + eps) = 0 for everyone.
        assert_eq!(a[1], vec![Some(0.0); 3]);
        // g2: (1 − 1/3) / (sqrt(2)/3 + eps), (0 − 1/3) / (sqrt(2)/3 + eps), None, ...
        let s2 = 2f64.sqrt() / 3.0;
        assert!(close(a[2][0].unwrap(), (2.0 / 3.0) / (s2 + eps)));
        assert!(close(a[2][1].unwrap(), (-1.0 / 3.0) / (s2 + eps)));
        assert_eq!(a[2][2], None);
        assert!(close(a[2][3].unwrap(), (-1.0 / 3.0) / (s2 + eps)));
        assert_eq!(a[3], vec![None]);
        assert_eq!((st.groups, st.all_equal_groups, st.empty_groups), (4, 1, 1));
        assert_eq!((st.counted, st.env_errors), (10, 2));
        // baseline mean over non-empty groups: (0.5 + 1 + 1/3) / 3 = 11/18
        assert!(close(st.baseline_mean, 11.0 / 18.0));
        // relative rewards: ±0.5 ×4, 0 ×3, 2/3, −1/3, −1/3: mean 0,
        // std = sqrt((4·0.25 + 4/9 + 2/9) / 10) = sqrt(1/6)
        assert!(close(st.relative_reward_mean, 0.0));
        assert!(close(st.relative_reward_std, (1.0f64 / 6.0).sqrt()));
        // advantages: ±h ×4, 0 ×3, and g2's three, summing to 0 => mean 0.
        assert!(close(st.adv_mean, 0.0));
        let a2 = [(2.0 / 3.0) / (s2 + eps), (-1.0 / 3.0) / (s2 + eps)];
        let var = (4.0 * h * h + a2[0] * a2[0] + 2.0 * a2[1] * a2[1]) / 10.0;
        assert!(close(st.adv_std, var.sqrt()));
    }

    #[test]
    fn dr_grpo_advantages_without_std_scaling() {
        let (a, st) = group_advantages(&batch(), false, 1e-6);
        // A_i = R_i − mean
        let g0: Vec<f64> = a[0].iter().map(|x| x.unwrap()).collect();
        assert_eq!(g0, vec![0.5, -0.5, -0.5, 0.5]);
        assert_eq!(a[1], vec![Some(0.0); 3]);
        assert!(close(a[2][0].unwrap(), 2.0 / 3.0) && close(a[2][1].unwrap(), -1.0 / 3.0));
        assert_eq!(a[2][2], None);
        // without scaling the advantages are the relative rewards
        assert!(close(st.adv_std, st.relative_reward_std));
    }

    #[test]
    fn env_error_does_not_move_the_baseline() {
        // Same rewards with and without an env_error member (whose reward 5 would shift it).
        let with = TrainingBatch { groups: vec![group(0, &[(1.0, Success), (5.0, EnvError), (0.0, Fail)])] };
        let without = TrainingBatch { groups: vec![group(0, &[(1.0, Success), (0.0, Fail)])] };
        let (a, st) = group_advantages(&with, true, 1e-6);
        let (b, _) = group_advantages(&without, true, 1e-6);
        assert_eq!(a[0][0], b[0][0]);
        assert_eq!(a[0][2], b[0][1]);
        assert_eq!(a[0][1], None);
        assert!(close(st.baseline_mean, 0.5));
    }

    #[test]
    fn empty_batch() {
        let (a, st) = group_advantages(&TrainingBatch::default(), true, 1e-6);
        assert!(a.is_empty());
        assert_eq!(st, AdvantageStats::default());
    }
}
