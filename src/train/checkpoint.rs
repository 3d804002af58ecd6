//! Checkpoints: a folder that is also a policy (`model.safetensors` + `config.json`), plus
//! the optimizer state and the trainer's position, enough to resume exactly.
//!
//! ```text
//! runs/<name>/checkpoints/iter-000010/{model.safetensors, config.json, optimizer.safetensors, trainer.json}
//! runs/<name>/checkpoints/latest   the name of the newest checkpoint folder
//! runs/<name>/best                 the path of the checkpoint with the best held-out success
//! ```

use super::optim::AdamW;
use crate::policy::vlm::VlmPolicy;
use anyhow::Context;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// Where the trainer stands (written next to the weights).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct TrainerState {
    /// Iterations completed.
    pub iteration: u64,
    /// Env steps taken so far.
    pub env_steps: u64,
    /// Wall-clock seconds so far (across resumes).
    pub wall_secs: f64,
    /// Best held-out success so far, and the checkpoint that had it.
    pub best_eval: Option<(f64, String)>,
    /// Whether the `[sft]` stage has run (its result is checkpoint `iter-000000`).
    #[serde(default)]
    pub sft_done: bool,
}

/// The checkpoints folder of a run.
pub fn checkpoints_dir(run_dir: &Path) -> PathBuf {
    run_dir.join("checkpoints")
}

/// Save a checkpoint for `state.iteration`; returns its folder.
pub fn save(
    run_dir: &Path,
    policy: &VlmPolicy,
    opt: &AdamW,
    state: &TrainerState,
) -> anyhow::Result<PathBuf> {
    let name = format!("iter-{:06}", state.iteration);
    let dir = checkpoints_dir(run_dir).join(&name);
    policy.save(&dir)?;
    opt.save(&dir.join("optimizer.safetensors"))?;
    std::fs::write(dir.join("trainer.json"), serde_json::to_string_pretty(state)?)?;
    // Written last: `latest` only ever names a complete checkpoint.
    std::fs::write(checkpoints_dir(run_dir).join("latest"), &name)?;
    Ok(dir)
}

/// Mark a checkpoint as the best one.
pub fn mark_best(run_dir: &Path, ckpt: &Path) -> anyhow::Result<()> {
    std::fs::write(run_dir.join("best"), ckpt.display().to_string())?;
    Ok(())
}

/// The newest complete checkpoint of a run, if any.
pub fn latest(run_dir: &Path) -> anyhow::Result<Option<PathBuf>> {
    let p = checkpoints_dir(run_dir).join("latest");
    if !p.is_file() {
        return Ok(None);
    }
    let name = std::fs::read_to_string(&p).with_context(|| format!("reading {}", p.display()))?;
    Ok(Some(checkpoints_dir(run_dir).join(name.trim())))
}

/// Load a checkpoint's trainer state and optimizer state (weights load with the policy).
pub fn load_state(dir: &Path, opt: &mut AdamW) -> anyhow::Result<TrainerState> {
    opt.load(&dir.join("optimizer.safetensors"))?;
    let p = dir.join("trainer.json");
    let text = std::fs::read_to_string(&p).with_context(|| format!("reading {}", p.display()))?;
    serde_json::from_str(&text).with_context(|| format!("{} is not a trainer state", p.display()))
}
