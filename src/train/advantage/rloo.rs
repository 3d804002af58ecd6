//! RLOO (REINFORCE leave-one-out, Ahmadian et al. 2024): each rollout's baseline is the
//! mean reward of the *other* rollouts of its group, so the baseline never contains the
//! rollout's own reward (unbiased) and no std division rescales the signal.
//!
//! ```text
//! A_i = R_i − (Σ_{j≠i} R_j) / (G − 1)  =  G/(G−1) · (R_i − mean_g R)
//! ```
//!
//! Only counted rollouts (not `env_error`) take part, so G is the number counted. A
//! group with a single counted rollout has no other rollout to compare with: advantage 0.

use super::{per_group, AdvantageStats};
use crate::rollout::TrainingBatch;

/// Leave-one-out advantages `[group][trajectory]`; `None` for `env_error` rollouts.
pub fn rloo_advantages(batch: &TrainingBatch) -> (Vec<Vec<Option<f64>>>, AdvantageStats) {
    per_group(batch, |rewards| {
        // A_i = R_i − mean of the others (0 when there are no others).
        let (n, sum) = (rewards.len() as f64, rewards.iter().sum::<f64>());
        move |r| if n > 1.0 { r - (sum - r) / (n - 1.0) } else { 0.0 }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::env::EpisodeStatus;
    use crate::rollout::{Group, Outcome, Trajectory};
    use EpisodeStatus::{EnvError, Fail, Success};

    fn group(rs: &[(f64, EpisodeStatus)]) -> Group {
        let t = |&(reward, status): &(f64, EpisodeStatus)| {
            Trajectory::new("t", 0, vec![], Outcome { reward, status, steps: 1, error: None })
        };
        Group { task_id: "t".into(), seed: 0, id: None, trajectories: rs.iter().map(t).collect() }
    }

    #[test]
    fn leave_one_out_by_hand() {
        let batch = TrainingBatch {
            groups: vec![
                // G = 2, {1, 0}: A_0 = 1 − 0 = 1, A_1 = 0 − 1 = −1.
                group(&[(1.0, Success), (0.0, Fail)]),
                // G = 3 counted, {1, −1, 0.5} (+ an env_error left out):
                //   A_0 = 1 − (−1 + 0.5)/2 = 1.25, A_1 = −1 − (1 + 0.5)/2 = −1.75,
                //   A_2 = 0.5 − (1 − 1)/2 = 0.5.
                group(&[(1.0, Success), (-1.0, Fail), (0.0, EnvError), (0.5, Success)]),
                // One counted rollout: nobody to compare with, A = 0.
                group(&[(1.0, Success), (0.0, EnvError)]),
            ],
        };
        let (a, st) = rloo_advantages(&batch);
        assert_eq!(a[0], [Some(1.0), Some(-1.0)]);
        assert_eq!(a[1], [Some(1.25), Some(-1.75), None, Some(0.5)]);
        assert_eq!(a[2], [Some(0.0), None]);
        assert_eq!((st.counted, st.env_errors, st.all_equal_groups), (6, 2, 1));
    }
}
