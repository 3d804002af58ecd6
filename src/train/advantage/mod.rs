//! Advantage estimators: one file each, one signature ([`estimate`] dispatches on the
//! algorithm). An estimator turns a batch of grouped rollouts into one advantage per step
//! of every trajectory it trains on; `None` marks a rollout that is not trained on (an
//! `env_error`: the browser failed, not the agent).
//!
//! - [`grpo`]: group-relative, `(R_i − mean_g R) / (std_g R + eps)` (GRPO, DAPO, GSPO), or
//!   without the division (Dr. GRPO, `scale_std = false`); every step of a trajectory
//!   shares its episode advantage.
//! - [`rloo`]: leave-one-out, `R_i − mean_{j≠i} R_j` (RLOO); episode-level like GRPO.
//! - [`reinforce_pp`]: discounted returns from each step, whitened over the batch
//!   (REINFORCE++); the only step-level estimator so far.

pub mod grpo;
pub mod reinforce_pp;
pub mod rloo;

pub use grpo::group_advantages;

use super::config::{AlgoConfig, AlgoKind};
use crate::rollout::TrainingBatch;
use serde::{Deserialize, Serialize};

/// Advantages `[group][trajectory][step]`, like `batch.groups[g].trajectories[i].steps[t]`;
/// `None` for rollouts that are not trained on.
pub type StepAdvantages = Vec<Vec<Option<Vec<f64>>>>;

/// The advantages of `batch` under the configured algorithm.
pub fn estimate(algo: &AlgoConfig, batch: &TrainingBatch) -> (StepAdvantages, AdvantageStats) {
    let (episode, stats) = match algo.kind {
        AlgoKind::Grpo | AlgoKind::Dapo | AlgoKind::Gspo => group_advantages(batch, algo.scale_std, algo.eps),
        AlgoKind::Rloo => rloo::rloo_advantages(batch),
        AlgoKind::ReinforcePp => return reinforce_pp::reinforce_pp_advantages(batch, algo.gamma, algo.eps),
    };
    // Episode-level estimators: a step inherits its episode's advantage (the
    // trajectory-level credit of GRPO and RLOO).
    let per_step = batch
        .groups
        .iter()
        .zip(episode)
        .map(|(g, row)| {
            g.trajectories.iter().zip(row).map(|(t, a)| a.map(|a| vec![a; t.steps.len()])).collect()
        })
        .collect();
    (per_step, stats)
}

/// Batch-level statistics of the advantage computation (for `metrics.jsonl`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct AdvantageStats {
    /// Groups in the batch.
    pub groups: usize,
    /// Groups with at least one counted rollout whose counted rewards are all equal
    /// (advantage 0 for every member: no policy gradient).
    pub all_equal_groups: usize,
    /// Groups where every rollout was an `env_error` (nothing counted).
    pub empty_groups: usize,
    /// Rollouts that got an advantage.
    pub counted: usize,
    /// `env_error` rollouts left out.
    pub env_errors: usize,
    /// Mean over non-empty groups of the group baseline `mean_g(R)`.
    pub baseline_mean: f64,
    /// Mean over counted rollouts of the relative reward `R_i − mean_g(R)` (0 up to
    /// rounding: a sanity check).
    pub relative_reward_mean: f64,
    /// Population std over counted rollouts of `R_i − mean_g(R)`.
    pub relative_reward_std: f64,
    /// Mean of the advantages over counted rollouts.
    pub adv_mean: f64,
    /// Population std of the advantages over counted rollouts.
    pub adv_std: f64,
}

/// Population mean and standard deviation (÷ n); `(0, 0)` for an empty slice.
pub fn mean_std(x: &[f64]) -> (f64, f64) {
    if x.is_empty() {
        return (0.0, 0.0);
    }
    let n = x.len() as f64;
    let mean = x.iter().sum::<f64>() / n;
    let var = x.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / n;
    (mean, var.sqrt())
}

/// Episode-level advantages `[group][trajectory]`, group by group: `formula` gets a
/// group's counted rewards (never empty) and gives the map from a rollout's reward to its
/// advantage. `env_error` rollouts get `None` and stay out of the group's rewards; the
/// batch statistics are kept here, once for every episode-level estimator.
pub(crate) fn per_group<F: Fn(f64) -> f64>(
    batch: &TrainingBatch,
    formula: impl Fn(&[f64]) -> F,
) -> (Vec<Vec<Option<f64>>>, AdvantageStats) {
    let mut st = AdvantageStats { groups: batch.groups.len(), ..Default::default() };
    let (mut baselines, mut relative, mut advs) = (Vec::new(), Vec::new(), Vec::new());
    let mut out = Vec::with_capacity(batch.groups.len());
    for g in &batch.groups {
        let rewards = g.valid_rewards();
        st.env_errors += g.trajectories.len() - rewards.len();
        if rewards.is_empty() {
            st.empty_groups += 1;
            out.push(vec![None; g.trajectories.len()]);
            continue;
        }
        let mean = mean_std(&rewards).0;
        baselines.push(mean);
        st.all_equal_groups += usize::from(rewards.iter().all(|&r| r == rewards[0]));
        let adv = formula(&rewards);
        let row = g
            .trajectories
            .iter()
            .map(|t| {
                (!t.outcome.status.is_infrastructure_failure()).then(|| {
                    let a = adv(t.outcome.reward);
                    relative.push(t.outcome.reward - mean);
                    advs.push(a);
                    a
                })
            })
            .collect();
        out.push(row);
    }
    st.counted = advs.len();
    st.baseline_mean = mean_std(&baselines).0;
    (st.relative_reward_mean, st.relative_reward_std) = mean_std(&relative);
    (st.adv_mean, st.adv_std) = mean_std(&advs);
    (out, st)
}
