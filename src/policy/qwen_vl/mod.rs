//! Pretrained vision-language backbones: Qwen3-VL and Qwen2.5-VL (the base of UI-TARS-1.5),
//! read from Hugging Face checkpoint folders, with a backward through every layer (fused
//! kernels with hand-written backwards, `crate::nn`), so guirl's trainer can fine-tune them
//! (LoRA) from task rewards.
//!
//! - [`model`]: the checkpoint as a model: config, weights, the vision and text towers,
//!   rope and layers.
//! - [`train`]: LoRA adapters in PEFT's layout, the training pass (LoRA dropout, gradient
//!   checkpointing).
//! - [`policy`]: the checkpoint as a `TrainablePolicy` (prompt, answers decoded together,
//!   scoring for the update); [`settings`]: its `[model]` keys.
//! - [`processor`]: images → patches (`smart_resize`, normalisation, merge order);
//!   [`chat`]: tokenizer and the checkpoint's Jinja chat template; [`hub`]: where a
//!   checkpoint is (a folder or `hf:ORG/NAME`).
//!
//! Imports go one way: `policy` → `model` → `train`, and `model` → `processor`, `chat`.
//! Tested against transformers on tiny random checkpoints of both architectures
//! (`fixtures/qwen_vl`, written by `scripts/make_qwen_fixtures.py`).

pub mod chat;
pub mod hub;
pub mod model;
pub mod policy;
pub mod processor;
pub mod settings;
pub mod train;

pub use model::config::{Arch, QwenVlConfig};
pub use model::{Prompt, QwenVl};
pub use policy::{DecodeKernels, DecodeLora, DecodeWindow, QwenPolicySettings, QwenVlPolicy};
