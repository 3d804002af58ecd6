//! The more-behaviour-cloning baseline: a clone trained further on its own
//! demonstrations, for about the time its RL cells took. RL must beat this, not only the
//! clone it started from, before its gain can be put down to RL rather than to training
//! longer.
//!
//! ```text
//! N       = clamp(ceil(median RL-cell wall-clock of the clone / the clone's seconds per
//!           SFT epoch), 1, more_sft_max_epochs)         (plan more_sft_epochs when no
//!                                                          RL cell of the clone is done)
//! config  = the task's resolved config, run.seed = the clone's, run.iterations = 0,
//!           [model] init = the clone's iter-000000,
//!           [sft] dir = the clone's demonstrations, epochs = N, start_epoch = the clone's
//! ```
//!
//! The count is computed, not timed: the same finished cells give the same N, and the
//! run is the clone trained N more epochs with the same lr, minibatch, shuffles (epochs
//! numbered on from the clone's) and AdamW moments (the clone's, kept in its checkpoint).

use super::CloneId;
use crate::train::config::TrainConfig;
use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};
use std::path::Path;

/// The baseline's extra epochs and how they were chosen (`more-sft.json` in its folder).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Decision {
    /// Epochs of cloning after the clone's own.
    pub extra_epochs: usize,
    /// The figures they came from, in words.
    pub basis: String,
}

/// The median of `xs` (the mean of the two middle values for an even count).
pub fn median(xs: &[f64]) -> Option<f64> {
    let mut v: Vec<f64> = xs.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let m = v.len() / 2;
    Some(if v.len() % 2 == 1 { v[m] } else { (v[m - 1] + v[m]) / 2.0 })
}

/// The extra epochs of a clone's baseline: `ceil(median(rl_wall_secs) / secs_per_epoch)`
/// clamped to `[1, max]`, from the wall-clock of the clone's finished RL cells and the
/// clone's own seconds per epoch; without those, `fixed` (the plan's `more_sft_epochs`);
/// `None` when neither is known (the baseline waits for an RL cell).
pub fn extra_epochs(
    rl_wall_secs: &[f64],
    secs_per_epoch: Option<f64>,
    fixed: Option<usize>,
    max: usize,
) -> Option<Decision> {
    let per_epoch = secs_per_epoch.filter(|s| *s > 0.0 && s.is_finite());
    if let (Some(m), Some(e)) = (median(rl_wall_secs), per_epoch) {
        let raw = (m / e).ceil();
        // `as` saturates: a huge ratio is clamped like any other.
        let n = (raw as usize).clamp(1, max.max(1));
        let basis = format!(
            "ceil(median wall-clock of the clone's {} RL cell{} {m:.1} s / the clone's {e:.3} s per epoch) \
             = {raw:.0}, clamped to [1, {max}]",
            rl_wall_secs.len(),
            if rl_wall_secs.len() == 1 { "" } else { "s" }
        );
        return Some(Decision { extra_epochs: n, basis });
    }
    let why = if rl_wall_secs.is_empty() {
        "no RL cell of this clone had finished"
    } else {
        "the clone recorded no seconds per epoch"
    };
    fixed.map(|n| Decision { extra_epochs: n, basis: format!("more_sft_epochs = {n} from the plan ({why})") })
}

/// The baseline's config: `base` (the task's config, resolved) continuing clone `c`
/// (made in `clone_dir`, checkpoint `init`) for `epochs` more epochs of its `[sft]` on
/// its own demonstrations.
pub fn config(
    base: &TrainConfig,
    c: CloneId,
    clone_dir: &Path,
    init: &Path,
    epochs: usize,
) -> Result<TrainConfig> {
    let mut cfg = base.clone();
    cfg.run.seed = c.seed;
    cfg.run.iterations = 0;
    cfg.run.max_env_steps = None;
    // No RL iteration runs, so the task's RL warm-up (which must fit in the iterations)
    // has nothing to act on.
    cfg.algo.warmup = 0;
    cfg.model.init = Some(init.to_path_buf());
    let mut sft = cfg.sft.take().context("the task config has no [sft]")?;
    // The very demonstrations the clone learned from, not a second recording of them.
    sft.dir = Some(sft.dir.take().unwrap_or_else(|| clone_dir.join("demos")));
    sft.oracle_episodes = None;
    sft.oracle_episodes_for.clear();
    sft.start_epoch += sft.epochs;
    sft.epochs = epochs;
    cfg.sft = Some(sft);
    cfg.validate().context("the more-sft baseline's config")?;
    Ok(cfg)
}
