//! Loading a trained policy from a checkpoint folder, whichever family wrote it, and what it
//! observes. Kept out of the module root so the root (the traits every policy implements)
//! depends on no policy.

use super::observation::Observation;
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

/// The observation setting of the policy saved in a checkpoint folder: a Qwen-VL
/// adapter reads pixels only; the small policy's `config.json` says what it reads.
pub fn observation_of_checkpoint(dir: &std::path::Path) -> anyhow::Result<Observation> {
    if qwen_vl::QwenVlPolicy::is_checkpoint(dir) {
        return Ok(Observation::Pixels);
    }
    Ok(vlm::VlmConfig::from_file(&dir.join(vlm::CONFIG_FILE))?.observation())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::vlm::VlmConfig;

    #[test]
    fn a_checkpoint_says_what_its_policy_reads() {
        let dir = tempfile::tempdir().unwrap();
        let mut c = VlmConfig::tiny();
        (c.word_buckets, c.inputs.elements) = (64, Some(16));
        std::fs::write(dir.path().join(crate::policy::vlm::CONFIG_FILE), serde_json::to_string(&c).unwrap())
            .unwrap();
        assert_eq!(observation_of_checkpoint(dir.path()).unwrap(), Observation::PixelsDom);
        let e = observation_of_checkpoint(&dir.path().join("nothing")).unwrap_err();
        assert!(format!("{e:#}").contains("cannot read VLM config"), "{e:#}");
    }
}
