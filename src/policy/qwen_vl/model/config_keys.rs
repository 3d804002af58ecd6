//! Every `config.json` key the Qwen-VL reader accepts, and what it does with each: the
//! audit of transformers 5's Qwen3VL* and Qwen2_5_VL* config classes (and the older hub
//! files' names) that docs/qwen-vl.md's "Config keys" table shows, with the reason for
//! each key (a test checks that the table and this list agree). A key in no row is an
//! error naming it.

/// What the reader does with a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyUse {
    /// Read: it changes the model, its inputs or the run.
    Used,
    /// Read only to refuse what guirl cannot honour (always, or a value other than the
    /// one that changes nothing), with a message naming the key.
    Refused,
    /// Accepted and not read: it does not change guirl's forward pass (docs give why).
    Ignored,
}

/// Where in `config.json` a key sits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeySection {
    /// Any of the sections below (transformers' `PreTrainedConfig` fields).
    Any,
    /// The top level.
    Top,
    /// `text_config` (or the top level of a Qwen2.5-VL hub file, which keeps them there).
    Text,
    /// `vision_config`.
    Vision,
    /// The language model's `rope_parameters` (or the older `rope_scaling`).
    TextRope,
    /// `vision_config.rope_parameters`.
    VisionRope,
}

impl KeySection {
    /// The name docs/qwen-vl.md's table gives the section.
    pub fn name(self) -> &'static str {
        match self {
            KeySection::Any => "any",
            KeySection::Top => "top",
            KeySection::Text => "text",
            KeySection::Vision => "vision",
            KeySection::TextRope => "text rope",
            KeySection::VisionRope => "vision rope",
        }
    }
}

use KeySection::{Any, Text, TextRope, Top, Vision, VisionRope};
use KeyUse::{Ignored, Refused, Used};

/// Every accepted key: its section, its name, what the reader does with it.
pub const CONFIG_KEYS: &[(KeySection, &str, KeyUse)] = &[
    // transformers' PreTrainedConfig fields and other bookkeeping, in any section
    (Any, "architectures", Ignored),
    (Any, "model_type", Used),
    (Any, "transformers_version", Ignored),
    (Any, "torch_dtype", Ignored),
    (Any, "dtype", Ignored),
    (Any, "initializer_range", Ignored),
    (Any, "use_cache", Ignored),
    (Any, "output_attentions", Ignored),
    (Any, "output_hidden_states", Ignored),
    (Any, "return_dict", Ignored),
    (Any, "_name_or_path", Ignored),
    (Any, "name_or_path", Ignored),
    (Any, "_attn_implementation_autoset", Ignored),
    (Any, "base_config_key", Ignored),
    (Any, "id2label", Ignored),
    (Any, "label2id", Ignored),
    (Any, "problem_type", Ignored),
    (Any, "tokenizer_class", Ignored),
    (Any, "chunk_size_feed_forward", Ignored),
    (Any, "is_encoder_decoder", Ignored),
    (Any, "bos_token_id", Ignored),
    (Any, "pad_token_id", Ignored),
    (Any, "eos_token_id", Used),
    (Any, "quantization_config", Refused),
    // the top level
    (Top, "text_config", Used),
    (Top, "vision_config", Used),
    (Top, "image_token_id", Used),
    (Top, "video_token_id", Used),
    (Top, "vision_start_token_id", Used),
    (Top, "vision_end_token_id", Used),
    (Top, "vision_token_id", Ignored),
    (Top, "tie_word_embeddings", Used),
    // the language model
    (Text, "vocab_size", Used),
    (Text, "hidden_size", Used),
    (Text, "intermediate_size", Used),
    (Text, "num_hidden_layers", Used),
    (Text, "num_attention_heads", Used),
    (Text, "num_key_value_heads", Used),
    (Text, "head_dim", Used),
    (Text, "hidden_act", Used),
    (Text, "rms_norm_eps", Used),
    (Text, "rope_theta", Used),
    (Text, "rope_scaling", Used),
    (Text, "rope_parameters", Used),
    (Text, "attention_bias", Used),
    (Text, "tie_word_embeddings", Used),
    (Text, "max_position_embeddings", Used),
    (Text, "attention_dropout", Refused),
    (Text, "use_sliding_window", Refused),
    (Text, "layer_types", Refused),
    (Text, "sliding_window", Ignored),
    (Text, "max_window_layers", Ignored),
    (TextRope, "rope_type", Used),
    (TextRope, "type", Used),
    (TextRope, "mrope_section", Used),
    (TextRope, "mrope_interleaved", Used),
    (TextRope, "rope_theta", Used),
    // the vision tower
    (Vision, "depth", Used),
    (Vision, "hidden_size", Used),
    (Vision, "embed_dim", Used),
    (Vision, "intermediate_size", Used),
    (Vision, "num_heads", Used),
    (Vision, "in_channels", Used),
    (Vision, "in_chans", Used),
    (Vision, "patch_size", Used),
    (Vision, "spatial_patch_size", Used),
    (Vision, "temporal_patch_size", Used),
    (Vision, "spatial_merge_size", Used),
    (Vision, "out_hidden_size", Used),
    (Vision, "hidden_act", Used),
    (Vision, "num_position_embeddings", Used),
    (Vision, "deepstack_visual_indexes", Used),
    (Vision, "window_size", Used),
    (Vision, "fullatt_block_indexes", Used),
    (Vision, "rope_parameters", Used),
    (Vision, "tokens_per_second", Ignored),
    (VisionRope, "rope_type", Used),
    (VisionRope, "type", Used),
    (VisionRope, "rope_theta", Used),
];

/// Whether `key` may appear in a section that takes `sections` (the [`KeySection::Any`]
/// keys always may, except in a `rope_parameters` object).
pub fn known(key: &str, sections: &[KeySection]) -> bool {
    let rope = sections.iter().all(|s| matches!(s, TextRope | VisionRope));
    CONFIG_KEYS.iter().any(|&(s, k, _)| k == key && (sections.contains(&s) || (s == Any && !rope)))
}
