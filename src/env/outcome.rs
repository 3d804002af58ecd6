//! What `GuiEnv::reset` and `GuiEnv::step` return: the episode's status, the step's
//! timings and info, the gymnasium 5-tuple, and the reset's info.

use super::ScreenState;
use serde::{Deserialize, Serialize};

/// Where an episode stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EpisodeStatus {
    /// Still going.
    Running,
    /// The task says it is solved.
    Success,
    /// The task says it failed (or the agent gave up with `done()`).
    Fail,
    /// The step limit was reached.
    Truncated,
    /// The browser or page failed; not the agent's fault.
    EnvError,
    /// The agent's action could not be executed (strict mode only ends episodes with it).
    InvalidAction,
    /// The policy could not produce an action (an API endpoint down, timing out or
    /// answering with an error): not the agent's failure, and not the browser's.
    PolicyError,
    /// The judge that scores the episode (`reward = "judge:…"`) could not give a verdict
    /// (down, timing out, or answering with no verdict line): not the agent's failure.
    JudgeError,
}

impl EpisodeStatus {
    /// The status as written in files and reports.
    pub fn as_str(self) -> &'static str {
        match self {
            EpisodeStatus::Running => "running",
            EpisodeStatus::Success => "success",
            EpisodeStatus::Fail => "fail",
            EpisodeStatus::Truncated => "truncated",
            EpisodeStatus::EnvError => "env_error",
            EpisodeStatus::InvalidAction => "invalid_action",
            EpisodeStatus::PolicyError => "policy_error",
            EpisodeStatus::JudgeError => "judge_error",
        }
    }

    /// Whether the episode ended through no fault of the agent (a browser, a policy
    /// endpoint or a judge failed): such episodes are left out of success rates and
    /// training groups.
    pub fn is_infrastructure_failure(self) -> bool {
        matches!(self, EpisodeStatus::EnvError | EpisodeStatus::PolicyError | EpisodeStatus::JudgeError)
    }
}

impl std::fmt::Display for EpisodeStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Where the time of one step went, in milliseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct StepTimings {
    /// Executing the action through WebDriver.
    pub action_ms: f64,
    /// Waiting for the page to settle and reading its state (reward, elements).
    pub settle_ms: f64,
    /// Taking and decoding the screenshot.
    pub screenshot_ms: f64,
    /// The whole step.
    pub total_ms: f64,
}

/// What a step reports besides observation and reward.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepInfo {
    /// The episode's status after this step.
    pub status: EpisodeStatus,
    /// Reward before time decay (where the task decays rewards).
    pub raw_reward: f64,
    /// Reward after the task's time decay (equal to raw when the wall clock is off).
    pub decayed_reward: f64,
    /// The task's reason for its reward, if it gives one.
    pub reason: Option<String>,
    /// Why the action could not be executed, if it could not.
    pub action_error: Option<String>,
    /// What went wrong with the browser, if anything.
    pub env_error: Option<String>,
    /// Per-phase timings.
    pub timings: StepTimings,
}

impl StepInfo {
    /// The step's status as a person or client is shown it: `invalid_action` also for a
    /// wasted step after which the episode goes on (its status stays `running`).
    pub fn shown_status(&self) -> &'static str {
        if self.status == EpisodeStatus::Running && self.action_error.is_some() {
            "invalid_action"
        } else {
            self.status.as_str()
        }
    }
}

/// The gymnasium 5-tuple.
#[derive(Debug, Clone)]
pub struct StepOutcome {
    /// The observation after the step.
    pub obs: ScreenState,
    /// Reward for this step (non-zero at the end of an episode for these tasks).
    pub reward: f64,
    /// The episode reached a terminal state (success, fail, strict invalid action).
    pub terminated: bool,
    /// The episode was cut short (step limit, env error).
    pub truncated: bool,
    /// Status, rewards, errors and timings.
    pub info: StepInfo,
}

/// What `reset` reports besides the observation.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ResetInfo {
    /// The task id.
    pub task_id: String,
    /// The seed of this episode.
    pub seed: u64,
    /// Step limit in force.
    pub max_steps: u32,
    /// Whether a (new) browser had to be started for this reset.
    pub browser_started: bool,
    /// Why the browser that was there was replaced, when it failed at this reset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replaced_after: Option<String>,
    /// Time of the whole reset in ms (screenshot included).
    pub reset_ms: f64,
}
