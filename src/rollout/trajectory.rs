//! `Trajectory`: one recorded episode, as kept in memory and written to disk.

use crate::env::{Element, EpisodeRules, EpisodeStatus, Frame, Pointer, ScreenState, StepTimings};
use std::sync::Arc;

use image::RgbImage;
use serde::{Deserialize, Serialize};

/// Version of the on-disk trajectory format this build writes and reads (and every
/// earlier one). 2 (2026-12-07): a MiniWoB++ episode's final frame shows the page as the
/// episode left it; in 1 it showed the START cover MiniWoB++ puts up for the next episode,
/// so a replay does not compare a version-1 MiniWoB++ final frame
/// ([`Trajectory::final_frame_is_the_page`]). 3 (2026-12-07): pages are told they have a
/// mouse, so headless frames draw hover states ([`Pointer::Mouse`]); a replay of an
/// earlier set runs its browser as it was ([`Trajectory::pointer`]).
pub const FORMAT_VERSION: u32 = 3;

/// One step of a trajectory: the observation it acted on, and what happened.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrajStep {
    /// The action, in its text form.
    pub action: String,
    /// Reward received for this step.
    pub reward: f64,
    /// Episode status after this step.
    pub status: EpisodeStatus,
    /// Per-phase timings of the step.
    pub timings: StepTimings,
    /// File name (in `frames/`) of the screenshot the policy saw before acting.
    #[serde(default)]
    pub frame: Option<String>,
    /// Why the action could not be executed, if it could not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub action_error: Option<String>,
    /// Per-token log-probs the policy had when it chose this action (trainable policies).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub token_logprobs: Vec<f32>,
    /// The token ids the policy sampled (trainable policies): the trainer scores exactly
    /// these, never a re-encoding of the action text.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tokens: Vec<u32>,
    /// The visible interactive elements of the observation the policy acted on (a policy
    /// with the `elements` input reads them; trajectories written before them have none).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub elements: Vec<Element>,
    /// Milliseconds from the observation to the policy's decision (batching wait and,
    /// for API policies, the HTTP round trip included); 0 in older files.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub policy_ms: f64,
    /// The model's whole answer (API policies), e.g. its reasoning around the action.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answer: Option<String>,
    /// Replayed from another rollout to reach a branch point (a rollout tree, see
    /// [`super::prefix`]): not sampled in this episode, so never trained on here.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub prefix: bool,
}

fn is_zero(x: &f64) -> bool {
    *x == 0.0
}

impl TrajStep {
    /// A step known by its action text, reward and status only (hand-made demonstrations,
    /// tests): no timings, frame, log-probs or elements.
    pub fn new(action: impl Into<String>, reward: f64, status: EpisodeStatus) -> TrajStep {
        TrajStep {
            action: action.into(),
            reward,
            status,
            timings: StepTimings::default(),
            frame: None,
            action_error: None,
            token_logprobs: Vec::new(),
            tokens: Vec::new(),
            elements: Vec::new(),
            policy_ms: 0.0,
            answer: None,
            prefix: false,
        }
    }
}

/// How an episode ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Outcome {
    /// Sum of rewards.
    pub reward: f64,
    /// Final status (`success`, `fail`, `truncated`, `env_error`, `invalid_action`,
    /// `policy_error`, `judge_error`).
    pub status: EpisodeStatus,
    /// Steps taken.
    pub steps: u32,
    /// The browser error, for `env_error`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// One episode: task, seed, instruction, frame, steps and outcome.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Trajectory {
    /// Format version ([`FORMAT_VERSION`]).
    pub version: u32,
    /// Task id.
    pub task_id: String,
    /// SHA-256 (16 hex digits) of the spec file that defined the task, for a website spec
    /// ([`crate::tasks::Task::source_digest`]): a replay says when the file changed since.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_digest: Option<String>,
    /// Seed of the episode.
    pub seed: u64,
    /// Instruction shown to the policy.
    pub instruction: String,
    /// Coordinate frame of the screenshots (at reset).
    pub frame: Frame,
    /// Step limit the episode ran under (replays use the same).
    #[serde(default)]
    pub max_steps: Option<u32>,
    /// The rules besides the step limit it ran under (replays use the same); not written
    /// when they are the defaults.
    #[serde(default, skip_serializing_if = "EpisodeRules::is_default")]
    pub rules: EpisodeRules,
    /// The policy that acted.
    #[serde(default)]
    pub policy: String,
    /// GRPO group this rollout belongs to (rollouts of the same task and seed), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<u64>,
    /// The steps.
    pub steps: Vec<TrajStep>,
    /// File name of the screenshot after the last step.
    #[serde(default)]
    pub final_frame: Option<String>,
    /// How it ended.
    pub outcome: Outcome,
    /// The judge's verdict, for a task scored by a judge (`reward = "judge:…"`); older
    /// files and other tasks have none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub judge: Option<JudgeRecord>,
}

/// What a judge said of an episode, as kept in its trajectory.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JudgeRecord {
    /// The judge, `MODEL@BASE_URL`.
    pub judge: String,
    /// Whether the judge's votes reached the threshold (false when it gave no verdict).
    pub success: bool,
    /// Votes saying SUCCESS.
    pub success_votes: u32,
    /// Votes asked.
    pub votes: u32,
    /// The fraction of SUCCESS votes at which the episode counts as a success.
    pub threshold: f64,
    /// The judge decided the episode's reward and status (the task has no check of its
    /// own); otherwise the check decided and this is a second opinion.
    pub decided: bool,
    /// Each vote's answer text (the reasoning and the verdict line).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reasoning: Vec<String>,
    /// The verdict came from the cache, not from the model.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub cached: bool,
    /// Why there is no verdict (the judge was down, timed out, or answered no verdict).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl Trajectory {
    /// Whether the final frame shows the page the episode left: not in a MiniWoB++
    /// episode recorded before format version 2 (it showed the START cover).
    pub fn final_frame_is_the_page(&self) -> bool {
        self.version >= 2 || !self.task_id.starts_with("miniwob/")
    }

    /// The pointing device its pages were told they had: before format version 3, none
    /// headless (Chromium's own), so a button under the pointer was drawn without its
    /// hover state.
    pub fn pointer(&self) -> Pointer {
        if self.version >= 3 {
            Pointer::Mouse
        } else {
            Pointer::Unset
        }
    }

    /// An episode of `task_id` on `seed` in the current format, with the given steps and
    /// outcome and nothing else known (no instruction, frame, policy or group).
    pub fn new(task_id: impl Into<String>, seed: u64, steps: Vec<TrajStep>, outcome: Outcome) -> Trajectory {
        Trajectory {
            version: FORMAT_VERSION,
            task_id: task_id.into(),
            task_digest: None,
            seed,
            instruction: String::new(),
            frame: Frame::default(),
            max_steps: None,
            rules: EpisodeRules::default(),
            policy: String::new(),
            group: None,
            steps,
            final_frame: None,
            outcome,
            judge: None,
        }
    }

    /// Steps replayed from another rollout before this one's own began (0 unless the
    /// episode was branched from a mid-episode state).
    pub fn branch_point(&self) -> usize {
        self.steps.iter().take_while(|s| s.prefix).count()
    }

    /// The actions before step `i`, as the env's `ScreenState.history` had them (text that
    /// does not parse was no action and is left out).
    pub fn history_before(&self, i: usize) -> Vec<String> {
        let steps = &self.steps[..i.min(self.steps.len())];
        steps
            .iter()
            .filter_map(|s| crate::env::GuiAction::parse(&s.action).ok())
            .map(|a| a.to_string())
            .collect()
    }

    /// The observation step `i` acted on, rebuilt from its screenshot and (for policies that
    /// read it) the one before: what a policy reads (task, instruction, frame, elements,
    /// screenshots; the URL is not kept).
    pub fn state_at(
        &self,
        i: usize,
        screenshot: Arc<RgbImage>,
        previous: Option<Arc<RgbImage>>,
    ) -> ScreenState {
        ScreenState {
            task_id: self.task_id.clone(),
            instruction: self.instruction.clone(),
            url: String::new(),
            step: i as u32,
            frame: self.frame,
            elements: self.steps.get(i).map(|s| s.elements.clone()).unwrap_or_default(),
            screenshot,
            history: self.history_before(i),
            previous_screenshot: previous.filter(|_| i > 0),
        }
    }
}

/// A trajectory with its screenshots still in memory (before they are written as frames).
#[derive(Debug, Clone)]
pub struct Recorded {
    /// The trajectory (frame names filled in when stored).
    pub trajectory: Trajectory,
    /// Screenshot before each step, then the final one (`steps.len() + 1` images), if kept
    /// (shared with the observations they came from: keeping them copies no pixels).
    pub frames: Vec<Arc<RgbImage>>,
}

impl Recorded {
    /// The observation step `i` acted on, from the frames in memory; with `previous`, the
    /// frame before it too (as the env gave it). None when frame `i` was not kept.
    pub fn state_at(&self, i: usize, previous: bool) -> Option<ScreenState> {
        let shot = self.frames.get(i)?.clone();
        let before = previous.then(|| i.checked_sub(1).and_then(|j| self.frames.get(j)).cloned()).flatten();
        Some(self.trajectory.state_at(i, shot, before))
    }
}
