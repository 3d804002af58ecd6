//! Loading a trained policy from a checkpoint folder, whichever family wrote it. Kept out of
//! the module root so the root (the traits every policy implements) depends on no policy.

use super::{qwen_vl, vlm, TrainablePolicy};

/// Load the trainable policy saved in a checkpoint folder: a Qwen-VL adapter
/// (`qwen_policy.json`) or guirl's small policy.
pub fn load_checkpoint(
    dir: &std::path::Path,
    device: &candle_core::Device,
) -> anyhow::Result<Box<dyn TrainablePolicy>> {
    if qwen_vl::QwenVlPolicy::is_checkpoint(dir) {
        Ok(Box::new(qwen_vl::QwenVlPolicy::load_dir(dir, device)?))
    } else {
        Ok(Box::new(vlm::VlmPolicy::load(dir, device)?))
    }
}
