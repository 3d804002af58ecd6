//! Which implementation a run's `[algo]` names. Apart from the trait (in the folder's
//! root), which the implementations use, so that neither file needs the other.

use super::{ppo, relative, Algorithm};
use crate::train::config::{AlgoVariant, TrainConfig};
use candle_core::Device;
use std::path::Path;

/// The algorithm `cfg` trains with, its state read back from the checkpoint `latest`
/// (a resume) where it keeps any.
pub fn for_run(
    cfg: &TrainConfig,
    device: &Device,
    latest: Option<&Path>,
) -> anyhow::Result<Box<dyn Algorithm>> {
    Ok(match &cfg.algo.variant {
        AlgoVariant::Ppo(p) => Box::new(ppo::Ppo::for_run(cfg, p, device, latest)?),
        AlgoVariant::Gigpo(_) => Box::new(relative::Gigpo),
        AlgoVariant::Grpo
        | AlgoVariant::DrGrpo
        | AlgoVariant::Dapo
        | AlgoVariant::Gspo(_)
        | AlgoVariant::Rloo
        | AlgoVariant::ReinforcePp => Box::new(relative::GroupRelative),
    })
}
