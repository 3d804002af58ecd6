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
    /// in chunks of this many rows, padded where a product's rounding depends on its row
    /// count (in bf16 on a CPU and with eager kernels on a GPU at any count, on a CPU in
    /// f32 above 8 rows, with fused kernels on a GPU above 16: `nn::gemm::padded_rows`),
    /// so a state's
    /// answer is the same whichever states share its batch. 1 decodes every answer alone;
    /// identical prompts still run once. Unset: as many as the collector has envs
    /// ([`QwenPolicySettings::decode_rows_for`]); a whole call's default is
    /// [`QwenPolicySettings::decode_rows_on`] the device.
    #[serde(default)]
    pub decode_rows: Option<usize>,
    /// How answers being decoded hold their keys and values: `"auto"` (window slots sized
    /// per prompt, one attention per layer for a chunk of `decode_rows` answers), a number
    /// of tokens (slots of that size), or `"off"` (each answer its own cache and attention).
    /// Unset: [`QwenPolicySettings::decode_window_on`] the device. Whichever, an answer is
    /// bit for bit the same whatever shares its batch; windows and per-answer attention
    /// agree within rounding, not bit for bit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decode_window: Option<DecodeWindow>,
    /// Decoding steps between the host's reads of the tokens drawn: the tokens are fed back
    /// on the device, and the host learns them (and which answers ended) every this many
    /// steps, so it does not wait for the device at every token. An answer that ended
    /// between reads runs on until the next one and its extra tokens are dropped: the
    /// answers are the same bits whatever the value. Unset:
    /// [`QwenPolicySettings::decode_sync_on`] the device.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decode_sync: Option<usize>,
    /// How decoding reads the LoRA adapters: `"merged"` (each adapted layer's weight with
    /// its adapter merged in, `W + scale · B A` rounded once to the model's dtype, in a
    /// copy made when a decoding session starts: one product a layer, the adapted
    /// weights' memory again) or `"separate"` (the base product and the adapter's, the
    /// low-rank term in f32, exactly as training computes the layer). Unset:
    /// [`QwenPolicySettings::decode_lora_on`] the device.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decode_lora: Option<DecodeLora>,
    /// How a decoding step's attention, small steps and draw run: `"eager"` (candle's ops
    /// one by one: the attention's products, mask, softmax and casts as transformers' eager
    /// attention, each sum, norm and rotation, the draw's log-softmax and prefix sums) or
    /// `"fused"` ([`crate::nn::decode`]'s kernels, on the CPU and on CUDA: one a layer in
    /// which each answer attends over its own length alone, in f32, the residual sum with
    /// the next norm, the query's and key's norms with their rotation and SwiGLU one kernel
    /// each, the linear layers' and the LM head's products of up to 8 rows on a CPU, 16 on
    /// CUDA, one kernel that reads each weight once for all of them, and one a step drawing
    /// every answer's token). Unset: [`QwenPolicySettings::decode_kernels_on`] the device.
    /// Either way an answer is the same bits whatever shares its batch (unless
    /// `batch_invariant = false`); the two agree within rounding.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decode_kernels: Option<DecodeKernels>,
    /// Whether an answer is the same bits whatever shares its decoding steps (default
    /// `true`): chunks run on exactly `decode_rows` rows, padded with copies where a
    /// product's rounding depends on the row count (see `decode_rows`), and every prompt
    /// runs alone. `false` runs only the live answers of a chunk, faster where a wide chunk
    /// has few answers live, and the prompts admitted between two steps together (their
    /// screenshots in one call of the vision tower, their remainders in one padded pass;
    /// docs/qwen-vl-speed.md, what batch invariance costs), but an answer's last bits then depend on
    /// what shared its steps, so a run with several envs is no longer reproducible to the
    /// bit. Needs per-answer caches (`decode_window = "off"`, the default when `false`):
    /// window slots always run whole chunks.
    #[serde(default = "yes", skip_serializing_if = "is_true")]
    pub batch_invariant: bool,
    /// Capture each window chunk's decoding step once as a CUDA graph and replay it at
    /// every later step (default `false`): one launch a step instead of every layer's
    /// kernels, the same results. Needs a CUDA device and window slots (`decode_window`
    /// not `"off"`); where a step cannot be captured the log says so and it runs
    /// uncaptured. Not yet run on a GPU (docs/gpu.md).
    #[serde(default, skip_serializing_if = "is_false")]
    pub decode_graph: bool,
    /// States that a training pass scores with the same prompt and screenshot (a GRPO
    /// group's first steps) run that prompt once and only their answers apart (default
    /// `true`): fewer tokens, but two passes of their own per set of two or more, which on
    /// a GPU may cost more than the tokens saved (docs/qwen-vl-speed.md, a group's prompt,
    /// scored once). `false` runs each in the pass's one padded batch. The scores are the
    /// same either way, within rounding.
    #[serde(default = "yes", skip_serializing_if = "is_true")]
    pub score_same_states_once: bool,
    /// `f32` or `bf16` (weights and activations; adapters and their optimizer stay f32).
    #[serde(default = "default_dtype")]
    pub dtype: String,
    /// Modules trained whole beside the adapters (`embed_tokens`, `lm_head`, `norm`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub train_modules: Vec<String>,
}

/// How decoding reads the LoRA adapters (`decode_lora`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DecodeLora {
    /// Merged into a copy of each adapted layer's weight for the session.
    Merged,
    /// Applied beside each layer's base product, as in training.
    Separate,
}

/// How a decoding step's attention, small steps and draw run (`decode_kernels`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DecodeKernels {
    /// candle's ops one by one.
    Eager,
    /// [`crate::nn::decode`]'s kernels: attention over each answer's own length, the
    /// layer's small steps fused, products of a few rows, the draw.
    Fused,
}

/// `Display` and `FromStr` of a setting written as one of a few words (the words serde
/// reads), for the benches' flags and messages.
macro_rules! words {
    ($ty:ident, $key:literal, $($variant:ident = $word:literal),+) => {
        impl std::fmt::Display for $ty {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(match self { $($ty::$variant => $word),+ })
            }
        }
        impl std::str::FromStr for $ty {
            type Err = String;
            fn from_str(s: &str) -> Result<Self, String> {
                match s {
                    $($word => Ok($ty::$variant),)+
                    _ => {
                        let words: Vec<String> = [$($word),+].iter().map(|w| format!("{w:?}")).collect();
                        Err(format!("{} = {s:?}: use {}", $key, words.join(" or ")))
                    }
                }
            }
        }
    };
}
words!(DecodeLora, "decode_lora", Merged = "merged", Separate = "separate");
words!(DecodeKernels, "decode_kernels", Eager = "eager", Fused = "fused");

/// How answers being decoded hold their keys and values (`decode_window`): written
/// `"auto"`, `"off"` or a number of tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DecodeWindow {
    /// Each answer its own cache, attention over its own length.
    Off,
    /// Window slots of the answer's prompt plus `max_new_tokens`, rounded up to a multiple
    /// of [`DecodeWindow::AUTO_STEP`]: answers whose windows round alike share chunks, and
    /// an answer's slot size depends on its own prompt alone.
    Auto,
    /// Window slots of this many tokens for every answer; a prompt that leaves no room
    /// for `max_new_tokens` is an error.
    Tokens(usize),
}

impl DecodeWindow {
    /// What `"auto"` rounds a window up to a multiple of.
    pub const AUTO_STEP: usize = 256;

    /// The slot size for an answer that needs `need` tokens (its prompt plus
    /// `max_new_tokens`); `None` without windows.
    pub fn slot_for(self, need: usize) -> Option<usize> {
        match self {
            DecodeWindow::Off => None,
            DecodeWindow::Auto => Some(need.div_ceil(Self::AUTO_STEP).max(1) * Self::AUTO_STEP),
            DecodeWindow::Tokens(w) => Some(w),
        }
    }

    fn in_range(self) -> bool {
        !matches!(self, DecodeWindow::Tokens(w) if !(16..=1 << 20).contains(&w))
    }
}

const WINDOW_WORDS: &str = "\"auto\", \"off\" or a number of tokens";

impl std::str::FromStr for DecodeWindow {
    type Err = String;
    /// `auto`, `off` or a number of tokens, as in a config.
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "auto" => Ok(DecodeWindow::Auto),
            "off" => Ok(DecodeWindow::Off),
            _ => s
                .parse()
                .map(DecodeWindow::Tokens)
                .map_err(|_| format!("decode_window = {s:?}: use {WINDOW_WORDS}")),
        }
    }
}

impl std::fmt::Display for DecodeWindow {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        match self {
            DecodeWindow::Off => f.write_str("off"),
            DecodeWindow::Auto => f.write_str("auto"),
            DecodeWindow::Tokens(n) => write!(f, "{n}"),
        }
    }
}

/// In a config (TOML, JSON: human-readable formats) `"auto"`, `"off"` or an integer; in a
/// compact format always a string, the same words or the integer's digits.
impl Serialize for DecodeWindow {
    fn serialize<S: serde::Serializer>(&self, ser: S) -> Result<S::Ok, S::Error> {
        match self {
            DecodeWindow::Tokens(n) if ser.is_human_readable() => ser.serialize_u64(*n as u64),
            w => ser.collect_str(w),
        }
    }
}

impl<'de> Deserialize<'de> for DecodeWindow {
    fn deserialize<D: serde::Deserializer<'de>>(de: D) -> Result<Self, D::Error> {
        struct Visit;
        impl serde::de::Visitor<'_> for Visit {
            type Value = DecodeWindow;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str(WINDOW_WORDS)
            }
            fn visit_u64<E: serde::de::Error>(self, n: u64) -> Result<DecodeWindow, E> {
                Ok(DecodeWindow::Tokens(n as usize))
            }
            fn visit_i64<E: serde::de::Error>(self, n: i64) -> Result<DecodeWindow, E> {
                usize::try_from(n)
                    .map(DecodeWindow::Tokens)
                    .map_err(|_| E::custom(format!("decode_window = {n}: use {WINDOW_WORDS}")))
            }
            fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<DecodeWindow, E> {
                s.parse().map_err(E::custom)
            }
        }
        if de.is_human_readable() {
            de.deserialize_any(Visit)
        } else {
            de.deserialize_str(Visit)
        }
    }
}

fn is_zero(x: &f64) -> bool {
    *x == 0.0
}
fn yes() -> bool {
    true
}
fn is_true(b: &bool) -> bool {
    *b
}
fn is_false(b: &bool) -> bool {
    !*b
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
    /// The decoding rows of a decoder that keeps at most `live` answers in flight (the
    /// collector's envs): as set, else `live` (1 to 256), so that every answer the
    /// collector can have in flight shares one pass of the weights. A step's time hardly
    /// grows with its rows on a GPU (the host issuing kernels); on a CPU in f32 a chunk of
    /// up to 8 rows runs only its live rows (`nn::gemm::padded_rows`), and a wider one pays
    /// for its padding rows when few answers are live (docs/qwen-vl-speed.md, chunks of rows).
    pub fn decode_rows_for(&self, live: usize) -> usize {
        self.decode_rows.unwrap_or(live.clamp(1, 256))
    }

    /// The decoding rows of a whole call ([`crate::policy::Policy::act`]), fixed
    /// whatever the call's size so an answer does not depend on it: as set, else `free`
    /// where products of up to `free` rows round each row alike whatever their count
    /// (`QwenVl::invariant_rows`: 8 for f32 on a CPU, 16 with the fused kernels on CUDA;
    /// such chunks run unpadded), else 1 on a CPU (padding rows would cost compute) and 32
    /// on a GPU.
    pub fn decode_rows_on(&self, device: &candle_core::Device, free: usize) -> usize {
        self.decode_rows.unwrap_or(if free > 1 {
            free
        } else if device.is_cuda() {
            32
        } else {
            1
        })
    }

    /// `decode_window`, or its default on `device`: per-answer attention on a CPU (the
    /// windows read every slot position and gained nothing there), window slots sized per
    /// prompt on a GPU (faster at every rollout count on an H200: docs/gpu.md); per-answer
    /// attention wherever `batch_invariant` is off (window chunks always run whole).
    pub fn decode_window_on(&self, device: &candle_core::Device) -> DecodeWindow {
        self.decode_window.unwrap_or(if device.is_cuda() && self.batch_invariant {
            DecodeWindow::Auto
        } else {
            DecodeWindow::Off
        })
    }

    /// `decode_lora`, or its default on `device`: separate on a CPU (decoding there is
    /// the products' arithmetic, and separate adapters decode exactly what training
    /// scores), merged on a GPU, where a decoding step's time is the kernels it issues and
    /// an adapted layer's nine become one (docs/gpu.md, rollout decoding).
    pub fn decode_lora_on(&self, device: &candle_core::Device) -> DecodeLora {
        self.decode_lora.unwrap_or(if device.is_cuda() { DecodeLora::Merged } else { DecodeLora::Separate })
    }

    /// `decode_kernels`, or its default: fused on a CPU, where they decode 1.2–1.3× faster
    /// (docs/qwen-vl-speed.md, fused kernels); eager on a GPU until the fused kernels have run on one
    /// (docs/gpu.md, rollout decoding).
    pub fn decode_kernels_on(&self, device: &candle_core::Device) -> DecodeKernels {
        self.decode_kernels.unwrap_or(if device.is_cuda() {
            DecodeKernels::Eager
        } else {
            DecodeKernels::Fused
        })
    }

    /// `decode_sync`, or 1: the host reads the tokens at every step unless told. On a CPU
    /// waiting costs nothing and an ended answer's extra steps would cost compute; on an
    /// H200 reading every step was no slower than every 8th, the host being the bound
    /// (docs/gpu.md).
    pub fn decode_sync_on(&self, _device: &candle_core::Device) -> usize {
        self.decode_sync.unwrap_or(1)
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
            decode_lora: None,
            decode_kernels: None,
            batch_invariant: true,
            decode_graph: false,
            score_same_states_once: true,
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
        if let Some(DecodeWindow::Tokens(w)) = self.decode_window.filter(|w| !w.in_range()) {
            bail!(
                "model.decode_window = {w}: use 16 to 1048576 tokens, at least a prompt's length plus \
                 max_new_tokens, or \"auto\" to size each answer's window from its prompt"
            );
        }
        if let Some(w) = self.decode_window.filter(|w| !self.batch_invariant && *w != DecodeWindow::Off) {
            bail!(
                "model.batch_invariant = false with model.decode_window = {w}: window slots always run \
                 whole chunks, so only per-answer caches can run the live answers alone; set \
                 model.decode_window = \"off\" (the default with batch_invariant = false)"
            );
        }
        if self.decode_graph && (self.decode_window == Some(DecodeWindow::Off) || !self.batch_invariant) {
            bail!(
                "model.decode_graph = true needs window slots, whose steps keep their shapes from token to \
                 token: leave model.decode_window unset (\"auto\" on a GPU) or give it a number of tokens, \
                 and model.batch_invariant true"
            );
        }
        if !matches!(self.dtype.as_str(), "f32" | "bf16") {
            bail!("model.dtype = {:?}: use \"f32\" or \"bf16\"", self.dtype);
        }
        Ok(())
    }

    /// What depends on the device the policy runs on, or an error naming the key.
    pub(crate) fn check_on(&self, device: &candle_core::Device) -> Result<()> {
        if self.decode_graph && !device.is_cuda() {
            bail!(
                "model.decode_graph = true captures decoding steps as CUDA graphs, which needs a CUDA \
                 device (device = \"cuda\" at the config's top level, in a build with --features cuda); remove it on a CPU"
            );
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decode_graph_needs_window_slots_and_a_cuda_device() {
        let mut s = QwenPolicySettings::new("qwen3_vl", "fixtures/qwen_vl/qwen3_vl");
        s.decode_graph = true;
        s.check().unwrap();
        let e = s.check_on(&candle_core::Device::Cpu).unwrap_err().to_string();
        assert!(e.contains("model.decode_graph") && e.contains("CUDA device"), "{e}");
        s.decode_window = Some(DecodeWindow::Off);
        let e = s.check().unwrap_err().to_string();
        assert!(e.contains("model.decode_graph") && e.contains("model.decode_window"), "{e}");
        s.decode_window = None;
        s.batch_invariant = false;
        let e = s.check().unwrap_err().to_string();
        assert!(e.contains("model.batch_invariant true"), "{e}");
        let t: QwenPolicySettings =
            toml::from_str("backbone = \"qwen3_vl\"\npath = \"p\"\ndecode_graph = true").unwrap();
        assert!(t.decode_graph);
    }

    #[test]
    fn decode_rows_default_to_the_envs_or_the_rows_that_round_alike_and_keep_what_was_set() {
        let mut s = QwenPolicySettings::new("qwen3_vl", "fixtures/qwen_vl/qwen3_vl");
        assert_eq!(s.decode_rows, None);
        let cpu = candle_core::Device::Cpu;
        // a whole call: unpadded chunks where a few rows round alike (f32), else one row
        assert_eq!((s.decode_rows_on(&cpu, 8), s.decode_rows_on(&cpu, 1)), (8, 1));
        // a decoder for the collector's envs takes them all, within the rows allowed
        assert_eq!((s.decode_rows_for(8), s.decode_rows_for(0), s.decode_rows_for(1000)), (8, 1, 256));
        s.decode_rows = Some(5);
        assert_eq!((s.decode_rows_on(&cpu, 8), s.decode_rows_on(&cpu, 1)), (5, 5));
        assert_eq!(s.decode_rows_for(8), 5);
        s.decode_rows = Some(0);
        assert!(s.check().unwrap_err().to_string().contains("model.decode_rows = 0"));
        s.decode_rows = Some(5);
        s.decode_window = Some(DecodeWindow::Tokens(8));
        assert!(s.check().unwrap_err().to_string().contains("model.decode_window = 8"));
    }

    /// Giving up batch invariance needs per-answer caches: window slots are refused with
    /// what to set, and the window's default turns off.
    #[test]
    fn batch_invariance_is_given_up_only_with_per_answer_caches() {
        let mut s = QwenPolicySettings::new("qwen3_vl", "fixtures/qwen_vl/qwen3_vl");
        assert!(s.batch_invariant);
        s.batch_invariant = false;
        assert!(s.check().is_ok());
        assert_eq!(s.decode_window_on(&candle_core::Device::Cpu), DecodeWindow::Off);
        for w in [DecodeWindow::Auto, DecodeWindow::Tokens(512)] {
            s.decode_window = Some(w);
            let e = s.check().unwrap_err().to_string();
            assert!(
                e.contains("model.batch_invariant = false") && e.contains("decode_window = \"off\""),
                "{e}"
            );
        }
        s.decode_window = Some(DecodeWindow::Off);
        assert!(s.check().is_ok());
    }

    #[test]
    fn the_host_reads_every_step_on_the_cpu_unless_told_and_a_bad_interval_is_named() {
        let mut s = QwenPolicySettings::new("qwen3_vl", "fixtures/qwen_vl/qwen3_vl");
        assert_eq!(s.decode_sync_on(&candle_core::Device::Cpu), 1);
        assert_eq!(s.decode_window_on(&candle_core::Device::Cpu), DecodeWindow::Off);
        assert_eq!(s.decode_lora_on(&candle_core::Device::Cpu), DecodeLora::Separate);
        s.decode_sync = Some(4);
        assert_eq!(s.decode_sync_on(&candle_core::Device::Cpu), 4);
        s.check().unwrap();
        for bad in [0, 65] {
            s.decode_sync = Some(bad);
            let e = s.check().unwrap_err().to_string();
            assert!(e.contains(&format!("model.decode_sync = {bad}")) && e.contains("1 to 64"), "{e}");
        }
    }

    #[test]
    fn word_settings_parse_their_words_name_the_others_and_kernels_default_by_device() {
        let s = QwenPolicySettings::new("qwen3_vl", "fixtures/qwen_vl/qwen3_vl");
        assert_eq!(s.decode_kernels_on(&candle_core::Device::Cpu), DecodeKernels::Fused);
        for k in [DecodeKernels::Eager, DecodeKernels::Fused] {
            assert_eq!(k.to_string().parse::<DecodeKernels>(), Ok(k));
        }
        assert_eq!("merged".parse::<DecodeLora>(), Ok(DecodeLora::Merged));
        let e = "fast".parse::<DecodeKernels>().unwrap_err();
        assert_eq!(e, r#"decode_kernels = "fast": use "eager" or "fused""#);
        let e = "both".parse::<DecodeLora>().unwrap_err();
        assert_eq!(e, r#"decode_lora = "both": use "merged" or "separate""#);
        // a config's word is serde's: the same words
        let t: QwenPolicySettings =
            toml::from_str("backbone = \"qwen3_vl\"\npath = \"p\"\ndecode_kernels = \"fused\"").unwrap();
        assert_eq!(t.decode_kernels, Some(DecodeKernels::Fused));
        let e = toml::from_str::<QwenPolicySettings>(
            "backbone = \"qwen3_vl\"\npath = \"p\"\ndecode_kernels = \"x\"",
        );
        assert!(e.unwrap_err().to_string().contains("eager"));
    }
}
