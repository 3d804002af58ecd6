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

impl std::str::FromStr for Observation {
    type Err = String;

    /// `pixels` or `pixels+dom`, as [`fmt::Display`] writes them.
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "pixels" => Ok(Observation::Pixels),
            "pixels+dom" => Ok(Observation::PixelsDom),
            other => Err(format!("unknown observation setting {other:?}: pixels or pixels+dom")),
        }
    }
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
    fn a_setting_reads_back_from_its_name() {
        for o in [Observation::Pixels, Observation::PixelsDom] {
            assert_eq!(o.to_string().parse::<Observation>(), Ok(o));
        }
        assert!("dom".parse::<Observation>().unwrap_err().contains("pixels or pixels+dom"));
    }
}
