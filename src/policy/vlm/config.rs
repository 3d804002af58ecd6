//! `VlmConfig`: the architecture of the vision-language policy and the action space it
//! writes in. Saved as `config.json` next to the weights; also readable from TOML.

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use std::path::Path;

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
    /// Word-level instruction features: each byte of a word (a run of ASCII letters and
    /// digits) also gets the embedding of the word's hash bucket, so a word reads the same
    /// at every offset (see `inputs::word_buckets`). 0 (the default, and what configs
    /// written before it load as) turns them off.
    #[serde(default)]
    pub word_buckets: usize,
    /// Screen-text features: the words of each visible element's text
    /// (`ScreenState.elements`, what the page's accessibility tree names) are added, through
    /// the same word table as the instruction's, to the image token under the element's
    /// centre (see `inputs::screen_words`). Needs `word_buckets`. Off in every preset and
    /// in configs written before it existed.
    #[serde(default)]
    pub screen_text: bool,
    /// Memory of the episode: the last `memory` actions of `ScreenState.history` that
    /// point at the screen (click, double-click, hover, a drag's ends, a scroll's place)
    /// are marked on the image token they pointed at, with a learned vector per age. Why:
    /// a policy that reads only the current frame cannot tell a switch it just flipped
    /// from one it has not touched, and greedy decoding then flips it back and forth
    /// until the step limit. 0 (the default, and what older configs load as) turns it off.
    #[serde(default)]
    pub memory: usize,
    /// Each of the last `memory` actions is also an encoder token: its kind and its age,
    /// plus (with `word_buckets`) the words it typed. Why: the marks say where the policy
    /// pointed, not that it typed, so "the field is filled, press Add" and "type now" looked
    /// alike. Needs `memory`; off by default and in older configs.
    #[serde(default)]
    pub memory_actions: bool,
    /// Typing from the instruction: a `type` action may copy a span of the instruction
    /// (two pointer tokens) as well as spell free bytes (see `copy.rs`). Needs the `type`
    /// kind. Off in every preset and in configs written before it existed.
    #[serde(default)]
    pub copy: bool,
    /// The previous screenshot as well as the current one: the stem also reads, per
    /// pixel, the change since the last step (current − previous, three more input
    /// channels; zero at the first step). Why: what the last action changed (a switch that
    /// flipped, a number that moved) is where the episode stands, and one frame does not
    /// show it. Off by default and in older configs.
    #[serde(default)]
    pub previous_frame: bool,
    /// Numbers and symbols on the screen: the image token under an element whose text
    /// holds a number gets a learned vector for how that number compares with the
    /// instruction's first number (less, equal, greater), and an element whose text is
    /// only symbols (`+`, `−`, `›`) is named by them as a screen word. Why: "press + or −
    /// until the counter shows N" needs the direction, which a hashed word cannot give
    /// (it only says equal or not), and the buttons that move it carry no letter or
    /// digit (`builtin/counter`). Needs `screen_text`; off by default and in older configs.
    #[serde(default)]
    pub numbers: bool,
    /// Row labels: a control whose own text has no letter or digit (a `×` clear button,
    /// an icon) also gets, on its token, the words of the nearest element to its left on
    /// the same line (the row's label or labelled field), as a sighted user reads a form
    /// row. Why: with `screen_text` the match flag tells which row the instruction names,
    /// but it sat on the label's token while the click it asks for is on the word-less
    /// button at the row's end, a link 60 demonstrations did not teach
    /// (`builtin/login-settings`). Needs `screen_text`; off by default and in older configs.
    #[serde(default)]
    pub row_labels: bool,
    /// Words are hashed without case (ASCII letters lowered) wherever the policy reads
    /// them: the instruction, the screen's words, typed text. Why: a form labels its field
    /// "Email" and the instruction says "your email"; case-sensitive buckets made them two
    /// words, so the match flag never joined them. Needs `word_buckets`; off by default
    /// and in older configs (whose checkpoints learned case-sensitive buckets).
    #[serde(default)]
    pub fold_case: bool,
    /// Control states against the instruction: the image token under each checkbox or
    /// radio button gets a learned vector for the pair (named by the instruction, checked),
    /// one of four (see `inputs::control_states`). Why: "turn on exactly the named
    /// switches" asks, per control, named XOR on; with the name's match flag and the state
    /// word summed into one token that product is for the encoder to learn, and 100
    /// demonstrations did not teach it (`builtin/toggle-switches`). Needs `screen_text`;
    /// off by default and in older configs.
    #[serde(default)]
    pub control_state: bool,
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
            screen_text: false,
            memory: 0,
            memory_actions: false,
            copy: false,
            previous_frame: false,
            numbers: false,
            row_labels: false,
            fold_case: false,
            control_state: false,
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
            screen_text: false,
            memory: 0,
            memory_actions: false,
            copy: false,
            previous_frame: false,
            numbers: false,
            row_labels: false,
            fold_case: false,
            control_state: false,
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
            screen_text: false,
            memory: 0,
            memory_actions: false,
            copy: false,
            previous_frame: false,
            numbers: false,
            row_labels: false,
            fold_case: false,
            control_state: false,
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
        if self.previous_frame {
            6
        } else {
            3
        }
    }

    /// Image tokens per screenshot.
    pub fn image_tokens(&self) -> usize {
        self.grid_w() * self.grid_h()
    }

    /// Parse TOML and check it.
    pub fn from_toml_str(s: &str) -> Result<Self> {
        let cfg: VlmConfig = toml::from_str(s).context("invalid VLM config (TOML)")?;
        cfg.validate()?;
        Ok(cfg)
    }

    /// Parse JSON and check it.
    pub fn from_json_str(s: &str) -> Result<Self> {
        let cfg: VlmConfig = serde_json::from_str(s).context("invalid VLM config (JSON)")?;
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

    /// What reaches the policy: `pixels+dom` when any input reads `ScreenState.elements`
    /// (`screen_text`, and `numbers`, `row_labels`, `control_state` on top of it), else
    /// `pixels` (the screenshot, the instruction, and with `memory` the policy's own
    /// actions); with the task-shaped features in use, each with the task it was made for.
    pub fn observation(&self) -> crate::policy::observation::Observation {
        use crate::policy::observation::{Observation, TaskShaped, PIXELS, PIXELS_DOM};
        let shaped = [
            (self.numbers, "numbers", "builtin/counter"),
            (self.row_labels, "row_labels", "builtin/login-settings"),
            (self.control_state, "control_state", "builtin/toggle-switches"),
        ];
        let task_shaped: Vec<TaskShaped> =
            shaped.iter().filter(|s| s.0).map(|&(_, name, made_for)| TaskShaped { name, made_for }).collect();
        let dom = self.screen_text || !task_shaped.is_empty();
        Observation { setting: if dom { PIXELS_DOM } else { PIXELS }, task_shaped }
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
        if self.screen_text && self.word_buckets == 0 {
            bail!("VLM config: `screen_text` needs word features: set `word_buckets` (e.g. 1024)");
        }
        if self.numbers && !self.screen_text {
            bail!("VLM config: `numbers` compares numbers on the screen's elements: set `screen_text` too");
        }
        if self.control_state && !self.screen_text {
            bail!("VLM config: `control_state` reads controls against the instruction's words: set `screen_text` too");
        }
        if self.fold_case && self.word_buckets == 0 {
            bail!("VLM config: `fold_case` changes how words are hashed: set `word_buckets` (e.g. 1024) too");
        }
        if self.row_labels && !self.screen_text {
            bail!("VLM config: `row_labels` names word-less controls by their row's screen words: set `screen_text` too");
        }
        if self.memory_actions && self.memory == 0 {
            bail!("VLM config: `memory_actions` needs `memory` (how many actions to remember), e.g. 2");
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
    }
}
