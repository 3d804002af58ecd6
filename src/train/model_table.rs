//! `[model]` as a config writes it: `kind`, every kind's keys and `init`, all optional.
//! It is what serde reads (unknown keys refused) and writes;
//! [`super::model::ModelConfig`] is what it means, converted from it with `TryFrom` (a key
//! of another kind than `kind` is refused there, naming the kind it belongs to). The small
//! policy's keys are documented on [`super::model_kind::SmallModel`], a Qwen-VL kind's on
//! [`crate::policy::qwen_vl::QwenPolicySettings`], all of them in docs/reference/config.md.

use super::model_kind::{ModelKind, ModelPreset};
use crate::policy::vlm::Input;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// The `[model]` table as written (see the module docs). Its `None`s are keys left out;
/// the fields follow `kind` in the order a run folder's `config.toml` writes them: the
/// small policy's, then a Qwen-VL backbone's, then `init`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ModelTable {
    /// `kind` (left out: `small`).
    pub kind: Option<ModelKind>,
    /// `preset` (small).
    pub preset: Option<ModelPreset>,
    /// `d_model` (small).
    pub d_model: Option<usize>,
    /// `layers` (small).
    pub layers: Option<usize>,
    /// `heads` (small).
    pub heads: Option<usize>,
    /// `patch_size` (small).
    pub patch_size: Option<usize>,
    /// `image_size` (small).
    pub image_size: Option<usize>,
    /// `max_instruction_bytes` (small).
    pub max_instruction_bytes: Option<usize>,
    /// `inputs` (small).
    pub inputs: Option<Vec<Input>>,
    /// `word_buckets` (small).
    pub word_buckets: Option<usize>,
    /// `max_elements` (small).
    pub max_elements: Option<usize>,
    /// `memory` (small).
    pub memory: Option<usize>,
    /// `copy` (small).
    pub copy: Option<bool>,
    /// `kinds` (small).
    pub kinds: Option<Vec<String>>,
    /// `keys` (small).
    pub keys: Option<Vec<String>>,
    /// `x_bins` (small).
    pub x_bins: Option<usize>,
    /// `y_bins` (small).
    pub y_bins: Option<usize>,
    /// `pointer` (small).
    pub pointer: Option<bool>,
    /// `path` (Qwen-VL; required there).
    pub path: Option<String>,
    /// `lora_rank` (Qwen-VL).
    pub lora_rank: Option<usize>,
    /// `lora_alpha` (Qwen-VL).
    pub lora_alpha: Option<f64>,
    /// `lora_targets` (Qwen-VL).
    pub lora_targets: Option<Vec<String>>,
    /// `lora_vision_targets` (Qwen-VL).
    pub lora_vision_targets: Option<Vec<String>>,
    /// `lora_dropout` (Qwen-VL).
    pub lora_dropout: Option<f64>,
    /// `gradient_checkpointing` (Qwen-VL).
    pub gradient_checkpointing: Option<bool>,
    /// `coords` (Qwen-VL).
    pub coords: Option<String>,
    /// `prompt` (Qwen-VL).
    pub prompt: Option<PathBuf>,
    /// `max_new_tokens` (Qwen-VL).
    pub max_new_tokens: Option<usize>,
    /// `decode_rows` (Qwen-VL).
    pub decode_rows: Option<usize>,
    /// `decode_window` (Qwen-VL).
    pub decode_window: Option<crate::policy::qwen_vl::DecodeWindow>,
    /// `decode_sync` (Qwen-VL).
    pub decode_sync: Option<usize>,
    /// `decode_lora` (Qwen-VL).
    pub decode_lora: Option<crate::policy::qwen_vl::DecodeLora>,
    /// `decode_kernels` (Qwen-VL).
    pub decode_kernels: Option<crate::policy::qwen_vl::DecodeKernels>,
    /// `batch_invariant` (Qwen-VL).
    pub batch_invariant: Option<bool>,
    /// `decode_graph` (Qwen-VL).
    pub decode_graph: Option<bool>,
    /// `score_same_states_once` (Qwen-VL).
    pub score_same_states_once: Option<bool>,
    /// `dtype` (Qwen-VL).
    pub dtype: Option<String>,
    /// `train_modules` (Qwen-VL).
    pub train_modules: Option<Vec<String>>,
    /// `init` (every kind).
    pub init: Option<PathBuf>,
}
