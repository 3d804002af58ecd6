//! PPO as an [`Algorithm`]: its critic values every observation and GAE gives the
//! advantages; after the policy's update the critic trains on the GAE returns; in the
//! first `critic_warmup` iterations only the critic trains (see [`crate::train::value`]).

use super::{Algorithm, Scored};
use crate::rollout::runtime::off_runtime;
use crate::train::advantage::{AdvantageStats, StepAdvantages};
use crate::train::config::{AlgoConfig, PpoConfig, TrainConfig};
use crate::train::metrics::IterationMetrics;
use crate::train::value::{Critic, PpoBatch, ValueStats};
use candle_core::Device;
use std::path::Path;

/// PPO's state between the hooks of an iteration and across iterations.
pub struct Ppo {
    /// `[algo.ppo]`.
    settings: PpoConfig,
    /// The value network with its own optimizer.
    critic: Critic,
    /// This iteration's values and GAE targets, from the advantages to the critic's update.
    batch: Option<PpoBatch>,
    /// What the critic's last update did (for the metrics).
    value: Option<ValueStats>,
}

impl Ppo {
    /// PPO for the run `cfg`, its critic read back from the checkpoint `latest` when that
    /// holds one.
    pub fn for_run(
        cfg: &TrainConfig,
        settings: &PpoConfig,
        device: &Device,
        latest: Option<&Path>,
    ) -> anyhow::Result<Ppo> {
        let critic = Critic::for_run(cfg, settings, device, latest)?;
        Ok(Ppo::new(settings.clone(), critic))
    }

    /// PPO with `critic` (fresh or read back) and the settings `[algo.ppo]`.
    pub fn new(settings: PpoConfig, critic: Critic) -> Ppo {
        Ppo { settings, critic, batch: None, value: None }
    }
}

impl Algorithm for Ppo {
    fn advantages(
        &mut self,
        algo: &AlgoConfig,
        scored: &Scored<'_>,
    ) -> anyhow::Result<(StepAdvantages, AdvantageStats)> {
        let (critic, settings) = (&self.critic, &self.settings);
        let p = off_runtime(|| critic.gae(algo, settings, &scored.batch, scored.recs, &scored.index))?;
        let out = (p.gae.adv.clone(), p.gae.stats);
        self.batch = Some(p);
        Ok(out)
    }

    /// Not during the critic's warm-up (`critic_warmup` iterations at the start).
    fn trains_policy(&self, it: u64) -> bool {
        it >= self.settings.critic_warmup
    }

    fn after_update(&mut self, algo: &AlgoConfig, seed: u64, it: u64) -> anyhow::Result<()> {
        let p = self
            .batch
            .take()
            .ok_or_else(|| anyhow::anyhow!("iteration {}: PPO's critic has no values to train on", it + 1))?;
        let (critic, settings) = (&mut self.critic, &self.settings);
        self.value = Some(off_runtime(|| critic.train(&p, algo, settings, seed, it))?);
        Ok(())
    }

    fn log(&self, m: &mut IterationMetrics) {
        if let Some(v) = &self.value {
            m.set_value(v);
        }
    }

    fn save(&self, dir: &Path) -> anyhow::Result<()> {
        self.critic.save(dir)
    }
}
