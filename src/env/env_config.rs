//! How an env runs its episodes: the browser, and the rules an episode plays by.

use super::browser::BrowserConfig;
use serde::{Deserialize, Serialize};

/// A suggested page time per step for [`EpisodeRules::virtual_time_ms`] (what the page-clock
/// tests and the measured figures use).
pub const DEFAULT_VIRTUAL_TIME_MS: u32 = 100;

/// How an env runs its episodes.
#[derive(Debug, Clone, Default)]
pub struct EnvConfig {
    /// Where the browser comes from.
    pub browser: BrowserConfig,
    /// Override the task's step limit.
    pub max_steps: Option<u32>,
    /// The rules an episode plays by beyond its step limit (recorded with each trajectory).
    pub rules: EpisodeRules,
}

/// The settings beside the step limit that change what an episode does, recorded with
/// each trajectory so that a replay plays by the same rules (`--strict-actions` ends an
/// episode where the default goes on; a page clock or a wall-clock limit changes what the
/// page shows and when it gives up).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct EpisodeRules {
    /// End the episode (status `invalid_action`) on an action that cannot be executed,
    /// instead of counting it as a wasted step.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub strict_actions: bool,
    /// Enforce the task's in-page wall-clock limit (ms); off by default so a slow policy
    /// is never cut short by time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wall_clock_ms: Option<u64>,
    /// Page time (see [`super::page_clock`]): `Some(ms)` runs the page's timers,
    /// `Date.now()` and animations on a virtual clock that advances by `ms` after each
    /// action and at reset (and by `n` for `wait(n)`), never while the policy thinks, so
    /// an episode does not depend on how long the policy took. `None`: the wall clock.
    /// Needs begin-frame control (the headless shell started here); without it the first
    /// reset fails with a setup error. Default `None`: with the clock paused between
    /// budgets, a page that finishes its set-up asynchronously (IndexedDB callbacks) after
    /// the reset's budget is not done when the policy looks
    /// (`tests/integration/website_state.rs` failed with it on).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub virtual_time_ms: Option<u32>,
}

impl EpisodeRules {
    /// The defaults (what a trajectory recorded before these were kept played by).
    pub fn is_default(&self) -> bool {
        *self == EpisodeRules::default()
    }
}
