//! Which policy `[model] kind` names, and the small policy's own keys (`kind = "small"`).
//! A Qwen-VL kind's keys are [`crate::policy::qwen_vl::QwenPolicySettings`]' fields.

use crate::policy::vlm::config::{Input, Inputs, DEFAULT_WORD_BUCKETS};
use crate::policy::vlm::VlmConfig;
use anyhow::Context;
use serde::{Deserialize, Serialize};

/// The policy `[model]` describes. Its clap derive lists the kinds for `--model-kind` and
/// [`ModelKind::all`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, clap::ValueEnum)]
pub enum ModelKind {
    /// guirl's small vision-language policy, trained from scratch: a preset plus overrides.
    #[default]
    #[serde(rename = "small")]
    #[value(name = "small")]
    Small,
    /// A pretrained Qwen3-VL checkpoint with LoRA adapters.
    #[serde(rename = "qwen3_vl")]
    #[value(name = "qwen3_vl")]
    Qwen3Vl,
    /// A pretrained Qwen2.5-VL checkpoint (UI-TARS-1.5's base) with LoRA adapters.
    #[serde(rename = "qwen2_5_vl")]
    #[value(name = "qwen2_5_vl")]
    Qwen25Vl,
}

impl ModelKind {
    /// Every kind, in the order the enum declares them.
    pub fn all() -> &'static [ModelKind] {
        <ModelKind as clap::ValueEnum>::value_variants()
    }
    /// The name a config writes (`kind = "qwen2_5_vl"`).
    pub fn name(self) -> &'static str {
        match self {
            ModelKind::Small => "small",
            ModelKind::Qwen3Vl => "qwen3_vl",
            ModelKind::Qwen25Vl => "qwen2_5_vl",
        }
    }
    /// The kind a config names, `None` for a name that is none.
    pub fn from_name(name: &str) -> Option<ModelKind> {
        ModelKind::all().iter().copied().find(|k| k.name() == name)
    }
    /// Whether it is a pretrained Qwen-VL backbone (its keys are the same for both).
    pub fn is_qwen(self) -> bool {
        self != ModelKind::Small
    }
    /// How the kind is described in messages.
    pub fn described(self) -> &'static str {
        match self {
            ModelKind::Small => "guirl's small policy",
            ModelKind::Qwen3Vl | ModelKind::Qwen25Vl => "a pretrained Qwen-VL backbone",
        }
    }
}

impl std::fmt::Display for ModelKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Size of the small policy's network.
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

/// The small policy's keys (`kind = "small"`): a preset plus optional overrides, each
/// replacing the preset's value when set.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SmallModel {
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
    /// What the policy reads: `pixels` (required: the screenshot and the instruction),
    /// `previous_frame`, `elements`, `history` (default `["pixels"]`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inputs: Option<Vec<Input>>,
    /// Word-level features: hash buckets for the instruction's, the elements' and the typed
    /// words (0 = off; default: the preset's, 0, or 1024 with `elements`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub word_buckets: Option<usize>,
    /// Element tokens at most, the first in document order (with `elements`; default 32).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_elements: Option<usize>,
    /// Actions the history remembers (with `history`; default 4).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<usize>,
    /// Typing from the instruction: `type` may copy a span of it (needs the `type` kind;
    /// off by default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub copy: Option<bool>,
    /// Action kinds the policy may write (text-form names: `click`, `type`, `key`, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kinds: Option<Vec<String>>,
    /// Keys a `key(...)` action may press, in text form (default: Enter, Tab, Backspace).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keys: Option<Vec<String>>,
    /// Horizontal coordinate bins.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub x_bins: Option<usize>,
    /// Vertical coordinate bins.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub y_bins: Option<usize>,
    /// Score coordinates with the pointer head (default: on in every preset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pointer: Option<bool>,
}

impl SmallModel {
    /// The policy architecture: the preset plus its overrides.
    pub fn vlm_config(&self) -> anyhow::Result<VlmConfig> {
        let mut v = match self.preset {
            ModelPreset::Tiny => VlmConfig::tiny(),
            ModelPreset::Small => VlmConfig::small(),
            ModelPreset::Base => VlmConfig::base(),
        };
        // Each override that is set replaces the preset's value.
        fn set<T: Clone>(slot: &mut T, value: &Option<T>) {
            if let Some(x) = value {
                *slot = x.clone();
            }
        }
        set(&mut v.d_model, &self.d_model);
        set(&mut v.heads, &self.heads);
        set(&mut v.encoder_layers, &self.layers);
        set(&mut v.stem_patch, &self.patch_size);
        set(&mut v.image_width, &self.image_size);
        set(&mut v.image_height, &self.image_size);
        set(&mut v.max_instruction_bytes, &self.max_instruction_bytes);
        // Every preset reads pixels only.
        v.inputs = self.declared_inputs()?;
        if v.inputs.elements.is_some() && v.word_buckets == 0 {
            v.word_buckets = DEFAULT_WORD_BUCKETS;
        }
        set(&mut v.word_buckets, &self.word_buckets);
        set(&mut v.copy, &self.copy);
        set(&mut v.actions.kinds, &self.kinds);
        set(&mut v.actions.keys, &self.keys);
        set(&mut v.actions.x_bins, &self.x_bins);
        set(&mut v.actions.y_bins, &self.y_bins);
        set(&mut v.pointer, &self.pointer);
        v.validate().context("invalid [model] settings")?;
        Ok(v)
    }

    /// `inputs` with `memory` and `max_elements` (`["pixels"]` when left out).
    fn declared_inputs(&self) -> anyhow::Result<Inputs> {
        Inputs::from_declared(
            self.inputs.as_deref().unwrap_or(&[Input::Pixels]),
            self.memory,
            self.max_elements,
        )
    }

    /// The values a type cannot rule out (a zero size, an unknown action name, a width the
    /// heads do not divide), each bad one reported through `check` by its dotted name.
    pub(crate) fn check(&self, check: &mut impl FnMut(bool, String)) {
        for (k, v) in [
            ("d_model", self.d_model),
            ("layers", self.layers),
            ("heads", self.heads),
            ("patch_size", self.patch_size),
            ("image_size", self.image_size),
            ("max_instruction_bytes", self.max_instruction_bytes),
            ("x_bins", self.x_bins),
            ("y_bins", self.y_bins),
        ] {
            check(v != Some(0), format!("model.{k} must be at least 1"));
        }
        match self.declared_inputs() {
            Err(e) => check(false, e.to_string()),
            Ok(inputs) => {
                if let (Some(_), Some(n @ (0 | 1))) = (inputs.elements, self.word_buckets) {
                    check(
                        false,
                        format!(
                            "model.word_buckets = {n}: the \"elements\" input reads the elements' words through \
                             the word table; use at least 2, or leave it out ({DEFAULT_WORD_BUCKETS} with elements)"
                        ),
                    );
                }
            }
        }
        if let Some(kinds) = &self.kinds {
            check(!kinds.is_empty(), "model.kinds must name at least one action kind".into());
            for k in kinds {
                check(
                    crate::env::GuiAction::KINDS.contains(&k.as_str()),
                    format!(
                        "model.kinds: unknown action kind {k:?} (expected one of {:?})",
                        crate::env::GuiAction::KINDS
                    ),
                );
            }
        }
        if let (Some(d), Some(h)) = (self.d_model, self.heads) {
            check(h == 0 || d % h == 0, format!("model.heads ({h}) must divide model.d_model ({d})"));
        }
        if let (Some(i), Some(p)) = (self.image_size, self.patch_size) {
            check(p == 0 || i % p == 0, format!("model.patch_size ({p}) must divide model.image_size ({i})"));
        }
    }
}
