//! What reaches a policy: the observation setting a learning figure must state.
//!
//! - `pixels`: the screenshot, the instruction and the policy's own action history.
//! - `pixels+dom`: those, plus what the page's DOM says about its elements
//!   (`ScreenState.elements`: their text, names, values, roles, states and boxes).

use std::fmt;

/// The observation setting of a policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Observation {
    /// `pixels`: nothing from the DOM (a pretrained backbone reads nothing else).
    Pixels,
    /// `pixels+dom`: the page's elements too.
    PixelsDom,
}

impl fmt::Display for Observation {
    /// `pixels` or `pixels+dom`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Observation::Pixels => "pixels",
            Observation::PixelsDom => "pixels+dom",
        })
    }
}

/// The observation setting of the policy saved in a checkpoint folder: a Qwen-VL
/// adapter reads pixels only; the small policy's `config.json` says what it reads.
pub fn of_checkpoint(dir: &std::path::Path) -> anyhow::Result<Observation> {
    if super::qwen_vl::QwenVlPolicy::is_checkpoint(dir) {
        return Ok(Observation::Pixels);
    }
    Ok(super::vlm::VlmConfig::from_file(&dir.join(super::vlm::CONFIG_FILE))?.observation())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::vlm::VlmConfig;

    #[test]
    fn the_dom_is_read_exactly_with_the_elements_input() {
        let mut c = VlmConfig::tiny();
        assert_eq!(c.observation().to_string(), "pixels");
        // Instruction words, the history of the policy's own actions, the previous frame
        // and copying from the instruction are all pixels (nothing from the DOM).
        (c.word_buckets, c.inputs.history, c.inputs.previous_frame) = (64, Some(2), true);
        c.actions.kinds.push("type".into());
        c.copy = true;
        assert_eq!(c.observation(), Observation::Pixels);
        c.inputs.elements = Some(8);
        assert_eq!(c.observation().to_string(), "pixels+dom");
    }

    #[test]
    fn a_checkpoint_says_what_its_policy_reads() {
        let dir = tempfile::tempdir().unwrap();
        let mut c = VlmConfig::tiny();
        (c.word_buckets, c.inputs.elements) = (64, Some(16));
        std::fs::write(dir.path().join(crate::policy::vlm::CONFIG_FILE), serde_json::to_string(&c).unwrap())
            .unwrap();
        assert_eq!(of_checkpoint(dir.path()).unwrap(), Observation::PixelsDom);
        let e = of_checkpoint(&dir.path().join("nothing")).unwrap_err();
        assert!(format!("{e:#}").contains("cannot read VLM config"), "{e:#}");
    }
}
