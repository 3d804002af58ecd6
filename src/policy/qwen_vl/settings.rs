//! `[model]` of a Qwen-VL kind (`kind = "qwen3_vl"` or `"qwen2_5_vl"`): how a pretrained
//! checkpoint is set up as a policy (also written to a checkpoint's `qwen_policy.json`).
//! Its fields other than `backbone` are that kind's `[model]` keys.

use super::train::lora::LoraSettings;
use anyhow::{bail, Result};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// How a pretrained backbone is set up as a policy (`[model]` of a Qwen-VL kind).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QwenPolicySettings {
    /// `qwen3_vl` or `qwen2_5_vl`: `[model] kind` (checked against the checkpoint's
    /// config.json).
    pub backbone: String,
    /// A checkpoint folder, or `hf:ORG/NAME` in the Hugging Face cache.
    pub path: String,
    /// LoRA rank.
    #[serde(default = "default_rank")]
    pub lora_rank: usize,
    /// LoRA alpha (the update is scaled by alpha / rank).
    #[serde(default = "default_alpha")]
    pub lora_alpha: f64,
    /// Language-model layers that get adapters.
    #[serde(default = "default_targets")]
    pub lora_targets: Vec<String>,
    /// Vision-tower layers that get adapters (`qkv`, `proj`, `linear_fc1`, `linear_fc2`;
    /// Qwen2.5-VL: `gate_proj`, `up_proj`, `down_proj`, `0`, `2` for its merger's MLP).
    /// Empty (the default): the tower is frozen and its output cached per screenshot.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub lora_vision_targets: Vec<String>,
    /// Dropout on the adapters' input in training passes (PEFT's `lora_dropout`), in [0, 1).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub lora_dropout: f64,
    /// Recompute each decoder layer in the backward pass instead of keeping its activations.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub gradient_checkpointing: bool,
    /// The answer's coordinate frame (`rel1000`, `smart_resize`, `px`, ...); default: the
    /// architecture's own (Qwen3-VL `rel1000`, Qwen2.5-VL the resized image's pixels).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub coords: Option<String>,
    /// A system prompt file (`{frame}` is replaced); default: the `openai:` policy's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt: Option<PathBuf>,
    /// Longest answer, in tokens.
    #[serde(default = "default_max_new")]
    pub max_new_tokens: usize,
    /// Rows each decoding step computes: the states of a rollout batch advance together
    /// in chunks of exactly this many rows (padded), so a state's answer is the same
    /// whichever states share its batch. 1 decodes every answer alone; identical prompts
    /// still run once. Unset: [`QwenPolicySettings::decode_rows_on`] the device.
    #[serde(default)]
    pub decode_rows: Option<usize>,
    /// Keep each answer's keys and values in a slot of this many tokens and attend over the
    /// whole slot, masked, with one attention per layer for every chunk of `decode_rows`
    /// answers (fewer kernel launches on a GPU), instead of one attention per answer over
    /// its own length (unset, the default). A prompt plus `max_new_tokens` must fit in it.
    /// Still bit for bit the same answer whatever shares the batch, but not the same bits as
    /// without it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decode_window: Option<usize>,
    /// Decoding steps between the host's reads of the tokens drawn: the tokens are fed back
    /// on the device, and the host learns them (and which answers ended) every this many
    /// steps, so it does not wait for the device at every token. An answer that ended
    /// between reads runs on until the next one and its extra tokens are dropped: the
    /// answers are the same bits whatever the value. Unset:
    /// [`QwenPolicySettings::decode_sync_on`] the device.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decode_sync: Option<usize>,
    /// `f32` or `bf16` (weights and activations; adapters and their optimizer stay f32).
    #[serde(default = "default_dtype")]
    pub dtype: String,
    /// Modules trained whole beside the adapters (`embed_tokens`, `lm_head`, `norm`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub train_modules: Vec<String>,
}

fn is_zero(x: &f64) -> bool {
    *x == 0.0
}
fn default_rank() -> usize {
    LoraSettings::default().rank
}
fn default_alpha() -> f64 {
    LoraSettings::default().alpha
}
fn default_targets() -> Vec<String> {
    LoraSettings::default().targets
}
fn default_max_new() -> usize {
    32
}
fn default_dtype() -> String {
    "f32".into()
}

impl QwenPolicySettings {
    /// The decoding rows on `device`: as set, else 1 on the CPU (padding rows cost compute
    /// there: chunks of 8 made one 0.5B answer 2.5× slower on a core, while a group of 8
    /// answers decoded 1.7× faster than PyTorch) and 8 on a GPU (where a step's time is the
    /// host issuing its kernels, whatever the rows: docs/gpu.md).
    pub fn decode_rows_on(&self, device: &candle_core::Device) -> usize {
        self.decode_rows.unwrap_or(if device.is_cuda() { 8 } else { 1 })
    }

    /// `decode_sync`, or its default on `device`: every step on a CPU (waiting costs
    /// nothing there, and an ended answer's extra steps would cost compute), every 8 on a
    /// GPU (not yet timed there).
    pub fn decode_sync_on(&self, device: &candle_core::Device) -> usize {
        self.decode_sync.unwrap_or(if device.is_cuda() { 8 } else { 1 })
    }

    /// Settings for `backbone` at `path` with every default.
    pub fn new(backbone: &str, path: &str) -> Self {
        QwenPolicySettings {
            backbone: backbone.into(),
            path: path.into(),
            lora_rank: default_rank(),
            lora_alpha: default_alpha(),
            lora_targets: default_targets(),
            lora_vision_targets: Vec::new(),
            lora_dropout: 0.0,
            gradient_checkpointing: false,
            coords: None,
            prompt: None,
            max_new_tokens: default_max_new(),
            decode_rows: None,
            decode_window: None,
            decode_sync: None,
            dtype: default_dtype(),
            train_modules: Vec::new(),
        }
    }

    /// The adapters' settings.
    pub(crate) fn lora(&self) -> LoraSettings {
        LoraSettings {
            rank: self.lora_rank,
            alpha: self.lora_alpha,
            targets: self.lora_targets.clone(),
            vision_targets: self.lora_vision_targets.clone(),
            dropout: self.lora_dropout,
            peft_target_modules: None,
        }
    }

    /// Every value in range, or an error naming the key.
    pub(crate) fn check(&self) -> Result<()> {
        if !matches!(self.backbone.as_str(), "qwen3_vl" | "qwen2_5_vl") {
            bail!("backbone {:?}: use \"qwen3_vl\" or \"qwen2_5_vl\" (model.kind)", self.backbone);
        }
        if self.lora_rank == 0 {
            bail!("model.lora_rank must be at least 1");
        }
        if !(self.lora_alpha.is_finite() && self.lora_alpha > 0.0) {
            bail!("model.lora_alpha must be a positive number");
        }
        if !(0.0..1.0).contains(&self.lora_dropout) {
            bail!("model.lora_dropout = {}: use a probability in [0, 1) (0 turns it off)", self.lora_dropout);
        }
        if self.max_new_tokens == 0 {
            bail!("model.max_new_tokens must be at least 1");
        }
        if let Some(rows) = self.decode_rows.filter(|r| !(1..=256).contains(r)) {
            bail!("model.decode_rows = {rows}: use 1 to 256 (rows each decoding step computes)");
        }
        if let Some(n) = self.decode_sync.filter(|n| !(1..=64).contains(n)) {
            bail!("model.decode_sync = {n}: use 1 to 64 (decoding steps between the host's reads of the tokens)");
        }
        if let Some(w) = self.decode_window.filter(|w| !(16..=1 << 20).contains(w)) {
            bail!(
                "model.decode_window = {w}: use 16 to 1048576 tokens, at least a prompt's length plus \
                 max_new_tokens (or leave it out to attend over each answer's own length)"
            );
        }
        if !matches!(self.dtype.as_str(), "f32" | "bf16") {
            bail!("model.dtype = {:?}: use \"f32\" or \"bf16\"", self.dtype);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decode_rows_default_to_one_on_the_cpu_and_keep_what_was_set() {
        let mut s = QwenPolicySettings::new("qwen3_vl", "fixtures/qwen_vl/qwen3_vl");
        assert_eq!(s.decode_rows, None);
        assert_eq!(s.decode_rows_on(&candle_core::Device::Cpu), 1);
        s.decode_rows = Some(5);
        assert_eq!(s.decode_rows_on(&candle_core::Device::Cpu), 5);
        s.decode_rows = Some(0);
        assert!(s.check().unwrap_err().to_string().contains("model.decode_rows = 0"));
        s.decode_rows = Some(5);
        s.decode_window = Some(8);
        assert!(s.check().unwrap_err().to_string().contains("model.decode_window = 8"));
    }

    #[test]
    fn the_host_reads_every_step_on_the_cpu_unless_told_and_a_bad_interval_is_named() {
        let mut s = QwenPolicySettings::new("qwen3_vl", "fixtures/qwen_vl/qwen3_vl");
        assert_eq!(s.decode_sync_on(&candle_core::Device::Cpu), 1);
        s.decode_sync = Some(4);
        assert_eq!(s.decode_sync_on(&candle_core::Device::Cpu), 4);
        s.check().unwrap();
        for bad in [0, 65] {
            s.decode_sync = Some(bad);
            let e = s.check().unwrap_err().to_string();
            assert!(e.contains(&format!("model.decode_sync = {bad}")) && e.contains("1 to 64"), "{e}");
        }
    }
}
