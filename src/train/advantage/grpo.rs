//! Group-relative advantages (GRPO): each rollout is judged against the other rollouts of
//! the same task instance, so no value network is needed.
//!
//! ```text
//! GRPO:      A_i = (R_i − mean_g(R)) / (std_g(R) + eps)          adv_std = "group"
//! batch:     A_i = (R_i − mean_g(R)) / (std_batch(R − mean) + eps)  adv_std = "batch"
//! Dr. GRPO:  A_i =  R_i − mean_g(R)                              adv_std = "none"
//! ```
//! Every std is the population std (÷ n); [`AdvStd`] says why.
//!
//! Rollouts that ended as `env_error` (the browser failed, not the agent) are left out of
//! their group's mean and std and get no advantage (`None`): the trainer must not train
//! on them. A group whose counted rewards are all equal gives every member advantage 0,
//! so its policy-gradient term is zero (only the KL and entropy terms still act on it).

use super::reinforce_pp::batch_returns;
use super::{differ, mean_std, per_group, AdvStd, AdvantageStats, StepAdvantages};
use crate::rollout::TrainingBatch;

/// The population std over the batch of group-centered values: each group's values minus
/// that group's mean (`adv_std = "batch"`).
fn batch_std(groups: &[Vec<f64>]) -> f64 {
    let centered: Vec<f64> = groups
        .iter()
        .flat_map(|v| {
            let m = mean_std(v).0;
            v.iter().map(move |x| x - m)
        })
        .collect();
    mean_std(&centered).1
}

/// Advantages of every trajectory of `batch`, indexed `[group][trajectory]` like
/// `batch.groups[g].trajectories[i]`; `None` for `env_error` rollouts.
///
/// `std`: divide by the group's std (GRPO), the batch's, or not at all (Dr. GRPO). `eps`
/// keeps the division finite for all-equal groups (whose numerators are 0 anyway).
pub fn group_advantages(
    batch: &TrainingBatch,
    std: AdvStd,
    eps: f64,
) -> (Vec<Vec<Option<f64>>>, AdvantageStats) {
    let all: Vec<Vec<f64>> = batch.groups.iter().map(|g| g.valid_rewards()).collect();
    let batch_std = batch_std(&all);
    per_group(batch, |rewards| {
        // A_i = (R_i − mean) / (std + eps)   or   A_i = R_i − mean
        let (mean, group_std) = mean_std(rewards);
        move |r| match std {
            AdvStd::Group => (r - mean) / (group_std + eps),
            AdvStd::Batch => (r - mean) / (batch_std + eps),
            AdvStd::None => r - mean,
        }
    })
}

/// Step-level credit for the group-relative kinds (`step_credit = "discounted"`): each
/// step's discounted return, normalized within its group like GRPO's episode rewards,
/// over the pooled steps of the group's counted rollouts:
///
/// ```text
/// G_{i,t} = Σ_{k ≥ t} γ^{k−t} r_{i,k}          (r: the step rewards, summing to R_i)
/// A_{i,t} = (G_{i,t} − mean_{g}(G)) / (std + eps)   mean, std over every step of every
///                                              counted rollout of group g ("group"); std
///                                              over the batch's centered G ("batch");
///                                              no division ("none")
/// ```
/// With γ = 1 and one-step episodes this is GRPO's advantage; a longer rollout weighs
/// more in its group's mean (it has more steps). A group with one counted rollout gets 0
/// for every step: a group-relative baseline over one sample is the sample itself (the
/// pooled mean of its own steps would rank them by position alone, a late step's
/// discounted return being larger). A group whose pooled returns are all equal gets
/// exactly 0 too ([`super::carries_signal`]).
pub fn discounted_group_advantages(
    batch: &TrainingBatch,
    gamma: f64,
    std: AdvStd,
    eps: f64,
) -> (StepAdvantages, AdvantageStats) {
    let mut st = AdvantageStats { groups: batch.groups.len(), ..Default::default() };
    let returns = batch_returns(batch, gamma);
    let pooled: Vec<Vec<f64>> =
        returns.iter().map(|row| row.iter().flatten().flatten().copied().collect()).collect();
    let b_std = batch_std(&pooled);
    let (mut baselines, mut relative, mut advs) = (Vec::new(), Vec::new(), Vec::new());
    let mut out = Vec::with_capacity(batch.groups.len());
    for ((g, row), pool) in batch.groups.iter().zip(returns).zip(&pooled) {
        let rewards = g.valid_rewards();
        st.env_errors += g.trajectories.len() - rewards.len();
        st.empty_groups += usize::from(rewards.is_empty());
        st.counted += rewards.len();
        let (mean, g_std) = mean_std(pool);
        if !pool.is_empty() {
            baselines.push(mean);
        }
        let scale = match std {
            AdvStd::Group => g_std + eps,
            AdvStd::Batch => b_std + eps,
            AdvStd::None => 1.0,
        };
        // One counted rollout, or nothing to tell apart: no signal, exactly 0.
        let silent = rewards.len() < 2 || !differ(pool);
        out.push(
            row.into_iter()
                .map(|r| {
                    r.map(|gs| {
                        let a: Vec<f64> =
                            gs.iter().map(|x| if silent { 0.0 } else { (x - mean) / scale }).collect();
                        relative.extend(gs.iter().map(|x| x - mean));
                        advs.extend(&a);
                        a
                    })
                })
                .collect(),
        );
    }
    st.all_equal_groups = super::silent_groups(&out);
    st.baseline_mean = mean_std(&baselines).0;
    (st.relative_reward_mean, st.relative_reward_std) = mean_std(&relative);
    (st.adv_mean, st.adv_std) = mean_std(&advs);
    (out, st)
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
        let (a, st) = group_advantages(&batch(), AdvStd::Group, eps);
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
        let (a, st) = group_advantages(&batch(), AdvStd::None, 1e-6);
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
        let (a, st) = group_advantages(&with, AdvStd::Group, 1e-6);
        let (b, _) = group_advantages(&without, AdvStd::Group, 1e-6);
        assert_eq!(a[0][0], b[0][0]);
        assert_eq!(a[0][2], b[0][1]);
        assert_eq!(a[0][1], None);
        assert!(close(st.baseline_mean, 0.5));
    }

    #[test]
    fn batch_std_divides_by_one_scale_for_all_groups() {
        // adv_std = "batch": the std of R − mean_g over every counted rollout of the batch,
        // sqrt((4·0.25 + 3·0 + 4/9 + 2·1/9) / 10) = sqrt(1/6) (population), for all groups.
        let eps = 1e-6;
        let (a, _) = group_advantages(&batch(), AdvStd::Batch, eps);
        let s = (1.0f64 / 6.0).sqrt() + eps;
        assert!(close(a[0][0].unwrap(), 0.5 / s) && close(a[0][1].unwrap(), -0.5 / s));
        assert_eq!(a[1], vec![Some(0.0); 3]);
        assert!(close(a[2][0].unwrap(), (2.0 / 3.0) / s) && close(a[2][3].unwrap(), (-1.0 / 3.0) / s));
        assert_eq!(a[2][2], None);
    }

    fn stepped(step_rewards: &[f64], outcome: f64, status: EpisodeStatus) -> Trajectory {
        use crate::rollout::TrajStep;
        let steps =
            step_rewards.iter().map(|&r| TrajStep::new("click(1, 1)", r, EpisodeStatus::Running)).collect();
        let o = Outcome { reward: outcome, status, steps: step_rewards.len() as u32, error: None };
        Trajectory::new("t", 0, steps, o)
    }

    #[test]
    fn discounted_step_credit_by_hand() {
        // γ = 0.5. Group 0: a: r = [0, 0, 1] → G = [0.25, 0.5, 1]; b: step rewards [0, 0] but
        // a training reward of −1 (the last step carries it) → r = [0, −1], G = [−0.5, −1];
        // an env_error (left out). Pooled: mean 0.05, population variance
        // (0.04 + 0.2025 + 0.9025 + 0.3025 + 1.1025) / 5 = 0.51.
        // Group 1: c: G = [1], d: G = [0]: mean 0.5, std 0.5 → A = ±1.
        let g = |id: u64, t: Vec<Trajectory>| Group {
            task_id: "t".into(),
            seed: id,
            id: Some(id),
            trajectories: t,
        };
        let b = TrainingBatch {
            groups: vec![
                g(
                    0,
                    vec![
                        stepped(&[0.0, 0.0, 1.0], 1.0, Success),
                        stepped(&[0.0, 0.0], -1.0, Fail),
                        stepped(&[0.0], 0.0, EnvError),
                    ],
                ),
                g(1, vec![stepped(&[1.0], 1.0, Success), stepped(&[0.0], 0.0, Fail)]),
            ],
        };
        let (a, st) = discounted_group_advantages(&b, 0.5, AdvStd::Group, 0.0);
        let s0 = 0.51f64.sqrt();
        let want_a = [0.25, 0.5, 1.0].map(|x| (x - 0.05) / s0);
        let want_b = [-0.5, -1.0].map(|x| (x - 0.05) / s0);
        for (got, want) in [(&a[0][0], &want_a[..]), (&a[0][1], &want_b[..])] {
            for (x, w) in got.as_ref().unwrap().iter().zip(want) {
                assert!(close(*x, *w), "{x} vs {w}");
            }
        }
        assert!(a[0][2].is_none());
        assert_eq!((a[1][0].as_deref(), a[1][1].as_deref()), (Some(&[1.0][..]), Some(&[-1.0][..])));
        assert_eq!((st.counted, st.env_errors, st.groups), (4, 1, 2));
        // "none": G − mean_g; "batch": divided by the std of all 7 centered returns,
        // variance (0.51·5 + 0.25·2) / 7 = 3.05 / 7.
        let (n, _) = discounted_group_advantages(&b, 0.5, AdvStd::None, 0.0);
        assert!(close(n[0][0].as_ref().unwrap()[2], 0.95) && close(n[1][1].as_ref().unwrap()[0], -0.5));
        let (bt, _) = discounted_group_advantages(&b, 0.5, AdvStd::Batch, 0.0);
        let sb = (3.05f64 / 7.0).sqrt();
        assert!(
            close(bt[0][1].as_ref().unwrap()[1], -1.05 / sb)
                && close(bt[1][0].as_ref().unwrap()[0], 0.5 / sb)
        );
        // γ = 1 on one-step episodes is GRPO.
        let (one, _) = discounted_group_advantages(&b, 1.0, AdvStd::Group, 1e-6);
        let (grpo, _) = group_advantages(&b, AdvStd::Group, 1e-6);
        assert!(close(one[1][0].as_ref().unwrap()[0], grpo[1][0].unwrap()));
    }

    #[test]
    fn one_counted_rollout_under_discounted_step_credit_gets_zero() {
        // γ = 0.5. Group 0 holds one counted rollout, r = [0, 0, 1] → G = [0.25, 0.5, 1],
        // beside an env_error. Its pooled mean 7/12 is a baseline over that one sample:
        // (G − 7/12) / std would rank its steps by position alone (−, −, +). A
        // group-relative baseline over one sample is the sample itself: A = [0, 0, 0].
        // Group 1 (two rollouts, G = [1] and [0]) is untouched: mean 0.5, std 0.5, A = ±1.
        let g = |id: u64, t: Vec<Trajectory>| Group {
            task_id: "t".into(),
            seed: id,
            id: Some(id),
            trajectories: t,
        };
        let b = TrainingBatch {
            groups: vec![
                g(0, vec![stepped(&[0.0, 0.0, 1.0], 1.0, Success), stepped(&[0.0], 0.0, EnvError)]),
                g(1, vec![stepped(&[1.0], 1.0, Success), stepped(&[0.0], 0.0, Fail)]),
            ],
        };
        for std in [AdvStd::Group, AdvStd::Batch, AdvStd::None] {
            let (a, st) = discounted_group_advantages(&b, 0.5, std, 1e-6);
            assert_eq!(a[0][0].as_deref(), Some(&[0.0, 0.0, 0.0][..]), "{std:?}");
            assert!(a[0][1].is_none());
            let (x, y) = (a[1][0].as_ref().unwrap()[0], a[1][1].as_ref().unwrap()[0]);
            assert!(x > 0.0 && close(x, -y), "{std:?}: {x} {y}");
            assert_eq!((st.counted, st.all_equal_groups), (3, 1), "{std:?}");
        }
        let (a, _) = discounted_group_advantages(&b, 0.5, AdvStd::Group, 1e-6);
        assert!(close(a[1][0].as_ref().unwrap()[0], 0.5 / (0.5 + 1e-6)));
    }

    #[test]
    fn empty_batch() {
        let (a, st) = group_advantages(&TrainingBatch::default(), AdvStd::Group, 1e-6);
        assert!(a.is_empty());
        assert_eq!(st, AdvantageStats::default());
    }
}
