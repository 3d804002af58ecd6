//! The algorithm of a run as one object that owns its extras: what an iteration does
//! between scoring its rollouts and logging its metrics that depends on `[algo] kind`.
//!
//! ```text
//! iteration:  collect → score → advantages → update → log          (trainer.rs)
//!                        │         │            │        │
//!   KlTerm:       β·KL in reward   │      KL in loss,    kl, kl_coef
//!                                  │      adaptive β
//!   Algorithm:               advantages  trains_policy?  its figures
//!                            (anchors,   after_update
//!                             critic)    (the critic)
//! ```
//!
//! One implementation per family whose behaviour differs, not one per kind: the kinds of
//! [`relative::GroupRelative`] (GRPO, Dr. GRPO, DAPO, GSPO, RLOO, REINFORCE++) differ only
//! by their estimator and loss settings, which the config resolves; [`relative::Gigpo`]
//! adds the anchor-state keys of its step groups; [`ppo::Ppo`] owns a critic, its
//! optimizer and its warm-up.
//!
//! The KL to a frozen reference ([`kl_term::KlTerm`]: in the reward or in the loss, with
//! the adaptive β) is not an implementation's: every kind takes it the same way from the
//! shared `[algo]` keys, so it is one object beside the algorithm, not a copy in each.

pub mod kl_term;
pub mod ppo;
pub mod relative;
mod select;

pub use select::for_run;

use super::advantage::{AdvantageStats, StepAdvantages};
use super::config::AlgoConfig;
use super::metrics::IterationMetrics;
use crate::rollout::{Recorded, TrainingBatch};
use std::path::Path;

/// An iteration's rollouts as they train: grouped, with their training rewards (the
/// KL penalty included with `kl_mode = "reward"`).
pub struct Scored<'a> {
    /// The rollouts trained on.
    pub recs: &'a [Recorded],
    /// Their groups, with the training rewards.
    pub batch: TrainingBatch,
    /// `index[g][j]`: the position in `recs` of group `g`'s `j`-th rollout.
    pub index: Vec<Vec<usize>>,
    /// This iteration's β (the adaptive one when `kl_target` is set).
    pub beta: f64,
    /// With `kl_mode = "reward"`: the rollouts' token-mean KL to the reference.
    pub rollout_kl: Option<f64>,
}

/// What depends on the algorithm in an iteration, called by the trainer in this order:
/// [`Algorithm::advantages`], [`Algorithm::trains_policy`], (the policy's update),
/// [`Algorithm::after_update`], [`Algorithm::log`]; [`Algorithm::save`] with every
/// checkpoint.
pub trait Algorithm: Send {
    /// The advantage of every step of `scored` (`None`: a rollout not trained on).
    fn advantages(
        &mut self,
        algo: &AlgoConfig,
        scored: &Scored<'_>,
    ) -> anyhow::Result<(StepAdvantages, AdvantageStats)>;
    /// Whether iteration `it` (0-based) updates the policy (and steps the adaptive β).
    fn trains_policy(&self, _it: u64) -> bool {
        true
    }
    /// After the policy's update of iteration `it`: the algorithm's own training.
    fn after_update(&mut self, _algo: &AlgoConfig, _seed: u64, _it: u64) -> anyhow::Result<()> {
        Ok(())
    }
    /// Its own figures of the iteration into `m`.
    fn log(&self, _m: &mut IterationMetrics) {}
    /// Write its own state into the checkpoint folder `dir`.
    fn save(&self, _dir: &Path) -> anyhow::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests;
