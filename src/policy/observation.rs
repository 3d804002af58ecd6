//! What reaches a policy: the observation setting a learning figure must state.
//!
//! - `pixels`: the screenshot, the instruction and the policy's own action history.
//! - `pixels+dom`: those, plus what the page's DOM says about its elements
//!   (`ScreenState.elements`: their text, names and states).
//!
//! Beside it, the *task-shaped* features in use: opt-in inputs each made for one task's
//! difficulty, so a figure reached with them says less about the method than one without.

use std::fmt;

/// The setting without the DOM.
pub const PIXELS: &str = "pixels";
/// The setting with the DOM's elements.
pub const PIXELS_DOM: &str = "pixels+dom";

/// An opt-in input made for one task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TaskShaped {
    /// Its config key (`control_state`).
    pub name: &'static str,
    /// The task it was made for (`builtin/toggle-switches`).
    pub made_for: &'static str,
}

/// The observation setting of a policy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Observation {
    /// [`PIXELS`] or [`PIXELS_DOM`].
    pub setting: &'static str,
    /// The task-shaped features in use (empty: none).
    pub task_shaped: Vec<TaskShaped>,
}

impl Observation {
    /// Pixels alone, no task-shaped feature (a pretrained backbone reads nothing else).
    pub fn pixels() -> Observation {
        Observation { setting: PIXELS, task_shaped: Vec::new() }
    }
}

impl fmt::Display for Observation {
    /// `pixels+dom; task-shaped features: control_state (made for builtin/toggle-switches)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}; task-shaped features: ", self.setting)?;
        if self.task_shaped.is_empty() {
            return write!(f, "none");
        }
        let list: Vec<String> =
            self.task_shaped.iter().map(|t| format!("{} (made for {})", t.name, t.made_for)).collect();
        write!(f, "{}", list.join(", "))
    }
}

/// The observation setting of the policy saved in a checkpoint folder: a Qwen-VL
/// adapter reads pixels only; the small policy's `config.json` says what it reads.
pub fn of_checkpoint(dir: &std::path::Path) -> anyhow::Result<Observation> {
    if super::qwen_vl::QwenVlPolicy::is_checkpoint(dir) {
        return Ok(Observation::pixels());
    }
    Ok(super::vlm::VlmConfig::from_file(&dir.join(super::vlm::CONFIG_FILE))?.observation())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::vlm::VlmConfig;

    #[test]
    fn the_label_names_the_dom_and_each_task_shaped_feature() {
        let mut c = VlmConfig::tiny();
        assert_eq!(c.observation().to_string(), "pixels; task-shaped features: none");
        // Instruction words, memory of the policy's own actions, the previous frame and
        // copying from the instruction are all pixels (nothing from the DOM).
        (c.word_buckets, c.memory, c.memory_actions, c.previous_frame, c.fold_case) =
            (64, 2, true, true, true);
        c.actions.kinds.push("type".into());
        c.copy = true;
        assert_eq!(c.observation(), Observation::pixels());
        c.screen_text = true;
        assert_eq!(c.observation().to_string(), "pixels+dom; task-shaped features: none");
        c.control_state = true;
        assert_eq!(
            c.observation().to_string(),
            "pixels+dom; task-shaped features: control_state (made for builtin/toggle-switches)"
        );
        (c.numbers, c.row_labels) = (true, true);
        assert_eq!(
            c.observation().to_string(),
            "pixels+dom; task-shaped features: numbers (made for builtin/counter), row_labels (made for \
             builtin/login-settings), control_state (made for builtin/toggle-switches)"
        );
        // Each of them reads the DOM's elements on its own, whatever screen_text says.
        for set in [|c: &mut VlmConfig| c.numbers = true, |c: &mut VlmConfig| c.row_labels = true] {
            let mut c = VlmConfig::tiny();
            set(&mut c);
            assert_eq!(c.observation().setting, PIXELS_DOM);
        }
    }

    #[test]
    fn a_checkpoint_says_what_its_policy_reads() {
        let dir = tempfile::tempdir().unwrap();
        let mut c = VlmConfig::tiny();
        (c.word_buckets, c.screen_text, c.row_labels) = (64, true, true);
        std::fs::write(dir.path().join(crate::policy::vlm::CONFIG_FILE), serde_json::to_string(&c).unwrap())
            .unwrap();
        let o = of_checkpoint(dir.path()).unwrap();
        assert_eq!(
            o.to_string(),
            "pixels+dom; task-shaped features: row_labels (made for builtin/login-settings)"
        );
        let e = of_checkpoint(&dir.path().join("nothing")).unwrap_err();
        assert!(format!("{e:#}").contains("cannot read VLM config"), "{e:#}");
    }
}
