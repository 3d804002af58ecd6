//! What only training needs: LoRA adapters in PEFT's layout ([`lora`]), the state of a
//! training pass (LoRA dropout, gradient checkpointing; [`train_pass`]) and the
//! checkpointed decoder layer ([`checkpoint`]). The model's layers hold the adapters; this
//! folder imports nothing from the model.

pub mod checkpoint;
pub mod lora;
pub mod train_pass;
