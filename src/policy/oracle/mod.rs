//! Scripted oracles: for a task they know, read the current `ScreenState` (instruction,
//! url, elements) and return the next right action. Stateless, so any step of any
//! episode can be handed to them; they act only through `GuiAction`.

pub mod builtin;
pub mod miniwob;

use super::{Decision, Policy};
use crate::env::{GuiAction, ScreenState};

/// The next oracle action for this state, or `None` if no oracle knows the task.
pub fn oracle_action(state: &ScreenState) -> Option<GuiAction> {
    if let Some(name) = state.task_id.strip_prefix("miniwob/") {
        miniwob::next_action(name, state)
    } else if let Some(name) = state.task_id.strip_prefix("builtin/") {
        builtin::next_action(name, state)
    } else {
        None
    }
}

/// Whether a scripted oracle exists for this task id.
pub fn has_oracle(task_id: &str) -> bool {
    if let Some(name) = task_id.strip_prefix("miniwob/") {
        miniwob::tasks().contains(&name)
    } else if let Some(name) = task_id.strip_prefix("builtin/") {
        builtin::tasks().contains(&name)
    } else {
        false
    }
}

/// The error for a task no oracle knows, the same wherever an oracle is asked for;
/// `instead` says what to do (`use --policy random`, ...).
pub fn no_oracle_message(task_id: &str, instead: &str) -> String {
    format!(
        "no oracle for task {task_id}: oracles exist for the built-in tasks and some MiniWoB++ \
         tasks (`guirl tasks --oracle` lists them); {instead}"
    )
}

/// The oracle as a `Policy`. On a state it cannot read it waits (and says so in logs).
#[derive(Debug, Default)]
pub struct OraclePolicy;

impl Policy for OraclePolicy {
    fn name(&self) -> String {
        "oracle".into()
    }
    fn act(&mut self, states: &[ScreenState]) -> anyhow::Result<Vec<Decision>> {
        Ok(states
            .iter()
            .map(|s| {
                let a = oracle_action(s).unwrap_or_else(|| {
                    tracing::debug!(task = %s.task_id, step = s.step, "oracle has no action");
                    GuiAction::Wait { ms: 50 }
                });
                Decision::deterministic(a)
            })
            .collect())
    }
}
