//! The KL to the reference policy outside the loss: PPO-style KL in the reward
//! (`[algo] kl_mode = "reward"`) and the adaptive coefficient (`[algo] kl_target`).
//!
//! ```text
//! reward mode:  r'_t = r_t − β · Σ_{tokens of step t} k(logπ_ref − logπ_old)
//!               (the rollout's own log-probs against the reference's; the episode's
//!               training reward R' = Σ_t r'_t, so every estimator sees the penalty)
//! adaptive β:   e = clip(KL / KL_target − 1, −0.2, 0.2)
//!               β ← β · (1 + e · n_steps / horizon)
//! ```
//! The controller is Ziegler et al. (2019)'s proportional one, as TRL's
//! `AdaptiveKLController` writes it: `KL` is this iteration's `kl` metric (token-mean),
//! `n_steps` the env steps trained on this iteration, `horizon` is `[algo] kl_horizon`
//! (TRL's default 10 000). β moves by at most ±20 % × n_steps / horizon per iteration; it
//! is kept in the checkpoint's trainer state, so a resumed run continues with the same β.

use super::objective::KlEstimator;
use crate::policy::TrainablePolicy;
use crate::rollout::{Recorded, TrainingBatch};
use anyhow::Context;
use serde::{Deserialize, Serialize};

/// Where the KL to the reference acts (`[algo] kl_mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum KlMode {
    /// A loss term `β · KL` on the tokens being trained (GRPO).
    #[default]
    Loss,
    /// Subtracted from each step's reward before the advantages, `r_t − β · Σ_tokens KL`,
    /// from the rollout's log-probs against the reference's (PPO / RLHF).
    Reward,
}

/// One step of the proportional controller (see the module docs).
pub fn adaptive_beta(beta: f64, kl: f64, target: f64, n_steps: usize, horizon: f64) -> f64 {
    let e = (kl / target - 1.0).clamp(-0.2, 0.2);
    beta * (1.0 + e * n_steps as f64 / horizon)
}

/// `Σ_t k(ref_t − old_t)` over one action's tokens.
pub fn action_kl(est: KlEstimator, old: &[f32], reference: &[f32]) -> f64 {
    old.iter().zip(reference).map(|(&o, &r)| est.value(f64::from(r) - f64::from(o))).sum()
}

/// The KL of every step of the rollouts, `[group][trajectory][step]` like the batch
/// `index` came from, scored by `reference` on the sampled token
/// ids `chunk` steps at a time; and the token-mean over them all. Steps without a
/// screenshot or tokens get 0.
pub fn rollout_kl(
    reference: &dyn TrainablePolicy,
    recs: &[Recorded],
    index: &[Vec<usize>],
    est: KlEstimator,
    chunk: usize,
) -> anyhow::Result<(Vec<Vec<Vec<f64>>>, f64)> {
    let mut out: Vec<Vec<Vec<f64>>> = index
        .iter()
        .map(|m| m.iter().map(|&k| vec![0.0; recs[k].trajectory.steps.len()]).collect())
        .collect();
    // (g, j, i) of every step to score
    let mut todo = Vec::new();
    for (g, members) in index.iter().enumerate() {
        for (j, &k) in members.iter().enumerate() {
            let r = &recs[k];
            if r.trajectory.outcome.status.is_infrastructure_failure() {
                continue;
            }
            for (i, s) in r.trajectory.steps.iter().enumerate() {
                if i < r.frames.len() && !s.tokens.is_empty() && s.tokens.len() == s.token_logprobs.len() {
                    todo.push((g, j, i));
                }
            }
        }
    }
    let (mut total, mut tokens) = (0.0, 0usize);
    for part in todo.chunks(chunk.max(1)) {
        let rec = |&(g, j, _): &(usize, usize, usize)| &recs[index[g][j]];
        let states: Vec<_> = part
            .iter()
            .map(|p| rec(p).state_at(p.2, reference.reads_previous_screenshot()))
            .collect::<Option<Vec<_>>>()
            .context("a step to score lost its frame")?;
        let toks: Vec<Vec<u32>> = part.iter().map(|p| rec(p).trajectory.steps[p.2].tokens.clone()).collect();
        let logp =
            reference.score(&states, &toks)?.logp.to_dtype(candle_core::DType::F32)?.to_vec2::<f32>()?;
        for (p, row) in part.iter().zip(logp) {
            let old = &rec(p).trajectory.steps[p.2].token_logprobs;
            let kl = action_kl(est, old, &row[..old.len()]);
            out[p.0][p.1][p.2] = kl;
            total += kl;
            tokens += old.len();
        }
    }
    Ok((out, total / tokens.max(1) as f64))
}

/// Subtract `β · KL` from each step's reward, and the trajectory's total from its
/// training reward (`kl` laid out like [`rollout_kl`]'s).
pub fn penalize(batch: &mut TrainingBatch, kl: &[Vec<Vec<f64>>], beta: f64) {
    for (g, rows) in batch.groups.iter_mut().zip(kl) {
        for (t, row) in g.trajectories.iter_mut().zip(rows) {
            let mut sum = 0.0;
            for (s, k) in t.steps.iter_mut().zip(row) {
                s.reward -= beta * k;
                sum += beta * k;
            }
            t.outcome.reward -= sum;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::env::EpisodeStatus::{Running, Success};
    use crate::rollout::{Group, Outcome, TrajStep, Trajectory};

    #[test]
    fn adaptive_beta_by_hand() {
        // KL = 0.03, target 0.02: e = clip(0.5, −0.2, 0.2) = 0.2; 64 steps, horizon 1000:
        // β = 0.1 · (1 + 0.2 · 0.064) = 0.10128.
        assert!((adaptive_beta(0.1, 0.03, 0.02, 64, 1000.0) - 0.10128).abs() < 1e-15);
        // KL = 0.019: e = −0.05: β = 0.1 · (1 − 0.05 · 0.064) = 0.09968.
        assert!((adaptive_beta(0.1, 0.019, 0.02, 64, 1000.0) - 0.09968).abs() < 1e-15);
        // KL = 0: e = −0.2 (clipped from −1).
        assert!((adaptive_beta(0.1, 0.0, 0.02, 1000, 1000.0) - 0.08).abs() < 1e-15);
    }

    #[test]
    fn kl_in_the_reward_by_hand() {
        // Tokens d = ref − old = [0.5, −0.2]: k3 = (e^0.5 − 1.5) + (e^−0.2 − 0.8);
        // k1 = −0.3; k2 = (0.25 + 0.04)/2 = 0.145.
        let (old, r) = ([-1.0f32, -0.5], [-0.5f32, -0.7]);
        let d = [0.5f64, -0.2];
        let k3: f64 = d.iter().map(|x| x.exp() - 1.0 - x).sum();
        assert!((action_kl(KlEstimator::K3, &old, &r) - k3).abs() < 1e-6);
        assert!((action_kl(KlEstimator::K1, &old, &r) + 0.3).abs() < 1e-6);
        assert!((action_kl(KlEstimator::K2, &old, &r) - 0.145).abs() < 1e-6);
        // β = 0.5, two steps with KL 0.2 and 0.4, rewards [0, 1], R = 1:
        // r' = [−0.1, 0.8], R' = 1 − 0.3 = 0.7.
        let steps =
            vec![TrajStep::new("click(1, 1)", 0.0, Running), TrajStep::new("click(2, 2)", 1.0, Success)];
        let t =
            Trajectory::new("t", 0, steps, Outcome { reward: 1.0, status: Success, steps: 2, error: None });
        let mut b = TrainingBatch {
            groups: vec![Group { task_id: "t".into(), seed: 0, id: None, trajectories: vec![t] }],
        };
        penalize(&mut b, &[vec![vec![0.2, 0.4]]], 0.5);
        let t = &b.groups[0].trajectories[0];
        assert!((t.steps[0].reward + 0.1).abs() < 1e-12 && (t.steps[1].reward - 0.8).abs() < 1e-12);
        assert!((t.outcome.reward - 0.7).abs() < 1e-12);
    }
}
