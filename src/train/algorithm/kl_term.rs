//! The KL to a frozen reference policy, as every kind takes it from the shared `[algo]`
//! keys: `beta`, `kl_mode` (a loss term, or subtracted from the rewards before the
//! advantages), `kl_estimator`, and the adaptive β (`kl_target`, `kl_horizon`). The math
//! is [`crate::train::kl`]'s; this holds the reference and says where it acts.

use super::Scored;
use crate::policy::{Sampling, TrainablePolicy};
use crate::rollout::runtime::off_runtime;
use crate::rollout::{Recorded, TrainingBatch};
use crate::train::config::{AlgoConfig, KlMode};
use crate::train::kl::{adaptive_beta, penalize, rollout_kl};
use anyhow::Context;
use std::path::Path;

/// The KL reference of a run (none while `beta = 0`, or until RL starts).
#[derive(Default)]
pub struct KlTerm {
    reference: Option<Box<dyn TrainablePolicy>>,
}

impl KlTerm {
    /// The reference a resumed run finds in `dir` (with `beta > 0`); none for a new run,
    /// which makes it when RL starts ([`KlTerm::set_reference`]).
    pub fn resume(
        algo: &AlgoConfig,
        policy: &dyn TrainablePolicy,
        dir: &Path,
        resuming: bool,
    ) -> anyhow::Result<KlTerm> {
        if algo.beta <= 0.0 || !resuming || !dir.is_dir() {
            return Ok(KlTerm::default());
        }
        let mut r = policy.reference()?;
        r.load(dir).with_context(|| format!("loading the KL reference {}", dir.display()))?;
        Ok(KlTerm { reference: Some(r) })
    }

    /// The frozen reference, once there is one.
    pub fn reference(&self) -> Option<&dyn TrainablePolicy> {
        self.reference.as_deref()
    }

    /// Set the reference (the policy RL starts from).
    pub fn set_reference(&mut self, reference: Box<dyn TrainablePolicy>) {
        self.reference = Some(reference);
    }

    /// The reference samples as the policy does: the KL compares log-probs at the same
    /// (sampling) temperature.
    pub fn set_sampling(&mut self, sampling: Sampling) {
        if let Some(r) = self.reference.as_mut() {
            r.set_sampling(sampling);
        }
    }

    /// This iteration's β: the adaptive one so far (`kl_coef`, which the checkpoint keeps),
    /// else `[algo] beta`.
    pub fn beta(algo: &AlgoConfig, kl_coef: Option<f64>) -> f64 {
        kl_coef.unwrap_or(algo.beta)
    }

    /// `recs` grouped with their training rewards; with `kl_mode = "reward"` each step's
    /// reward first loses `beta` · KL(rollout ‖ reference).
    pub fn score<'a>(
        &self,
        algo: &AlgoConfig,
        beta: f64,
        recs: &'a [Recorded],
    ) -> anyhow::Result<Scored<'a>> {
        let (mut batch, index) = TrainingBatch::group(recs.iter().map(|r| &r.trajectory));
        let mut mean = None;
        if let (KlMode::Reward, Some(r)) = (algo.kl_mode, self.reference.as_deref()) {
            let (kl, m) =
                off_runtime(|| rollout_kl(r, recs, &index, algo.kl_estimator, algo.minibatch.max(1)))?;
            penalize(&mut batch, &kl, beta);
            mean = Some(m);
        }
        Ok(Scored { recs, batch, index, beta, rollout_kl: mean })
    }

    /// The reference the update's minibatches score against: only when the KL is a loss
    /// term (`kl_mode = "loss"`).
    pub fn in_loss(&self, algo: &AlgoConfig) -> Option<&dyn TrainablePolicy> {
        self.reference.as_deref().filter(|_| algo.kl_mode == KlMode::Loss)
    }

    /// The next β after an iteration that measured `kl` over `n_steps` trained steps at
    /// `beta`; `None` without `kl_target` (β stays as configured).
    pub fn adapt(algo: &AlgoConfig, beta: f64, kl: f64, n_steps: usize) -> Option<f64> {
        algo.kl_target.map(|target| adaptive_beta(beta, kl, target, n_steps, algo.kl_horizon))
    }
}
