//! Scripted oracles: for a task they know, read the current `ScreenState` (instruction,
//! url, elements) and return the next right action. Stateless, so any step of any
//! episode can be handed to them; they act only through `GuiAction`.

pub mod builtin;
pub mod miniwob;
pub mod table;

use super::{Decision, Policy};
use crate::env::{GuiAction, ScreenState};
use table::{Oracle, Table};

/// The oracle table of a suite (`builtin`, `miniwob`); `None` for a suite without oracles.
pub fn suite_table(suite: &str) -> Option<Table> {
    match suite {
        "miniwob" => Some(miniwob::ORACLES),
        "builtin" => Some(builtin::ORACLES),
        _ => None,
    }
}

/// The oracle of a task id (`miniwob/click-test`), if one exists.
pub fn oracle_for(task_id: &str) -> Option<Oracle> {
    let (suite, name) = task_id.split_once('/')?;
    suite_table(suite)?.iter().find(|(n, _)| *n == name).map(|(_, oracle)| *oracle)
}

/// The next oracle action for this state, or `None` if no oracle knows the task.
pub fn oracle_action(state: &ScreenState) -> Option<GuiAction> {
    oracle_for(&state.task_id).and_then(|oracle| oracle(state))
}

/// Whether a scripted oracle exists for this task id.
pub fn has_oracle(task_id: &str) -> bool {
    oracle_for(task_id).is_some()
}

/// The names (without the suite's prefix) of a suite's tasks with an oracle, in the
/// table's order; none for a suite without oracles.
pub fn tasks(suite: &str) -> Vec<&'static str> {
    suite_table(suite).unwrap_or_default().iter().map(|(name, _)| *name).collect()
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
