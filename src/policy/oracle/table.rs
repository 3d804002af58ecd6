//! What a suite's oracle table holds (`builtin::ORACLES`, `miniwob::ORACLES`): a task's
//! name and its oracle.

use crate::env::{GuiAction, ScreenState};

/// A task's oracle: the next right action in a state, `None` where it cannot tell.
pub type Oracle = fn(&ScreenState) -> Option<GuiAction>;

/// A suite's oracles by task name (without the suite's prefix).
pub type Table = &'static [(&'static str, Oracle)];
