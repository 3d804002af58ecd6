//! What every mode reads: the bench's inputs file, and the device and dtype it runs on.

use anyhow::Result;
use candle_core::Device;
use serde::Deserialize;
use std::path::PathBuf;

/// The bench's inputs (`--inputs`), as `scripts/bench_qwen_speed.py` writes them.
#[derive(Deserialize)]
pub struct Inputs {
    pub backbone: String,
    pub system_prompt: String,
    pub lora_rank: usize,
    pub lora_alpha: f64,
    /// A PEFT adapter folder whose values both sides start from (B non-zero).
    pub adapter: PathBuf,
    pub lr: f64,
    pub weight_decay: f64,
    pub samples: Vec<Sample>,
    /// Group-relative advantages, one per sample.
    pub advantages: Vec<f32>,
    pub update: Reps,
    pub gen: GenSpec,
}

/// One sample of the update (the first ones are also the generation's prompts).
#[derive(Deserialize)]
pub struct Sample {
    pub image: PathBuf,
    pub instruction: String,
    /// The answer, guirl action text in screenshot pixels.
    pub answer: String,
}

/// Untimed and timed repetitions of the update.
#[derive(Deserialize)]
pub struct Reps {
    pub warmup: usize,
    pub reps: usize,
}

/// What the generation decodes, and its repetitions.
#[derive(Deserialize)]
pub struct GenSpec {
    /// The first `prompts` samples' prompts are decoded.
    pub prompts: usize,
    pub new_tokens: usize,
    pub warmup: usize,
    pub reps: usize,
    /// Answers decoded together from the first prompt (a GRPO group's first step); 0: skip.
    #[serde(default)]
    pub group: usize,
}

/// The device and dtype every mode runs on.
pub struct Env {
    pub device: Device,
    pub dtype: String,
}

impl Env {
    /// Wait for the device's queued work (timings on CUDA).
    pub fn sync(&self) -> Result<()> {
        Ok(self.device.synchronize()?)
    }
}
