//! GAE (Schulman et al. 2016), PPO's advantages: per-step rewards and a critic's value of
//! every observation, the final one included.
//!
//! ```text
//! δ_t = r_t + γ V(s_{t+1}) − V(s_t)              (r_t: the step's reward; they sum to the
//!                                                episode's training reward)
//! A_t = δ_t + γλ A_{t+1}                         (A = 0 past the last step)
//! R_t = A_t + V(s_t)                             (the critic's regression target)
//!
//! after the last step T−1, V(s_T) is
//!   0                     the episode ended: success, fail, invalid action; or it hit the
//!                         step limit and `[algo] truncation_reward` scores that as an ending
//!   V(final observation)  the step limit cut it (truncated): the task was not over, so the
//!                         tail beyond the limit is bootstrapped from the critic
//!
//! normalize_advantages:  A ← (A − mean_batch A) / (std_batch A + eps)
//!                        (population std over every step of every counted rollout;
//!                        the returns R keep the raw A)
//! ```
//!
//! `env_error` / `policy_error` rollouts get no advantage (`None`) and stay out of every
//! statistic.

use super::reinforce_pp::step_rewards;
use super::{mean_std, AdvantageStats, StepAdvantages};
use crate::env::EpisodeStatus;
use crate::rollout::{TrainingBatch, Trajectory};
use crate::train::config::{AlgoConfig, PpoConfig};

/// The critic's values `[group][trajectory][t]` for t = 0..=T (T steps: each observation
/// acted on, then the final one); `None` or missing entries read as 0.
pub type StepValues = Vec<Vec<Option<Vec<f64>>>>;

/// GAE's coefficients.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GaeParams {
    /// γ: discount.
    pub gamma: f64,
    /// λ: 0 = one-step TD error, 1 = Monte-Carlo return minus V(s_t).
    pub lambda: f64,
    /// Whiten the advantages over the batch.
    pub normalize: bool,
    /// Added to the batch std when whitening.
    pub eps: f64,
    /// A truncated rollout is an ending (no bootstrap): `truncation_reward` is set.
    pub truncation_ends: bool,
}

impl GaeParams {
    /// The coefficients `[algo]` (γ, eps, truncation) and `[algo.ppo]` (λ, whitening) set.
    pub fn from_algo(a: &AlgoConfig, ppo: &PpoConfig) -> GaeParams {
        GaeParams {
            gamma: a.gamma,
            lambda: ppo.gae_lambda,
            normalize: ppo.normalize_advantages,
            eps: a.eps,
            truncation_ends: a.truncation_reward.is_some(),
        }
    }
}

/// Whether the tail of `t` beyond its last step is bootstrapped with V(final observation):
/// it was cut by the step limit (and the config does not score that as an ending), or it
/// never ended.
pub fn bootstraps(t: &Trajectory, truncation_ends: bool) -> bool {
    match t.outcome.status {
        EpisodeStatus::Truncated => !truncation_ends,
        EpisodeStatus::Running => true,
        _ => false,
    }
}

/// One trajectory: advantages and returns from its step rewards, the values `values[t]` =
/// V(s_t) of the observations acted on, and `next` = V(s_T) after the last step (0 for an
/// ending, the final observation's value for a bootstrap).
pub fn gae(rewards: &[f64], values: &[f64], next: f64, gamma: f64, lambda: f64) -> (Vec<f64>, Vec<f64>) {
    let n = rewards.len();
    let (mut adv, mut ret) = (vec![0.0; n], vec![0.0; n]);
    let (mut next_value, mut next_adv) = (next, 0.0);
    for t in (0..n).rev() {
        let v = values.get(t).copied().unwrap_or(0.0);
        // δ_t = r_t + γ V(s_{t+1}) − V(s_t);  A_t = δ_t + γλ A_{t+1};  R_t = A_t + V(s_t)
        let delta = rewards[t] + gamma * next_value - v;
        next_adv = delta + gamma * lambda * next_adv;
        adv[t] = next_adv;
        ret[t] = next_adv + v;
        next_value = v;
    }
    (adv, ret)
}

/// GAE over a batch: advantages `[group][trajectory][step]` (whitened when asked), the
/// returns (the critic's targets, from the raw advantages), and the statistics
/// (`baseline_mean`: mean V(s_t); `relative_reward_*`: the raw advantages).
pub struct GaeBatch {
    /// Advantages; `None` for rollouts not trained on.
    pub adv: StepAdvantages,
    /// Returns `R_t = A_t + V(s_t)` (raw `A`); `None` likewise.
    pub returns: StepAdvantages,
    /// Batch statistics.
    pub stats: AdvantageStats,
}

/// GAE for every counted rollout of `batch` with the critic's `values` (see the module docs).
pub fn gae_advantages(batch: &TrainingBatch, values: &StepValues, p: GaeParams) -> GaeBatch {
    let mut st = AdvantageStats { groups: batch.groups.len(), ..Default::default() };
    let (mut adv, mut returns) = (Vec::new(), Vec::new());
    let (mut raw, mut v_all) = (Vec::new(), Vec::new());
    for (g, group) in batch.groups.iter().enumerate() {
        let rewards = group.valid_rewards();
        st.env_errors += group.trajectories.len() - rewards.len();
        st.empty_groups += usize::from(rewards.is_empty());
        st.counted += rewards.len();
        let (mut adv_row, mut ret_row) = (Vec::new(), Vec::new());
        for (j, t) in group.trajectories.iter().enumerate() {
            if t.outcome.status.is_infrastructure_failure() {
                adv_row.push(None);
                ret_row.push(None);
                continue;
            }
            let none = Vec::new();
            let v = values.get(g).and_then(|r| r.get(j)).and_then(Option::as_ref).unwrap_or(&none);
            let n = t.steps.len();
            let next = if bootstraps(t, p.truncation_ends) { v.get(n).copied().unwrap_or(0.0) } else { 0.0 };
            let (a, r) = gae(&step_rewards(t), v, next, p.gamma, p.lambda);
            raw.extend(&a);
            v_all.extend((0..n).map(|i| v.get(i).copied().unwrap_or(0.0)));
            adv_row.push(Some(a));
            ret_row.push(Some(r));
        }
        adv.push(adv_row);
        returns.push(ret_row);
    }
    let (mean, std) = mean_std(&raw);
    if p.normalize {
        for a in adv.iter_mut().flatten().flatten() {
            a.iter_mut().for_each(|x| *x = (*x - mean) / (std + p.eps));
        }
    }
    // The critic is the baseline: a group of equal rewards still has signal.
    st.all_equal_groups = super::silent_groups(&adv);
    st.baseline_mean = mean_std(&v_all).0;
    (st.relative_reward_mean, st.relative_reward_std) = (mean, std);
    let all: Vec<f64> = adv.iter().flatten().flatten().flatten().copied().collect();
    (st.adv_mean, st.adv_std) = mean_std(&all);
    GaeBatch { adv, returns, stats: st }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rollout::{Group, Outcome, TrajStep};
    use EpisodeStatus::{EnvError, Running, Success, Truncated};

    fn traj(step_rewards: &[f64], status: EpisodeStatus) -> Trajectory {
        let steps = step_rewards.iter().map(|&r| TrajStep::new("click(1, 1)", r, Running)).collect();
        let reward = step_rewards.iter().sum();
        Trajectory::new(
            "t",
            0,
            steps,
            Outcome { reward, status, steps: step_rewards.len() as u32, error: None },
        )
    }

    fn close(a: &[f64], b: &[f64]) {
        assert_eq!(a.len(), b.len(), "{a:?} vs {b:?}");
        for (x, y) in a.iter().zip(b) {
            assert!((x - y).abs() < 1e-12, "{a:?} vs {b:?}");
        }
    }

    const P: GaeParams =
        GaeParams { gamma: 0.9, lambda: 0.8, normalize: false, eps: 1e-8, truncation_ends: false };

    #[test]
    fn gae_with_a_terminal_end() {
        // γ = 0.9, λ = 0.8 (γλ = 0.72). Rewards r = [0, 0, 1], V(s_0..s_2) = [0.5, 0.6, 0.7],
        // success after the third step: V(s_3) = 0 (the final frame's 9.0 is not used).
        // δ_2 = 1 + 0.9·0 − 0.7   = 0.3           A_2 = 0.3
        // δ_1 = 0 + 0.9·0.7 − 0.6 = 0.03          A_1 = 0.03 + 0.72·0.3    = 0.246
        // δ_0 = 0 + 0.9·0.6 − 0.5 = 0.04          A_0 = 0.04 + 0.72·0.246  = 0.21712
        // R = A + V = [0.71712, 0.846, 1.0]
        let batch = TrainingBatch {
            groups: vec![Group {
                task_id: "t".into(),
                seed: 0,
                id: None,
                trajectories: vec![traj(&[0.0, 0.0, 1.0], Success), traj(&[0.0], EnvError)],
            }],
        };
        let values = vec![vec![Some(vec![0.5, 0.6, 0.7, 9.0]), Some(vec![0.1, 0.2])]];
        let out = gae_advantages(&batch, &values, P);
        close(out.adv[0][0].as_ref().unwrap(), &[0.21712, 0.246, 0.3]);
        close(out.returns[0][0].as_ref().unwrap(), &[0.71712, 0.846, 1.0]);
        // The env_error rollout gets nothing and is not counted.
        assert!(out.adv[0][1].is_none() && out.returns[0][1].is_none());
        assert_eq!((out.stats.counted, out.stats.env_errors), (1, 1));
        // baseline: mean V over the trained steps (0.5 + 0.6 + 0.7) / 3 = 0.6
        assert!((out.stats.baseline_mean - 0.6).abs() < 1e-12);
    }

    #[test]
    fn gae_with_a_truncated_end_bootstraps() {
        // The same rollout cut by the step limit after two steps, r = [0, 0], V(s_0, s_1) =
        // [0.5, 0.6], the final observation's V(s_2) = 0.7 is bootstrapped:
        // δ_1 = 0 + 0.9·0.7 − 0.6 = 0.03          A_1 = 0.03
        // δ_0 = 0 + 0.9·0.6 − 0.5 = 0.04          A_0 = 0.04 + 0.72·0.03 = 0.0616
        // R = [0.5616, 0.63]
        let (a, r) = gae(&[0.0, 0.0], &[0.5, 0.6], 0.7, 0.9, 0.8);
        close(&a, &[0.0616, 0.03]);
        close(&r, &[0.5616, 0.63]);
        let t = traj(&[0.0, 0.0], Truncated);
        let batch = TrainingBatch {
            groups: vec![Group { task_id: "t".into(), seed: 0, id: None, trajectories: vec![t.clone()] }],
        };
        let values = vec![vec![Some(vec![0.5, 0.6, 0.7])]];
        let out = gae_advantages(&batch, &values, P);
        close(out.adv[0][0].as_ref().unwrap(), &[0.0616, 0.03]);
        // With `truncation_reward` set the step limit is an ending: V(s_2) = 0,
        // δ_1 = −0.6, A_1 = −0.6; δ_0 = 0.04, A_0 = 0.04 − 0.72·0.6 = −0.392.
        let ends = gae_advantages(&batch, &values, GaeParams { truncation_ends: true, ..P });
        close(ends.adv[0][0].as_ref().unwrap(), &[-0.392, -0.6]);
        assert!(bootstraps(&t, false) && !bootstraps(&t, true));
        assert!(!bootstraps(&traj(&[1.0], Success), false));
    }

    #[test]
    fn whitening_and_lambda_one() {
        // λ = 1, γ = 1, V ≡ 0: A_t is the return from t. Rollouts r = [0, 1] (success) and
        // r = [−1] (fail, here `Success` status makes no difference: both end):
        // raw A = {1, 1, −1}: mean 1/3, population std sqrt(8/9) = 0.9428090.
        let batch = TrainingBatch {
            groups: vec![Group {
                task_id: "t".into(),
                seed: 0,
                id: None,
                trajectories: vec![traj(&[0.0, 1.0], Success), traj(&[-1.0], Success)],
            }],
        };
        let p = GaeParams { gamma: 1.0, lambda: 1.0, normalize: true, eps: 0.0, truncation_ends: false };
        let out = gae_advantages(&batch, &Vec::new(), p);
        let s = (8.0f64 / 9.0).sqrt();
        close(out.adv[0][0].as_ref().unwrap(), &[(1.0 - 1.0 / 3.0) / s, (1.0 - 1.0 / 3.0) / s]);
        close(out.adv[0][1].as_ref().unwrap(), &[(-1.0 - 1.0 / 3.0) / s]);
        // the returns keep the raw advantages (+ V = 0)
        close(out.returns[0][0].as_ref().unwrap(), &[1.0, 1.0]);
        assert!(out.stats.adv_mean.abs() < 1e-12 && (out.stats.adv_std - 1.0).abs() < 1e-12);
        assert!((out.stats.relative_reward_mean - 1.0 / 3.0).abs() < 1e-12);
    }
}
