//! `[model]` of a training config: a policy preset plus optional overrides.

use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// Size of the policy network.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ModelPreset {
    /// Smallest: tests and CPU runs.
    #[default]
    Tiny,
    /// Medium.
    Small,
    /// Largest.
    Base,
}

/// `[model]`: a preset plus optional overrides.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelConfig {
    /// The preset (default `tiny`).
    #[serde(default)]
    pub preset: ModelPreset,
    /// Width of the transformer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub d_model: Option<usize>,
    /// Transformer layers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub layers: Option<usize>,
    /// Attention heads (must divide `d_model`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub heads: Option<usize>,
    /// Side of the square image patches, pixels.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub patch_size: Option<usize>,
    /// Side of the (resized) screenshot the model sees, pixels.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_size: Option<usize>,
    /// Instruction bytes the policy reads (longer instructions are cut).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_instruction_bytes: Option<usize>,
    /// Word-level instruction features: hash buckets (0 = off, the presets' default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub word_buckets: Option<usize>,
    /// Action kinds the policy may write (text-form names: `click`, `type`, `key`, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kinds: Option<Vec<String>>,
    /// Horizontal coordinate bins.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub x_bins: Option<usize>,
    /// Vertical coordinate bins.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub y_bins: Option<usize>,
    /// Score coordinates with the pointer head (default: on in every preset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pointer: Option<bool>,
    /// Weights to start from: a checkpoint folder (e.g. a cloned policy's
    /// `checkpoints/iter-000000`; its architecture must be the one `[model]` describes)
    /// or a safetensors file. A resumed run starts from its own checkpoint instead.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub init: Option<PathBuf>,
}
