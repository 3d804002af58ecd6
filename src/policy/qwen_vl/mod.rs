//! Pretrained vision-language backbones: Qwen3-VL and Qwen2.5-VL (the base of UI-TARS-1.5),
//! read from Hugging Face checkpoint folders and written with differentiable ops only, so
//! guirl's trainer can fine-tune them (LoRA) from task rewards.
//!
//! - [`config`]: `config.json` of either architecture, strictly read.
//! - [`weights`]: memory-mapped safetensors, sharded or not, either name layout.
//! - [`processor`]: images → patches (`smart_resize`, normalisation, merge order).
//! - [`chat`]: tokenizer and the checkpoint's Jinja chat template.
//! - [`vision`], [`text`], [`rope`], [`nn`]: the towers and their layers.
//! - [`lora`]: adapters in PEFT's layout; [`train_pass`]: what only a training pass does
//!   (LoRA dropout, gradient checkpointing per decoder layer, `checkpoint`).
//! - [`model`]: a whole checkpoint; [`hub`]: where it is (a folder or `hf:ORG/NAME`).
//! - [`policy`]: the checkpoint as a `TrainablePolicy` (prompt, answers, LoRA training);
//!   [`settings`]: its `[model]` keys.
//!
//! Tested against transformers on tiny random checkpoints of both architectures
//! (`fixtures/qwen_vl`, written by `scripts/make_qwen_fixtures.py`).

pub mod chat;
pub mod checkpoint;
pub mod config;
pub mod hub;
pub mod lora;
pub mod model;
pub mod nn;
pub mod policy;
pub mod processor;
pub mod rope;
pub mod settings;
pub mod text;
pub mod train_pass;
pub mod vision;
pub mod weights;

pub use config::{Arch, QwenVlConfig};
pub use model::{Prompt, QwenVl};
pub use policy::{QwenPolicySettings, QwenVlPolicy};
