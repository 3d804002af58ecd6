//! Which algorithm `[algo] kind` names, and what each kind sets by default.

use super::objective::LossAgg;
use serde::{Deserialize, Serialize};

/// The algorithm.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AlgoKind {
    /// GRPO: token-level clipped ratio, group-relative advantages.
    #[default]
    Grpo,
    /// Dr. GRPO (Liu et al. 2025): `A = R − mean_g R` (no std division) and the
    /// constant-normalizer aggregation `seq-mean-token-sum-norm` (no length bias).
    DrGrpo,
    /// DAPO: GRPO with clip-higher (ε_high > ε_low), token-mean, dynamic sampling (all-equal
    /// groups dropped and replaced by newly collected ones), the overlong penalty, no KL.
    Dapo,
    /// GSPO: sequence-level ratio and clipping.
    Gspo,
    /// RLOO: leave-one-out baseline `R_i − mean_{j≠i} R_j`, token-level clipped ratio.
    Rloo,
    /// REINFORCE++: discounted per-step returns (`gamma`), whitened over the batch.
    #[serde(rename = "reinforce_pp")]
    ReinforcePp,
    /// GiGPO (Feng et al. 2025): GRPO's episode advantage plus `ω ×` a step advantage
    /// relative to the other steps of the group taken from the same screenshot.
    Gigpo,
    /// PPO (Schulman et al. 2017): token-level clipped ratio, advantages from GAE over the
    /// per-step rewards with a learned critic (`src/train/value/`, `advantage/gae.rs`).
    Ppo,
}

impl AlgoKind {
    /// Default (ε_low, ε_high).
    pub fn default_clip(self) -> (f64, f64) {
        match self {
            AlgoKind::Dapo => (0.2, 0.28),
            AlgoKind::Gspo => (3e-4, 4e-4),
            AlgoKind::Grpo
            | AlgoKind::DrGrpo
            | AlgoKind::Rloo
            | AlgoKind::ReinforcePp
            | AlgoKind::Gigpo
            | AlgoKind::Ppo => (0.2, 0.2),
        }
    }
    /// Whether the kind's advantages are group-normalized (`adv_std` applies).
    pub fn group_normalized(self) -> bool {
        !matches!(self, AlgoKind::Rloo | AlgoKind::ReinforcePp | AlgoKind::Ppo)
    }
    /// Default aggregation: GSPO's mean over sequences, Dr. GRPO's constant normalizer,
    /// token-mean for the rest.
    pub fn default_loss_agg(self) -> LossAgg {
        match self {
            AlgoKind::Gspo => LossAgg::SeqMeanTokenMean,
            AlgoKind::DrGrpo => LossAgg::SeqMeanTokenSumNorm,
            _ => LossAgg::TokenMean,
        }
    }
}
