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
