//! Which policy `[model] kind` names, and the small policy's own keys (`kind = "small"`).
//! A Qwen-VL kind's keys are [`crate::policy::qwen_vl::QwenPolicySettings`]' fields.

use crate::policy::vlm::VlmConfig;
use anyhow::Context;
use serde::{Deserialize, Serialize};

/// The policy `[model]` describes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum ModelKind {
    /// guirl's small vision-language policy, trained from scratch: a preset plus overrides.
    #[default]
    #[serde(rename = "small")]
    Small,
    /// A pretrained Qwen3-VL checkpoint with LoRA adapters.
    #[serde(rename = "qwen3_vl")]
    Qwen3Vl,
    /// A pretrained Qwen2.5-VL checkpoint (UI-TARS-1.5's base) with LoRA adapters.
    #[serde(rename = "qwen2_5_vl")]
    Qwen25Vl,
}

impl ModelKind {
    /// Every kind, in the order `kind`'s documentation lists them.
    pub const ALL: [ModelKind; 3] = [ModelKind::Small, ModelKind::Qwen3Vl, ModelKind::Qwen25Vl];
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
        ModelKind::ALL.into_iter().find(|k| k.name() == name)
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
    /// Word-level instruction features: hash buckets (0 = off, the presets' default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub word_buckets: Option<usize>,
    /// Screen-text features: the visible elements' words at their place on the image
    /// (needs `word_buckets`; off in the presets).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub screen_text: Option<bool>,
    /// Memory of the episode: the last N screen-pointing actions marked on the image
    /// (0 = off, the default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<usize>,
    /// The last `memory` actions also as encoder tokens (kind, age, typed words; needs
    /// `memory`; off by default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_actions: Option<bool>,
    /// Typing from the instruction: `type` may copy a span of it (needs the `type` kind;
    /// off by default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub copy: Option<bool>,
    /// The previous screenshot too: the stem reads the change since the last step (off by
    /// default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous_frame: Option<bool>,
    /// Numbers and symbols on the screen: a number's order against the instruction's and
    /// symbol-only element texts as words (needs `screen_text`; off by default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub numbers: Option<bool>,
    /// Row labels: a word-less control (`×`, an icon) also gets the words of the element
    /// to its left on the same line (needs `screen_text`; off by default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub row_labels: Option<bool>,
    /// Words hashed without case, so "Email" on the page is "email" in the instruction
    /// (needs `word_buckets`; off by default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fold_case: Option<bool>,
    /// Checkbox and radio states crossed with whether the instruction names the control
    /// (needs `screen_text`; off by default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub control_state: Option<bool>,
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
        set(&mut v.word_buckets, &self.word_buckets);
        set(&mut v.screen_text, &self.screen_text);
        set(&mut v.memory, &self.memory);
        set(&mut v.memory_actions, &self.memory_actions);
        set(&mut v.copy, &self.copy);
        set(&mut v.previous_frame, &self.previous_frame);
        set(&mut v.numbers, &self.numbers);
        set(&mut v.row_labels, &self.row_labels);
        set(&mut v.fold_case, &self.fold_case);
        set(&mut v.control_state, &self.control_state);
        set(&mut v.actions.kinds, &self.kinds);
        set(&mut v.actions.keys, &self.keys);
        set(&mut v.actions.x_bins, &self.x_bins);
        set(&mut v.actions.y_bins, &self.y_bins);
        set(&mut v.pointer, &self.pointer);
        v.validate().context("invalid [model] settings")?;
        Ok(v)
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
