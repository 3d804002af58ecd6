//! Where tasks come from: MiniWoB++ pages, the built-in suite, and website specs (TOML).
//!
//! A task knows how to start an episode for a seed in a browser (giving the instruction),
//! and how to read its reward and done flag from the page after each step.

pub mod builtin;
pub mod builtin_specs;
pub mod embedded;
pub mod judge;
pub mod miniwob;
pub mod page;
mod registry;
pub mod server;
mod spec_path;
pub mod success;
mod template;
pub mod website;
pub mod website_success;

use async_trait::async_trait;
pub use judge::JudgeSpec;
pub use page::{EnvError, Page};
pub use registry::{all_task_ids, load_task};
use serde::{Deserialize, Serialize};
pub use spec_path::LocalSite;
use std::path::{Path, PathBuf};

/// What scores a task's episodes when they end, in place of (or beside) a success check
/// in the page: a website spec's `reward = "model:PATH"` or `reward = "judge:MODEL@URL"`.
/// The env does not run it (it knows no models): `rollout/scoring.rs` applies it to every
/// finished episode, for the collector, `play`, `replay` and `serve`.
#[derive(Debug, Clone, PartialEq)]
pub struct LearnedReward {
    /// The model that scores.
    pub scorer: Scorer,
    /// The score (a reward model's P(success), a judge's fraction of SUCCESS votes) at and
    /// above which the episode counts as a success.
    pub threshold: f64,
    /// The scorer decides the episode's reward and success (the task has no success check
    /// of its own); otherwise the check decides and the scorer's agreement with it is logged.
    pub decides: bool,
}

/// The two kinds of episode scorers.
#[derive(Debug, Clone, PartialEq)]
pub enum Scorer {
    /// A reward model folder written by `guirl train-reward`.
    Model(PathBuf),
    /// A vision-language model behind an OpenAI-compatible API, asked for a verdict.
    Judge(JudgeSpec),
}

impl LearnedReward {
    /// The reward model folder, if a reward model scores.
    pub fn model(&self) -> Option<&Path> {
        match &self.scorer {
            Scorer::Model(p) => Some(p),
            Scorer::Judge(_) => None,
        }
    }

    /// The judge, if a judge scores.
    pub fn judge(&self) -> Option<&JudgeSpec> {
        match &self.scorer {
            Scorer::Judge(j) => Some(j),
            Scorer::Model(_) => None,
        }
    }

    /// How many screenshots of the episode's end the scorer looks at (the final one
    /// included): a judge's `frames`, 1 for a reward model.
    pub fn frames(&self) -> usize {
        self.judge().map_or(1, |j| j.frames.max(1))
    }
}

/// Window and screenshot geometry of a task, in CSS pixels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Viewport {
    /// Browser viewport width.
    pub window_width: u32,
    /// Browser viewport height.
    pub window_height: u32,
    /// Screenshot rectangle left, in viewport pixels.
    pub crop_x: i32,
    /// Screenshot rectangle top.
    pub crop_y: i32,
    /// Screenshot width.
    pub width: u32,
    /// Screenshot height.
    pub height: u32,
}

impl Viewport {
    /// A screenshot that is the whole `w`×`h` viewport.
    pub fn full(w: u32, h: u32) -> Viewport {
        Viewport { window_width: w, window_height: h, crop_x: 0, crop_y: 0, width: w, height: h }
    }
}

/// Per-episode options the env passes to a task.
#[derive(Debug, Clone, Default)]
pub struct EpisodeOptions {
    /// Enforce the task's own wall-clock limit (MiniWoB++'s in-page timer), in ms.
    /// `None` (the default) lets episodes be bounded by steps only.
    pub wall_clock_ms: Option<u64>,
}

/// The task's state as read from the page after a step.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TaskStatus {
    /// The task considers the episode over.
    #[serde(default)]
    pub done: bool,
    /// Reward as the task reports it (time-decayed where the task decays it).
    #[serde(default)]
    pub reward: f64,
    /// Reward before any time decay.
    #[serde(default)]
    pub raw_reward: f64,
    /// The task's reason, if it gives one.
    #[serde(default)]
    pub reason: Option<String>,
    /// Explicit success flag (website checks, MiniWoB++'s rule per task); otherwise success
    /// is full credit, `raw_reward ≥ 1` (a built-in task pays 1 or −1).
    #[serde(default)]
    pub success: Option<bool>,
    /// The status expression threw.
    #[serde(default)]
    pub error: Option<String>,
    /// The reward should the page's URL not match the task's URL pattern (see
    /// [`EpisodeStart::url_pattern`]): the page's own score, else 0.
    #[serde(default, skip_serializing)]
    pub reward_if_url_fails: Option<f64>,
}

impl TaskStatus {
    /// Apply the task's URL pattern to the page's URL `url`: where it does not match, the
    /// episode is neither done nor a success.
    pub fn check_url(&mut self, pattern: Option<&regex::Regex>, url: &str) {
        if let (Some(re), Some(r)) = (pattern, self.reward_if_url_fails.take()) {
            if !re.is_match(url) {
                (self.done, self.success, self.reason) = (false, Some(false), None);
                (self.reward, self.raw_reward) = (r, r);
            }
        }
    }
}

impl TaskStatus {
    /// Whether the task counts the episode as solved.
    pub fn is_success(&self) -> bool {
        self.success.unwrap_or_else(|| success::SuccessRule::FullCredit.is_success(self.raw_reward))
    }
}

/// What a task hands the env when an episode starts.
#[derive(Debug, Clone)]
pub struct EpisodeStart {
    /// The instruction for this episode.
    pub instruction: String,
    /// A JavaScript expression that evaluates in the page to a [`TaskStatus`] object.
    pub status_js: String,
    /// A pattern the page's URL must match for success, matched here in linear time
    /// (a page's backtracking `RegExp` could take seconds on a hostile pattern).
    pub url_pattern: Option<regex::Regex>,
}

/// A source of episodes: reset for a seed, then read reward/done from the page.
#[async_trait]
pub trait Task: Send + Sync + std::fmt::Debug {
    /// The task id (`miniwob/click-test`, `builtin/login-settings`, or a spec path).
    fn id(&self) -> &str;
    /// Window and screenshot geometry.
    fn viewport(&self) -> Viewport;
    /// Default step limit; the episode is truncated after this many steps.
    fn max_steps(&self) -> u32;
    /// Start a new episode for `seed` in `page` (the env's browser).
    async fn reset(
        &self,
        page: &dyn Page,
        seed: u64,
        opts: &EpisodeOptions,
    ) -> Result<EpisodeStart, EnvError>;
    /// Whether the task pays out only when the agent says `done()` (website specs without
    /// an automatic end); others end by themselves and `done()` just gives up.
    fn rewards_on_done(&self) -> bool {
        false
    }
    /// The reward of a definite failure (a wrong answer): what an agent that gives up
    /// with `done()` trains on by default (MiniWoB++ and the built-in tasks: −1).
    fn failure_reward(&self) -> f64 {
        -1.0
    }
    /// The reward model or judge that scores this task's episodes, if any.
    fn learned_reward(&self) -> Option<&LearnedReward> {
        None
    }
    /// A digest of the file that defines the task, for one defined by the user's file (a
    /// website spec): a recording keeps it, so a replay can say the file changed since.
    fn source_digest(&self) -> Option<&str> {
        None
    }
    /// The task's start page when it is not on guirl's task server (a website spec's
    /// absolute `start_url`): its pages may reach that loopback port, and no other (see
    /// [`crate::env::local_guard`]).
    fn home_url(&self) -> Option<String> {
        None
    }
    /// Where the task's pages are on this machine (a `file://` start URL): the env checks
    /// that a sandboxed browser's user can read them, and its pages may load files from
    /// that folder alone (see [`crate::env::local_guard`]).
    fn local_site(&self) -> Option<LocalSite> {
        None
    }
}
