//! `VlmConfig`: the architecture of the vision-language policy and the action space it
//! writes in. Saved as `config.json` next to the weights; also readable from TOML.

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use std::path::Path;

use super::old_config::FORMAT;
use crate::env::GuiAction;

/// The sizes of the model and its action space. Presets: [`VlmConfig::tiny`] (tests),
/// [`VlmConfig::small`] (default, CPU), [`VlmConfig::base`] (GPU).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VlmConfig {
    /// Every screenshot is resized to this width (pixels) before the vision stem.
    pub image_width: usize,
    /// Every screenshot is resized to this height (pixels).
    pub image_height: usize,
    /// Side of the stem's first, non-overlapping patch layer (pixels).
    pub stem_patch: usize,
    /// Channels after the first stem layer.
    pub stem_channels: usize,
    /// Side of the stem's second (merging) layer, in first-layer cells. One image token
    /// covers `stem_patch * stem_merge` pixels square.
    pub stem_merge: usize,
    /// Width of every token.
    pub d_model: usize,
    /// Attention heads (divides `d_model`).
    pub heads: usize,
    /// Hidden width of the MLPs.
    pub mlp_dim: usize,
    /// Transformer layers over image + instruction tokens.
    pub encoder_layers: usize,
    /// Decoder layers over the action tokens (self- and cross-attention).
    pub decoder_layers: usize,
    /// Instructions are cut to this many UTF-8 bytes.
    pub max_instruction_bytes: usize,
    /// What the decoder may write.
    pub actions: ActionSpaceConfig,
    /// Score coordinate tokens with the pointer head (a query against a key grid over the
    /// screenshot, see `pointer.rs`) on top of the linear head. Absent in configs written
    /// before it existed, which load as `false`.
    #[serde(default)]
    pub pointer: bool,
    /// Word-level features: each byte of an instruction word (a run of ASCII letters and
    /// digits) also gets the embedding of the word's hash bucket, so a word reads the same
    /// at every offset (see `words::word_buckets`); the element tokens and the history's
    /// typed text read their words through the same table. Words are hashed without case
    /// (the page's "Email" is the instruction's "email"). 0 turns them off; `elements`
    /// needs at least 2.
    #[serde(default)]
    pub word_buckets: usize,
    /// What the encoder reads besides the screenshot and the instruction.
    #[serde(default)]
    pub inputs: Inputs,
    /// Typing from the instruction: a `type` action may copy a span of the instruction
    /// (two pointer tokens) as well as spell free bytes (see `copy.rs`). Needs the `type`
    /// kind. Off in every preset and in configs written before it existed.
    #[serde(default)]
    pub copy: bool,
    /// The layout of the network a `config.json` describes, [`FORMAT`] for every config
    /// made now (a hand-written one leaves it out). Absent in guirl 0.1's and in guirl
    /// 0.2.0's first checkpoints, which `old_config.rs` reads or refuses.
    #[serde(default)]
    pub format: u32,
}

/// What the small policy reads besides the screenshot and the instruction (which it always
/// reads). Every combination is meaningful; a training config declares them as a list of
/// [`Input`]s (`[model] inputs`), and `config.json` records them as this table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Inputs {
    /// The previous screenshot as well as the current one: the stem also reads, per
    /// pixel, the change since the last step (current − previous, three more input
    /// channels; zero at the first step). Why: what the last action changed (a switch that
    /// flipped, a number that moved) is where the episode stands, and one frame does not
    /// show it.
    #[serde(default)]
    pub previous_frame: bool,
    /// One encoder token per visible element of `ScreenState.elements`, the first this
    /// many in document order (see `elements.rs`); `None`: the DOM is not read.
    #[serde(default)]
    pub elements: Option<usize>,
    /// The episode's last this many actions (`ScreenState.history`): each marked, by age,
    /// on the image token it pointed at, and each an encoder token of its kind, age and
    /// typed words (see `history.rs`). Why: a policy that reads only the current frame
    /// cannot tell a switch it just flipped from one it has not touched, nor "the field is
    /// filled, press Add" from "type now".
    #[serde(default)]
    pub history: Option<usize>,
}

/// One input a training config declares in `[model] inputs`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Input {
    /// The screenshot (and the instruction): always read, and always listed.
    Pixels,
    /// The change since the previous screenshot ([`Inputs::previous_frame`]).
    PreviousFrame,
    /// One token per visible element ([`Inputs::elements`], at most `max_elements`).
    Elements,
    /// The last `memory` actions ([`Inputs::history`]).
    History,
}

impl Input {
    /// Every input, in the order a config lists them.
    pub const ALL: [Input; 4] = [Input::Pixels, Input::PreviousFrame, Input::Elements, Input::History];

    /// The name a config writes.
    pub fn name(self) -> &'static str {
        match self {
            Input::Pixels => "pixels",
            Input::PreviousFrame => "previous_frame",
            Input::Elements => "elements",
            Input::History => "history",
        }
    }
}

/// Element tokens when `[model] inputs` has `elements` and `max_elements` is left out.
pub const DEFAULT_MAX_ELEMENTS: usize = 32;
/// Remembered actions when `[model] inputs` has `history` and `memory` is left out.
pub const DEFAULT_MEMORY: usize = 4;
/// Word buckets when `[model] inputs` has `elements` and neither `word_buckets` nor the
/// preset sets them.
pub const DEFAULT_WORD_BUCKETS: usize = 1024;

impl Inputs {
    /// The declared list (`pixels` first) with the sizes `memory` and `max_elements` beside
    /// it, as `[model]` writes them; `None` where an input is not declared.
    pub fn declared(&self) -> (Vec<Input>, Option<usize>, Option<usize>) {
        let mut list = vec![Input::Pixels];
        list.extend(self.previous_frame.then_some(Input::PreviousFrame));
        list.extend(self.elements.map(|_| Input::Elements));
        list.extend(self.history.map(|_| Input::History));
        (list, self.history, self.elements)
    }

    /// The inputs a `[model] inputs` list declares, with their sizes (`memory`,
    /// `max_elements`; their defaults when left out). A list without `pixels`, one that
    /// names an input twice, and a size without its input or of 0 are refused, naming the
    /// key.
    pub fn from_declared(
        list: &[Input],
        memory: Option<usize>,
        max_elements: Option<usize>,
    ) -> Result<Inputs> {
        if !list.contains(&Input::Pixels) {
            bail!("model.inputs must list \"pixels\" (the screenshot, which every policy reads)");
        }
        for (i, x) in list.iter().enumerate() {
            if list[..i].contains(x) {
                bail!("model.inputs lists \"{}\" twice", x.name());
            }
        }
        let size = |key: &str, input: Input, value: Option<usize>, default: usize| -> Result<Option<usize>> {
            match (list.contains(&input), value) {
                (_, Some(0)) => bail!("model.{key} must be at least 1"),
                (false, Some(n)) => bail!(
                    "model.{key} = {n} is the size of the \"{}\" input, which model.inputs does not list: \
                     add \"{}\" to model.inputs, or remove model.{key}",
                    input.name(),
                    input.name()
                ),
                (false, None) => Ok(None),
                (true, v) => Ok(Some(v.unwrap_or(default))),
            }
        };
        Ok(Inputs {
            previous_frame: list.contains(&Input::PreviousFrame),
            elements: size("max_elements", Input::Elements, max_elements, DEFAULT_MAX_ELEMENTS)?,
            history: size("memory", Input::History, memory, DEFAULT_MEMORY)?,
        })
    }
}

/// The action space: which kinds of action the policy may write, and how finely.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ActionSpaceConfig {
    /// Action kinds the grammar allows, by text-form name (`click`, `type`, `key`, ...).
    pub kinds: Vec<String>,
    /// Horizontal coordinate bins over the frame width.
    pub x_bins: usize,
    /// Vertical coordinate bins over the frame height.
    pub y_bins: usize,
    /// Keys a `key(...)` action may press, in text form (`Enter`, `ctrl+a`).
    pub keys: Vec<String>,
    /// Pixels per `scroll` action (one token per direction).
    pub scroll_step: i32,
    /// Milliseconds of a `wait` action.
    pub wait_ms: u32,
    /// Longest action in tokens, including the kind token and the text end token: a
    /// `type` action carries at most `max_action_tokens - 2` bytes.
    pub max_action_tokens: usize,
}

impl Default for ActionSpaceConfig {
    /// The MiniWoB++ action space: click, type, key (Enter, Tab, Backspace), done.
    fn default() -> Self {
        ActionSpaceConfig {
            kinds: ["click", "type", "key", "done"].map(String::from).to_vec(),
            x_bins: 32,
            y_bins: 42,
            keys: ["Enter", "Tab", "Backspace"].map(String::from).to_vec(),
            scroll_step: 100,
            wait_ms: 500,
            max_action_tokens: 24,
        }
    }
}

impl Default for VlmConfig {
    fn default() -> Self {
        VlmConfig::small()
    }
}

impl VlmConfig {
    /// For tests: 4×5 image tokens, d_model 32, one layer each side. Trains in seconds.
    pub fn tiny() -> Self {
        VlmConfig {
            image_width: 32,
            image_height: 40,
            stem_patch: 4,
            stem_channels: 16,
            stem_merge: 2,
            d_model: 32,
            heads: 2,
            mlp_dim: 64,
            encoder_layers: 1,
            decoder_layers: 1,
            max_instruction_bytes: 32,
            actions: ActionSpaceConfig {
                x_bins: 16,
                y_bins: 20,
                max_action_tokens: 12,
                ..Default::default()
            },
            pointer: true,
            word_buckets: 0,
            inputs: Inputs::default(),
            copy: false,
            format: FORMAT,
        }
    }

    /// The CPU default: a 72×96 image (MiniWoB's 160×210 at 0.45×, nearly its aspect
    /// ratio) as 9×12 = 108 tokens of width 64, three encoder and two decoder layers.
    /// Two heads, not four: on CPU the attention cost grows with heads (per-head softmax
    /// and small batched matmuls), and four heads cost ~1.5× the whole training step.
    pub fn small() -> Self {
        VlmConfig {
            image_width: 72,
            image_height: 96,
            stem_patch: 4,
            stem_channels: 32,
            stem_merge: 2,
            d_model: 64,
            heads: 2,
            mlp_dim: 256,
            encoder_layers: 3,
            decoder_layers: 2,
            max_instruction_bytes: 64,
            actions: ActionSpaceConfig::default(),
            pointer: true,
            word_buckets: 0,
            inputs: Inputs::default(),
            copy: false,
            format: FORMAT,
        }
    }

    /// For a GPU: the full 160×208 MiniWoB screenshot as 20×26 = 520 tokens of width 256,
    /// six encoder and four decoder layers.
    pub fn base() -> Self {
        VlmConfig {
            image_width: 160,
            image_height: 208,
            stem_patch: 4,
            stem_channels: 64,
            stem_merge: 2,
            d_model: 256,
            heads: 8,
            mlp_dim: 1024,
            encoder_layers: 6,
            decoder_layers: 4,
            max_instruction_bytes: 128,
            actions: ActionSpaceConfig {
                x_bins: 80,
                y_bins: 105,
                max_action_tokens: 40,
                ..Default::default()
            },
            pointer: true,
            word_buckets: 0,
            inputs: Inputs::default(),
            copy: false,
            format: FORMAT,
        }
    }

    /// A preset by name: `tiny`, `small` or `base`.
    pub fn preset(name: &str) -> Result<Self> {
        match name {
            "tiny" => Ok(Self::tiny()),
            "small" => Ok(Self::small()),
            "base" => Ok(Self::base()),
            _ => bail!("unknown VLM preset {name:?}: expected tiny, small or base"),
        }
    }

    /// Image tokens along the width.
    pub fn grid_w(&self) -> usize {
        self.image_width / (self.stem_patch * self.stem_merge)
    }

    /// Image tokens along the height.
    pub fn grid_h(&self) -> usize {
        self.image_height / (self.stem_patch * self.stem_merge)
    }

    /// Values per pixel the stem reads besides its coordinates: RGB, plus the change
    /// since the previous frame with `previous_frame`.
    pub fn image_channels(&self) -> usize {
        if self.inputs.previous_frame {
            6
        } else {
            3
        }
    }

    /// Image tokens per screenshot.
    pub fn image_tokens(&self) -> usize {
        self.grid_w() * self.grid_h()
    }

    /// Parse TOML and check it. A config with guirl 0.1's per-feature switches is read as
    /// its equivalent or refused, as for JSON.
    pub fn from_toml_str(s: &str) -> Result<Self> {
        let value: serde_json::Value = toml::from_str(s).context("invalid VLM config (TOML)")?;
        Self::from_value(value, "TOML")
    }

    /// Parse JSON and check it. A `config.json` that guirl 0.1 wrote (its per-feature
    /// switches) is read as the same policy in the new form where there is one (see
    /// `old_config.rs`), and refused, naming the guirl that reads it, where there is not.
    pub fn from_json_str(s: &str) -> Result<Self> {
        let value: serde_json::Value = serde_json::from_str(s).context("invalid VLM config (JSON)")?;
        Self::from_value(value, "JSON")
    }

    /// A parsed config (of `format`), guirl 0.1's read or refused first: a `config.json`
    /// (written whole by [`super::VlmPolicy::save`]) without `inputs` is 0.1's, a TOML one
    /// (written by hand, `inputs` optional) is when it has 0.1's switches.
    fn from_value(mut value: serde_json::Value, format: &str) -> Result<Self> {
        if let Some(keys) = value.as_object_mut() {
            let old = format == "JSON" || !super::old_config::old_keys(keys).is_empty();
            let what = if format == "JSON" { "this checkpoint's config.json" } else { "this VLM config" };
            if old {
                super::old_config::upgrade_checkpoint(keys, what)?;
            }
            super::old_config::check_format(keys, what, format == "JSON")?;
        }
        let cfg: VlmConfig =
            serde_json::from_value(value).with_context(|| format!("invalid VLM config ({format})"))?;
        cfg.validate()?;
        Ok(cfg)
    }

    /// Read a `.json` or `.toml` file.
    pub fn from_file(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read VLM config {}", path.display()))?;
        let parsed = if path.extension().is_some_and(|e| e == "toml") {
            Self::from_toml_str(&text)
        } else {
            Self::from_json_str(&text)
        };
        parsed.with_context(|| format!("in {}", path.display()))
    }

    /// What reaches the policy: `pixels+dom` when it reads the page's elements (the
    /// `elements` input), else `pixels` (the screenshot, the instruction, and with
    /// `history` the policy's own actions).
    pub fn observation(&self) -> crate::policy::observation::Observation {
        use crate::policy::observation::Observation;
        match self.inputs.elements {
            Some(_) => Observation::PixelsDom,
            None => Observation::Pixels,
        }
    }

    /// Check every size; errors name the key and say what it must be.
    pub fn validate(&self) -> Result<()> {
        let positive = [
            ("image_width", self.image_width),
            ("image_height", self.image_height),
            ("stem_patch", self.stem_patch),
            ("stem_channels", self.stem_channels),
            ("stem_merge", self.stem_merge),
            ("d_model", self.d_model),
            ("heads", self.heads),
            ("mlp_dim", self.mlp_dim),
            ("decoder_layers", self.decoder_layers),
            ("max_instruction_bytes", self.max_instruction_bytes),
            ("actions.x_bins", self.actions.x_bins),
            ("actions.y_bins", self.actions.y_bins),
        ];
        for (key, v) in positive {
            if v == 0 {
                bail!("VLM config: `{key}` must be at least 1");
            }
        }
        let cell = self.stem_patch * self.stem_merge;
        for (key, v) in [("image_width", self.image_width), ("image_height", self.image_height)] {
            if !v.is_multiple_of(cell) {
                bail!("VLM config: `{key}` = {v} must be a multiple of stem_patch * stem_merge = {cell}");
            }
        }
        if self.inputs.elements.is_some() && self.word_buckets < 2 {
            bail!(
                "VLM config: the `elements` input reads the elements' words: set `word_buckets` to at least 2 \
                 (e.g. {DEFAULT_WORD_BUCKETS}, the default with `elements`)"
            );
        }
        for (key, v) in [("max_elements", self.inputs.elements), ("memory", self.inputs.history)] {
            if v == Some(0) {
                bail!("VLM config: `{key}` must be at least 1");
            }
        }
        if self.copy && !self.actions.kinds.iter().any(|k| k == "type") {
            bail!("VLM config: `copy` types from the instruction, so `kinds` must include \"type\"");
        }
        if !self.d_model.is_multiple_of(self.heads) {
            bail!("VLM config: `d_model` = {} must be a multiple of `heads` = {}", self.d_model, self.heads);
        }
        self.actions.validate()
    }
}

impl ActionSpaceConfig {
    /// Check kinds, keys and bins; errors name the key. (Whether `max_action_tokens` fits
    /// the kinds is checked by the vocabulary, which knows the token layout.)
    pub fn validate(&self) -> Result<()> {
        if self.kinds.is_empty() {
            bail!(
                "VLM config: `actions.kinds` is empty; list at least one of {}",
                GuiAction::KINDS.join(", ")
            );
        }
        for (i, k) in self.kinds.iter().enumerate() {
            if !GuiAction::KINDS.contains(&k.as_str()) {
                bail!(
                    "VLM config: `actions.kinds` has {k:?}; expected one of {}",
                    GuiAction::KINDS.join(", ")
                );
            }
            if self.kinds[..i].contains(k) {
                bail!("VLM config: `actions.kinds` lists {k:?} twice");
            }
        }
        if self.kinds.iter().any(|k| k == "key") && self.keys.is_empty() {
            bail!("VLM config: `actions.kinds` has \"key\" but `actions.keys` is empty");
        }
        for k in &self.keys {
            GuiAction::parse(&format!("key({k})"))
                .map_err(|e| anyhow::anyhow!("VLM config: `actions.keys` has {k:?}, not a key: {e}"))?;
        }
        if self.x_bins == 0 || self.y_bins == 0 {
            bail!("VLM config: `actions.x_bins` and `actions.y_bins` must be at least 1");
        }
        if self.scroll_step <= 0 {
            bail!("VLM config: `actions.scroll_step` must be positive");
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presets_validate_and_round_trip_through_json_and_toml() {
        for cfg in [VlmConfig::tiny(), VlmConfig::small(), VlmConfig::base()] {
            cfg.validate().unwrap();
            let json = serde_json::to_string(&cfg).unwrap();
            assert_eq!(VlmConfig::from_json_str(&json).unwrap(), cfg);
            let toml = toml::to_string(&cfg).unwrap();
            assert_eq!(VlmConfig::from_toml_str(&toml).unwrap(), cfg);
        }
        assert_eq!(VlmConfig::small().image_tokens(), 108);
    }

    #[test]
    fn a_config_written_before_the_pointer_head_loads_without_it() {
        let mut json: serde_json::Value = serde_json::to_value(VlmConfig::tiny()).unwrap();
        json.as_object_mut().unwrap().remove("pointer");
        let cfg = VlmConfig::from_json_str(&json.to_string()).unwrap();
        assert!(!cfg.pointer);
        assert!(VlmConfig::tiny().pointer && VlmConfig::small().pointer && VlmConfig::base().pointer);
    }

    #[test]
    fn errors_name_the_key() {
        let mut c = VlmConfig::tiny();
        c.image_width = 30;
        assert!(c.validate().unwrap_err().to_string().contains("`image_width` = 30"));
        let mut c = VlmConfig::tiny();
        c.heads = 3;
        assert!(c.validate().unwrap_err().to_string().contains("`heads`"));
        let mut c = VlmConfig::tiny();
        c.actions.kinds.push("jump".into());
        assert!(c.validate().unwrap_err().to_string().contains("\"jump\""));
        let mut c = VlmConfig::tiny();
        c.actions.keys = vec!["NotAKey".into()];
        assert!(c.validate().unwrap_err().to_string().contains("`actions.keys` has \"NotAKey\""));
        let mut c = VlmConfig::tiny();
        c.copy = true;
        c.actions.kinds = vec!["click".into()];
        assert!(c.validate().unwrap_err().to_string().contains("must include \"type\""));
        let err = VlmConfig::from_toml_str("d_model = 4\nbogus = 1").unwrap_err();
        assert!(format!("{err:#}").contains("bogus"), "{err:#}");
        let c = VlmConfig { inputs: Inputs { elements: Some(8), ..Inputs::default() }, ..VlmConfig::tiny() };
        assert!(c.validate().unwrap_err().to_string().contains("`elements` input reads the elements' words"));
        let c = VlmConfig { word_buckets: 8, inputs: Inputs { elements: Some(0), ..Inputs::default() }, ..c };
        assert!(c.validate().unwrap_err().to_string().contains("`max_elements` must be at least 1"));
        let c = VlmConfig { inputs: Inputs { history: Some(0), ..Inputs::default() }, ..c };
        assert!(c.validate().unwrap_err().to_string().contains("`memory` must be at least 1"));
    }

    /// A TOML config is written by hand: without `inputs` it reads pixels only, and only
    /// guirl 0.1's switches make it 0.1's (a `config.json` without `inputs` is 0.1's).
    #[test]
    fn a_toml_config_without_inputs_is_the_new_form() {
        let c = VlmConfig { word_buckets: 64, ..VlmConfig::tiny() };
        let mut t: toml::Table = toml::from_str(&toml::to_string(&c).unwrap()).unwrap();
        t.remove("inputs");
        assert_eq!(VlmConfig::from_toml_str(&toml::to_string(&t).unwrap()).unwrap(), c);
        t.insert("screen_text".into(), true.into());
        let e = format!("{:#}", VlmConfig::from_toml_str(&toml::to_string(&t).unwrap()).unwrap_err());
        assert!(e.contains("this VLM config was written by guirl 0.1"), "{e}");
        let mut j = serde_json::to_value(&c).unwrap();
        j.as_object_mut().unwrap().remove("inputs");
        let e = format!("{:#}", VlmConfig::from_json_str(&j.to_string()).unwrap_err());
        assert!(e.contains("this checkpoint's config.json was written by guirl 0.1"), "{e}");
    }
}
