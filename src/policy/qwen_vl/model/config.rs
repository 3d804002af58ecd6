//! `config.json` of a Qwen3-VL or Qwen2.5-VL checkpoint, read strictly.
//!
//! Qwen3-VL nests the language model's keys under `text_config`; Qwen2.5-VL checkpoints on
//! the hub keep them at the top level (transformers 5 also writes them nested: both are
//! read). RoPE settings come from `rope_parameters` (transformers 5) or `rope_scaling` +
//! `rope_theta` (older files). A key this reader does not know is an error naming the file
//! and the key: a setting that changes the architecture must not be dropped silently.

use super::config_keys::{known, KeySection};
use anyhow::{anyhow, bail, Context, Result};
use serde_json::{Map, Value};
use std::path::Path;

/// Which of the two architectures a checkpoint is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arch {
    /// Qwen3-VL: DeepStack, learned interpolated vision positions, interleaved M-RoPE,
    /// q/k RMSNorm, LayerNorm + GELU vision blocks.
    Qwen3Vl,
    /// Qwen2.5-VL (and UI-TARS-1.5): window attention, RMSNorm + SwiGLU vision blocks,
    /// sectioned M-RoPE, q/k/v bias.
    Qwen25Vl,
}

impl Arch {
    /// As a config's `model.kind` names it.
    pub fn kind(self) -> &'static str {
        match self {
            Arch::Qwen3Vl => "qwen3_vl",
            Arch::Qwen25Vl => "qwen2_5_vl",
        }
    }
}

/// The language model's settings.
#[derive(Debug, Clone, PartialEq)]
pub struct TextConfig {
    /// Rows of the token embedding and the LM head.
    pub vocab_size: usize,
    /// Width of the residual stream.
    pub hidden_size: usize,
    /// Width of the SwiGLU MLP.
    pub intermediate_size: usize,
    /// Decoder layers.
    pub num_hidden_layers: usize,
    /// Query heads.
    pub num_attention_heads: usize,
    /// Key/value heads (grouped-query attention when fewer than the query heads).
    pub num_key_value_heads: usize,
    /// Width of one head.
    pub head_dim: usize,
    /// The RMSNorms' epsilon.
    pub rms_norm_eps: f64,
    /// Base of the rotary frequencies.
    pub rope_theta: f64,
    /// How the rotary frequencies are split over (temporal, height, width); sums to head_dim / 2.
    pub mrope_section: [usize; 3],
    /// Qwen3-VL interleaves the three axes over the frequencies; Qwen2.5-VL sections them.
    pub mrope_interleaved: bool,
    /// Bias on q/k/v (Qwen2.5-VL) — `attention_bias` puts it on o too (Qwen3 style).
    pub qkv_bias: bool,
    /// Bias on the attention's output projection.
    pub o_bias: bool,
    /// Per-head RMSNorm of q and k before RoPE (Qwen3-VL).
    pub qk_norm: bool,
    /// The LM head is the token embedding (no `lm_head.weight`).
    pub tie_word_embeddings: bool,
    /// The longest sequence the model was made for (`max_position_embeddings`): the KV
    /// cache refuses to grow past it.
    pub max_position_embeddings: Option<usize>,
}

/// The vision tower's settings.
#[derive(Debug, Clone, PartialEq)]
pub struct VisionConfig {
    /// Transformer blocks.
    pub depth: usize,
    /// Width of the tower.
    pub hidden_size: usize,
    /// Width of the blocks' MLP.
    pub intermediate_size: usize,
    /// Attention heads.
    pub num_heads: usize,
    /// Image channels (3).
    pub in_channels: usize,
    /// Side of a patch in pixels.
    pub patch_size: usize,
    /// Frames per patch (2: an image is repeated in time).
    pub temporal_patch_size: usize,
    /// Side of the block of patches merged into one language-model token (2).
    pub spatial_merge_size: usize,
    /// Width of the merged tokens: the language model's hidden size.
    pub out_hidden_size: usize,
    /// `gelu_pytorch_tanh`, `gelu` or `silu` (the blocks' MLP; mergers use exact GELU).
    pub hidden_act: String,
    /// Qwen3-VL: side² of the learned position table, bilinearly resampled per image.
    pub num_position_embeddings: usize,
    /// Qwen3-VL: blocks whose outputs feed the DeepStack mergers.
    pub deepstack_visual_indexes: Vec<usize>,
    /// Qwen2.5-VL: window side in pixels.
    pub window_size: usize,
    /// Qwen2.5-VL: blocks with full attention (the others attend within windows).
    pub fullatt_block_indexes: Vec<usize>,
    /// Base of the tower's 2-D rotary embedding (`rope_parameters.rope_theta`, 10000
    /// when left out, as transformers' default).
    pub rope_theta: f64,
}

/// A whole checkpoint's `config.json`.
#[derive(Debug, Clone, PartialEq)]
pub struct QwenVlConfig {
    /// Which of the two architectures.
    pub arch: Arch,
    /// The language model's settings.
    pub text: TextConfig,
    /// The vision tower's settings.
    pub vision: VisionConfig,
    /// The placeholder token an image's features replace.
    pub image_token_id: u32,
    /// The placeholder token of video frames (recognised, not supported).
    pub video_token_id: u32,
    /// `<|vision_start|>`, before an image's placeholders.
    pub vision_start_token_id: u32,
    /// `<|vision_end|>`, after them.
    pub vision_end_token_id: u32,
    /// The end-of-turn token generation stops at (`eos_token_id`, else `<|im_end|>`'s id if known).
    pub eos_token_id: Option<u32>,
}

/// A view of one JSON object that records which keys were read and names the file and
/// section in errors.
struct Section<'a> {
    file: &'a str,
    name: &'a str,
    map: &'a Map<String, Value>,
}

impl<'a> Section<'a> {
    fn path(&self, key: &str) -> String {
        if self.name.is_empty() {
            key.to_string()
        } else {
            format!("{}.{key}", self.name)
        }
    }
    fn get(&self, key: &str) -> Option<&'a Value> {
        self.map.get(key).filter(|v| !v.is_null())
    }
    fn usize(&self, key: &str) -> Result<usize> {
        self.opt_usize(key)?.ok_or_else(|| anyhow!("{}: missing key `{}`", self.file, self.path(key)))
    }
    fn opt_usize(&self, key: &str) -> Result<Option<usize>> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => v.as_u64().map(|n| Some(n as usize)).ok_or_else(|| {
                anyhow!("{}: `{}` must be a non-negative integer, not {v}", self.file, self.path(key))
            }),
        }
    }
    fn f64_or(&self, key: &str, default: f64) -> Result<f64> {
        match self.get(key) {
            None => Ok(default),
            Some(v) => v
                .as_f64()
                .ok_or_else(|| anyhow!("{}: `{}` must be a number, not {v}", self.file, self.path(key))),
        }
    }
    fn bool_or(&self, key: &str, default: bool) -> Result<bool> {
        match self.get(key) {
            None => Ok(default),
            Some(v) => v
                .as_bool()
                .ok_or_else(|| anyhow!("{}: `{}` must be true or false, not {v}", self.file, self.path(key))),
        }
    }
    fn str_or(&self, key: &str, default: &str) -> Result<String> {
        match self.get(key) {
            None => Ok(default.to_string()),
            Some(v) => v
                .as_str()
                .map(str::to_string)
                .ok_or_else(|| anyhow!("{}: `{}` must be a string, not {v}", self.file, self.path(key))),
        }
    }
    fn usizes(&self, key: &str) -> Result<Vec<usize>> {
        match self.get(key) {
            None => Ok(Vec::new()),
            Some(Value::Array(a)) => a
                .iter()
                .map(|v| v.as_u64().map(|n| n as usize))
                .collect::<Option<Vec<_>>>()
                .ok_or_else(|| anyhow!("{}: `{}` must be a list of integers", self.file, self.path(key))),
            Some(v) => bail!("{}: `{}` must be a list of integers, not {v}", self.file, self.path(key)),
        }
    }
    /// Every key must be listed for one of `sections` (docs/qwen-vl.md, "Config keys").
    fn check_keys(&self, sections: &[KeySection]) -> Result<()> {
        for key in self.map.keys() {
            if !known(key, sections) {
                bail!(
                    "{}: unknown config key `{}`: guirl's Qwen-VL reader does not know what it changes, so it \
                     will not guess; remove it if it is not part of the architecture, or report it",
                    self.file,
                    self.path(key)
                );
            }
        }
        self.refuse()
    }
    /// The keys that are read only to refuse what guirl cannot honour.
    fn refuse(&self) -> Result<()> {
        if self.get("quantization_config").is_some() {
            bail!(
                "{}: `{}`: a quantized checkpoint; guirl reads f32/bf16/f16 weights only, so use the \
                 unquantized checkpoint",
                self.file,
                self.path("quantization_config")
            );
        }
        if self.bool_or("use_sliding_window", false)? {
            bail!(
                "{}: `{}` is true: sliding-window attention is not supported (guirl attends to the whole \
                 sequence); set it to false if the checkpoint was trained without it",
                self.file,
                self.path("use_sliding_window")
            );
        }
        if let Some(types) = self.get("layer_types") {
            let full = types.as_array().is_some_and(|a| a.iter().all(|t| t == "full_attention"));
            if !full {
                bail!(
                    "{}: `{}` = {types}: only \"full_attention\" layers are supported",
                    self.file,
                    self.path("layer_types")
                );
            }
        }
        let dropout = self.f64_or("attention_dropout", 0.0)?;
        if dropout != 0.0 {
            bail!(
                "{}: `{}` = {dropout}: attention dropout is not supported (guirl's training pass has none, \
                 transformers' would drop attention weights); set it to 0.0",
                self.file,
                self.path("attention_dropout")
            );
        }
        Ok(())
    }
}

impl QwenVlConfig {
    /// Read `config.json` from a checkpoint folder.
    pub fn load(dir: &Path) -> Result<Self> {
        let path = dir.join("config.json");
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("{}: cannot read the checkpoint's config.json", path.display()))?;
        let json: Value =
            serde_json::from_str(&text).with_context(|| format!("{}: not valid JSON", path.display()))?;
        Self::from_json(&json, &path.display().to_string())
    }

    /// Parse a `config.json` value; `file` names it in errors.
    pub fn from_json(json: &Value, file: &str) -> Result<Self> {
        let top = json.as_object().ok_or_else(|| anyhow!("{file}: config.json must be a JSON object"))?;
        let top = Section { file, name: "", map: top };
        let model_type = top.str_or("model_type", "")?;
        let arch = match model_type.as_str() {
            "qwen3_vl" => Arch::Qwen3Vl,
            "qwen2_5_vl" => Arch::Qwen25Vl,
            other => bail!(
                "{file}: model_type `{other}` is not a supported backbone; guirl reads `qwen3_vl` (Qwen3-VL) and \
                 `qwen2_5_vl` (Qwen2.5-VL, UI-TARS-1.5)"
            ),
        };
        // Qwen2.5-VL's hub files keep the text keys at the top; nested files use text_config.
        let nested = top.get("text_config").and_then(Value::as_object);
        let text_sec = match nested {
            Some(map) => Section { file, name: "text_config", map },
            None if arch == Arch::Qwen25Vl => Section { file, name: "", map: top.map },
            None => bail!(
                "{file}: missing key `text_config` (Qwen3-VL nests the language model's settings there)"
            ),
        };
        if nested.is_some() {
            top.check_keys(&[KeySection::Top])?;
            text_sec.check_keys(&[KeySection::Text])?;
        } else {
            top.check_keys(&[KeySection::Top, KeySection::Text])?;
        }
        let vision_map = top
            .get("vision_config")
            .and_then(Value::as_object)
            .ok_or_else(|| anyhow!("{file}: missing key `vision_config`"))?;
        let vis = Section { file, name: "vision_config", map: vision_map };
        vis.check_keys(&[KeySection::Vision])?;

        let text = read_text(&text_sec, &top, arch)?;
        let vision = read_vision(&vis, arch)?;
        if vision.out_hidden_size != text.hidden_size {
            bail!(
                "{file}: vision_config.out_hidden_size ({}) must equal the language model's hidden_size ({})",
                vision.out_hidden_size,
                text.hidden_size
            );
        }
        let id = |key: &str, default: u32| -> Result<u32> {
            Ok(top.opt_usize(key)?.map(|n| n as u32).unwrap_or(default))
        };
        let eos = match text_sec.get("eos_token_id").or_else(|| top.get("eos_token_id")) {
            Some(Value::Number(n)) => n.as_u64().map(|n| n as u32),
            Some(Value::Array(a)) => a.first().and_then(Value::as_u64).map(|n| n as u32),
            _ => None,
        };
        Ok(QwenVlConfig {
            arch,
            text,
            vision,
            image_token_id: id("image_token_id", 151655)?,
            video_token_id: id("video_token_id", 151656)?,
            vision_start_token_id: id("vision_start_token_id", 151652)?,
            vision_end_token_id: id("vision_end_token_id", 151653)?,
            eos_token_id: eos,
        })
    }

    /// Pixels per side of one merged vision token (patch × merge): the resize factor.
    pub fn image_factor(&self) -> usize {
        self.vision.patch_size * self.vision.spatial_merge_size
    }
}

fn read_text(s: &Section, top: &Section, arch: Arch) -> Result<TextConfig> {
    let hidden = s.usize("hidden_size")?;
    let heads = s.usize("num_attention_heads")?;
    let head_dim = s.opt_usize("head_dim")?.unwrap_or(hidden / heads.max(1));
    // RoPE: transformers 5's `rope_parameters`, or the older `rope_scaling` + `rope_theta`.
    let rope = s.get("rope_parameters").or_else(|| s.get("rope_scaling"));
    let rope_name = if s.get("rope_parameters").is_some() { "rope_parameters" } else { "rope_scaling" };
    let rope = rope.and_then(Value::as_object).ok_or_else(|| {
        anyhow!("{}: missing key `{}` (the M-RoPE section sizes)", s.file, s.path("rope_parameters"))
    })?;
    let rs = Section { file: s.file, name: rope_name, map: rope };
    rs.check_keys(&[KeySection::TextRope])?;
    let kind = rs.str_or("rope_type", &rs.str_or("type", "default")?)?;
    if kind != "default" && kind != "mrope" {
        bail!("{}: `{}.rope_type` = `{kind}` is not supported (only default M-RoPE)", s.file, rope_name);
    }
    let section = rs.usizes("mrope_section")?;
    let mrope_section: [usize; 3] = section.as_slice().try_into().map_err(|_| {
        anyhow!("{}: `{rope_name}.mrope_section` must list three sizes (temporal, height, width)", s.file)
    })?;
    if mrope_section.iter().sum::<usize>() != head_dim / 2 {
        bail!(
            "{}: `{rope_name}.mrope_section` {:?} must sum to head_dim / 2 = {}",
            s.file,
            mrope_section,
            head_dim / 2
        );
    }
    let rope_theta = match (rs.get("rope_theta"), s.get("rope_theta"), arch) {
        (None, None, Arch::Qwen3Vl) => bail!(
            "{}: missing key `{}.rope_theta`: transformers 4 takes 5000000 for a Qwen3-VL without it and \
             transformers 5 takes 500000, so guirl will not guess; write the checkpoint's value",
            s.file,
            s.path(rope_name)
        ),
        // Qwen2.5-VL: 1000000 in every transformers version
        _ => rs.f64_or("rope_theta", s.f64_or("rope_theta", 1e6)?)?,
    };
    let act = s.str_or("hidden_act", "silu")?;
    if act != "silu" {
        bail!(
            "{}: `{}` = `{act}` is not supported (Qwen language models use silu)",
            s.file,
            s.path("hidden_act")
        );
    }
    let attention_bias = s.bool_or("attention_bias", false)?;
    let tie = s.get("tie_word_embeddings").or_else(|| top.get("tie_word_embeddings"));
    Ok(TextConfig {
        vocab_size: s.usize("vocab_size")?,
        hidden_size: hidden,
        intermediate_size: s.usize("intermediate_size")?,
        num_hidden_layers: s.usize("num_hidden_layers")?,
        num_attention_heads: heads,
        num_key_value_heads: s.opt_usize("num_key_value_heads")?.unwrap_or(heads),
        head_dim,
        rms_norm_eps: s.f64_or("rms_norm_eps", 1e-6)?,
        rope_theta,
        mrope_section,
        mrope_interleaved: rs.bool_or("mrope_interleaved", arch == Arch::Qwen3Vl)?,
        qkv_bias: arch == Arch::Qwen25Vl || attention_bias,
        o_bias: attention_bias,
        qk_norm: arch == Arch::Qwen3Vl,
        tie_word_embeddings: tie.and_then(Value::as_bool).unwrap_or(false),
        max_position_embeddings: s.opt_usize("max_position_embeddings")?,
    })
}

/// The vision tower's rotary base: `rope_parameters` (transformers 5) may set it; any
/// other rope kind than the default one is refused, never ignored.
fn vision_rope_theta(s: &Section) -> Result<f64> {
    const DEFAULT: f64 = 10_000.0;
    let Some(rope) = s.get("rope_parameters") else { return Ok(DEFAULT) };
    let map = rope.as_object().ok_or_else(|| {
        anyhow!("{}: `{}` must be an object, not {rope}", s.file, s.path("rope_parameters"))
    })?;
    let name = format!("{}.rope_parameters", s.name);
    let rs = Section { file: s.file, name: &name, map };
    rs.check_keys(&[KeySection::VisionRope])?;
    let kind = rs.str_or("rope_type", &rs.str_or("type", "axial")?)?;
    // transformers 5 writes "axial" (the tower's 2-D rotary embedding over rows and columns)
    if kind != "axial" && kind != "default" {
        bail!("{}: `{name}.rope_type` = `{kind}` is not supported (only the axial rotary embedding)", s.file);
    }
    let theta = rs.f64_or("rope_theta", DEFAULT)?;
    if !(theta.is_finite() && theta > 1.0) {
        bail!("{}: `{name}.rope_theta` = {theta} must be a number above 1", s.file);
    }
    Ok(theta)
}

fn read_vision(s: &Section, arch: Arch) -> Result<VisionConfig> {
    let hidden = s.opt_usize("hidden_size")?.or(s.opt_usize("embed_dim")?);
    let hidden = hidden.ok_or_else(|| anyhow!("{}: missing key `vision_config.hidden_size`", s.file))?;
    let patch = s.opt_usize("patch_size")?.or(s.opt_usize("spatial_patch_size")?);
    let default_act = if arch == Arch::Qwen3Vl { "gelu_pytorch_tanh" } else { "silu" };
    let act = s.str_or("hidden_act", default_act)?;
    if !["gelu_pytorch_tanh", "gelu", "silu", "quick_gelu"].contains(&act.as_str()) {
        bail!("{}: `vision_config.hidden_act` = `{act}` is not supported", s.file);
    }
    let v = VisionConfig {
        depth: s.usize("depth")?,
        hidden_size: hidden,
        intermediate_size: s.usize("intermediate_size")?,
        num_heads: s.usize("num_heads")?,
        in_channels: s.opt_usize("in_channels")?.or(s.opt_usize("in_chans")?).unwrap_or(3),
        patch_size: patch.unwrap_or(if arch == Arch::Qwen3Vl { 16 } else { 14 }),
        temporal_patch_size: s.opt_usize("temporal_patch_size")?.unwrap_or(2),
        spatial_merge_size: s.opt_usize("spatial_merge_size")?.unwrap_or(2),
        out_hidden_size: s.usize("out_hidden_size")?,
        hidden_act: act,
        num_position_embeddings: s.opt_usize("num_position_embeddings")?.unwrap_or(0),
        deepstack_visual_indexes: s.usizes("deepstack_visual_indexes")?,
        window_size: s.opt_usize("window_size")?.unwrap_or(0),
        fullatt_block_indexes: s.usizes("fullatt_block_indexes")?,
        rope_theta: vision_rope_theta(s)?,
    };
    match arch {
        Arch::Qwen3Vl => {
            let side = (v.num_position_embeddings as f64).sqrt() as usize;
            if side == 0 || side * side != v.num_position_embeddings {
                bail!(
                    "{}: `vision_config.num_position_embeddings` must be a square (it is a side × side grid)",
                    s.file
                );
            }
        }
        Arch::Qwen25Vl => {
            let unit = v.patch_size * v.spatial_merge_size;
            if v.window_size == 0 || !v.window_size.is_multiple_of(unit) {
                bail!(
                    "{}: `vision_config.window_size` must be a positive multiple of patch × merge ({unit})",
                    s.file
                );
            }
        }
    }
    if !v.hidden_size.is_multiple_of(v.num_heads) {
        bail!("{}: `vision_config.hidden_size` must be a multiple of `num_heads`", s.file);
    }
    Ok(v)
}
