//! The stateless families: group-relative estimators, and GiGPO with its anchor states.

use super::{Algorithm, Scored};
use crate::train::advantage::{anchor_keys, estimate, AdvantageStats, StepAdvantages};
use crate::train::config::AlgoConfig;

/// GRPO, Dr. GRPO, DAPO, GSPO, RLOO and REINFORCE++: advantages from the rewards alone
/// (the estimator and the loss settings are the config's, resolved by kind).
pub struct GroupRelative;

impl Algorithm for GroupRelative {
    fn advantages(
        &mut self,
        algo: &AlgoConfig,
        scored: &Scored<'_>,
    ) -> anyhow::Result<(StepAdvantages, AdvantageStats)> {
        Ok(estimate(algo, &scored.batch, &Vec::new()))
    }
}

/// GiGPO: GRPO's episode advantage plus a step advantage within the groups of steps
/// taken from the same screenshot (the anchor states, keyed from the rollouts' frames).
pub struct Gigpo;

impl Algorithm for Gigpo {
    fn advantages(
        &mut self,
        algo: &AlgoConfig,
        scored: &Scored<'_>,
    ) -> anyhow::Result<(StepAdvantages, AdvantageStats)> {
        let keys = anchor_keys(scored.recs, &scored.index);
        Ok(estimate(algo, &scored.batch, &keys))
    }
}
