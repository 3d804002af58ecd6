//! `[model]` of a training config: a policy preset plus optional overrides, resolved to a
//! policy architecture, and the starting weights (`init`).

use crate::policy::qwen_vl::{QwenPolicySettings, QwenVlPolicy};
use crate::policy::vlm::{VlmConfig, VlmPolicy, CONFIG_FILE, WEIGHTS_FILE};
use crate::policy::TrainablePolicy;
use anyhow::{bail, Context};
use candle_core::Device;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

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
    /// A pretrained backbone instead of the small policy: `qwen3_vl` or `qwen2_5_vl`
    /// (then `path` names the checkpoint and the small policy's keys above do not apply).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backbone: Option<String>,
    /// The backbone's checkpoint: a Hugging Face folder, or `hf:ORG/NAME` in the HF cache.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// LoRA rank of the backbone's adapters (default 16).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lora_rank: Option<usize>,
    /// LoRA alpha (default 32; the update is scaled by alpha / rank).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lora_alpha: Option<f64>,
    /// Language-model layers that get adapters (default: q/k/v/o and the MLP's gate/up/down).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lora_targets: Option<Vec<String>>,
    /// Vision-tower layers that get adapters (`qkv`, `proj`, `linear_fc1`, `linear_fc2`;
    /// default none: the tower stays frozen and its output is cached per screenshot).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lora_vision_targets: Option<Vec<String>>,
    /// Dropout on the adapters' input in training passes, in [0, 1) (default 0: off).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lora_dropout: Option<f64>,
    /// Recompute each decoder layer in the backward pass instead of keeping its
    /// activations: less memory, one more forward (default false).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gradient_checkpointing: Option<bool>,
    /// The backbone's answer coordinates (`rel1000`, `smart_resize`, `px`, ...; default:
    /// the architecture's own).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub coords: Option<String>,
    /// The backbone's system prompt file (`{frame}` is replaced; default: the `openai:`
    /// policy's prompt).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt: Option<PathBuf>,
    /// Longest answer of the backbone, in tokens (default 32).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_new_tokens: Option<usize>,
    /// Rows each decoding step of the backbone computes: a rollout batch's states advance
    /// together in chunks of exactly this many (padded), so an answer does not depend on
    /// which states share its batch; 1 decodes each state alone (default 8).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decode_rows: Option<usize>,
    /// The backbone's weights dtype: `f32` (default) or `bf16`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dtype: Option<String>,
    /// Backbone modules trained whole beside the adapters: `embed_tokens`, `lm_head`,
    /// `norm` (a randomly initialised model needs its head trained; default none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub train_modules: Option<Vec<String>>,
    /// Weights to start from: a checkpoint folder (e.g. a cloned policy's
    /// `checkpoints/iter-000000`; its architecture must be the one `[model]` describes)
    /// or a safetensors file. A resumed run starts from its own checkpoint instead.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub init: Option<PathBuf>,
}

impl ModelConfig {
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

    /// What reaches the policy (see [`crate::policy::observation`]): a pretrained backbone
    /// reads the screenshot and the instruction only (`pixels`); the small policy says
    /// itself ([`VlmConfig::observation`]).
    pub fn observation(&self) -> anyhow::Result<crate::policy::observation::Observation> {
        match self.backbone {
            Some(_) => Ok(crate::policy::observation::Observation::pixels()),
            None => Ok(self.vlm_config()?.observation()),
        }
    }

    /// A fresh policy of that architecture (initialised from `seed`), holding `init`'s
    /// weights when it is set.
    pub fn build_policy(&self, device: &Device, seed: u64) -> anyhow::Result<VlmPolicy> {
        let policy = VlmPolicy::new(self.vlm_config()?, device, seed)?;
        if let Some(init) = &self.init {
            start_from(&policy, init, device)?;
        }
        Ok(policy)
    }

    /// The trainable policy `[model]` describes, as the trainer holds it.
    pub fn build(&self, device: &Device, seed: u64) -> anyhow::Result<Box<dyn TrainablePolicy>> {
        match self.backbone_settings()? {
            Some(settings) => {
                let mut policy = QwenVlPolicy::new(settings, device, seed)?;
                if let Some(init) = &self.init {
                    let dir = super::checkpoint::resolve_policy_dir(init)
                        .map(|p| p.dir)
                        .unwrap_or_else(|_| init.to_path_buf());
                    policy
                        .load(&dir)
                        .with_context(|| format!("model.init: cannot start from {}", dir.display()))?;
                }
                Ok(Box::new(policy))
            }
            None => Ok(Box::new(self.build_policy(device, seed)?)),
        }
    }

    /// The pretrained backbone's settings when `backbone` is set; the small policy's keys
    /// set beside it, or backbone keys without it, are errors naming them.
    pub fn backbone_settings(&self) -> anyhow::Result<Option<QwenPolicySettings>> {
        let backbone_keys = [
            ("path", self.path.is_some()),
            ("lora_rank", self.lora_rank.is_some()),
            ("lora_alpha", self.lora_alpha.is_some()),
            ("lora_targets", self.lora_targets.is_some()),
            ("lora_vision_targets", self.lora_vision_targets.is_some()),
            ("lora_dropout", self.lora_dropout.is_some()),
            ("gradient_checkpointing", self.gradient_checkpointing.is_some()),
            ("coords", self.coords.is_some()),
            ("prompt", self.prompt.is_some()),
            ("max_new_tokens", self.max_new_tokens.is_some()),
            ("decode_rows", self.decode_rows.is_some()),
            ("dtype", self.dtype.is_some()),
            ("train_modules", self.train_modules.is_some()),
        ];
        let Some(backbone) = &self.backbone else {
            if let Some((k, _)) = backbone_keys.iter().find(|(_, set)| *set) {
                bail!("model.{k} is a pretrained backbone's setting: set model.backbone (\"qwen3_vl\" or \"qwen2_5_vl\") too, or remove it");
            }
            return Ok(None);
        };
        let small = serde_json::to_value(ModelConfig {
            backbone: None,
            path: None,
            lora_rank: None,
            lora_alpha: None,
            lora_targets: None,
            lora_vision_targets: None,
            lora_dropout: None,
            gradient_checkpointing: None,
            coords: None,
            prompt: None,
            max_new_tokens: None,
            decode_rows: None,
            dtype: None,
            train_modules: None,
            init: None,
            preset: ModelPreset::Tiny,
            ..self.clone()
        })?;
        if let Some(k) = small.as_object().and_then(|m| m.keys().find(|k| *k != "preset").cloned()) {
            bail!("model.{k} is a setting of guirl's small policy; it does not apply with model.backbone = {backbone:?}: remove it");
        }
        let path = self.path.clone().ok_or_else(|| {
            anyhow::anyhow!(
                "model.backbone = {backbone:?} needs model.path: a checkpoint folder or hf:ORG/NAME"
            )
        })?;
        let mut s = QwenPolicySettings::new(backbone, &path);
        if let Some(v) = self.lora_rank {
            s.lora_rank = v;
        }
        if let Some(v) = self.lora_alpha {
            s.lora_alpha = v;
        }
        if let Some(v) = &self.lora_targets {
            s.lora_targets = v.clone();
        }
        if let Some(v) = &self.lora_vision_targets {
            s.lora_vision_targets = v.clone();
        }
        if let Some(v) = self.lora_dropout {
            s.lora_dropout = v;
        }
        if let Some(v) = self.gradient_checkpointing {
            s.gradient_checkpointing = v;
        }
        s.coords = self.coords.clone();
        s.prompt = self.prompt.clone();
        if let Some(v) = self.max_new_tokens {
            s.max_new_tokens = v;
        }
        if let Some(v) = self.decode_rows {
            s.decode_rows = Some(v);
        }
        if let Some(v) = &self.dtype {
            s.dtype = v.clone();
        }
        s.train_modules = self.train_modules.clone().unwrap_or_default();
        Ok(Some(s))
    }
}

/// `[model] init`: load a checkpoint folder's (a run folder's best, or a safetensors file's) weights into
/// the freshly built `policy`, whose architecture `[model]` describes.
fn start_from(policy: &VlmPolicy, init: &Path, device: &Device) -> anyhow::Result<()> {
    // A run folder or its `latest` / `best` link names a checkpoint folder, as for
    // `--policy`; anything else keeps its own message below.
    let resolved = match init.is_dir() {
        true => {
            super::checkpoint::resolve_policy_dir(init).map(|p| p.dir).unwrap_or_else(|_| init.to_path_buf())
        }
        false => init.to_path_buf(),
    };
    let init = resolved.as_path();
    let weights = if init.is_dir() {
        let cfg_path = init.join(CONFIG_FILE);
        if cfg_path.is_file() {
            let theirs = VlmConfig::from_file(&cfg_path)?;
            let diff = config_diff(&theirs, policy.config())?;
            if !diff.is_empty() {
                bail!(
                    "model.init: {} holds a policy with another architecture than [model] describes \
                     ({}); give [model] the settings of the run that wrote it",
                    init.display(),
                    diff.join(", ")
                );
            }
        }
        init.join(WEIGHTS_FILE)
    } else {
        init.to_path_buf()
    };
    if !weights.is_file() {
        bail!(
            "model.init: {} does not exist (expected a checkpoint folder such as runs/NAME/checkpoints/iter-000000, or a .safetensors file)",
            weights.display()
        );
    }
    policy
        .load_weights(&weights, device)
        .with_context(|| format!("model.init: cannot start from {}", init.display()))
}

/// The settings in which two architectures differ, as `name: theirs (checkpoint) vs
/// ours ([model])`.
fn config_diff(theirs: &VlmConfig, ours: &VlmConfig) -> anyhow::Result<Vec<String>> {
    fn flat(prefix: &str, v: serde_json::Value, out: &mut Vec<(String, serde_json::Value)>) {
        match v {
            serde_json::Value::Object(m) => {
                m.into_iter().for_each(|(k, v)| flat(&format!("{prefix}{k}."), v, out))
            }
            v => out.push((prefix.trim_end_matches('.').to_string(), v)),
        }
    }
    let (mut a, mut b) = (vec![], vec![]);
    flat("", serde_json::to_value(theirs)?, &mut a);
    flat("", serde_json::to_value(ours)?, &mut b);
    Ok(a.into_iter()
        .zip(b)
        .filter(|((_, x), (_, y))| x != y)
        .map(|((k, x), (_, y))| format!("{k}: {x} in the checkpoint, {y} in [model]"))
        .collect())
}
