//! What a collection measured ([`CollectStats`]), apart from the collector: the sharded
//! exchange of a data-parallel run sends it between ranks.

/// What a collection round measured.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct CollectStats {
    /// Episodes finished.
    pub episodes: usize,
    /// Env steps taken.
    pub env_steps: usize,
    /// Episodes that ended as `env_error`.
    pub env_errors: usize,
    /// Episodes that ended as `policy_error`.
    pub policy_errors: usize,
    /// Episodes that ended as `judge_error` (their task's judge gave no verdict).
    #[serde(skip_serializing_if = "is_zero")]
    pub judge_errors: usize,
    /// Wall-clock seconds.
    pub seconds: f64,
    /// Policy calls; for a policy that decodes token by token
    /// ([`crate::policy::StepDecoder`]), its decode steps.
    pub policy_calls: usize,
    /// Mean number of observations per policy call (answers per decode step).
    pub mean_batch: f64,
    /// Seconds the collector spent in the policy's calls (its forward passes and
    /// sampling): the envs wait for it meanwhile.
    pub policy_secs: f64,
    /// Of `policy_secs`, for a policy that decodes token by token: the time its prompts
    /// took to run as states joined ([`crate::policy::StepDecoder::admit`]).
    pub prefill_secs: f64,
    /// ... and the time its decode steps took ([`crate::policy::StepDecoder::step`]).
    pub decode_secs: f64,
    /// The finished episodes' steps' action time, summed over envs, seconds.
    pub env_action_secs: f64,
    /// ... their settle time (page settling, reward and element reads).
    pub env_settle_secs: f64,
    /// ... their screenshot time (capture and decode).
    pub env_screenshot_secs: f64,
    /// Episodes of tasks with both a success check and a reward model or judge where the
    /// model's verdict (score ≥ threshold) matched the check's.
    #[serde(skip_serializing_if = "is_zero")]
    pub reward_model_agree: usize,
    /// ... and where it did not.
    #[serde(skip_serializing_if = "is_zero")]
    pub reward_model_disagree: usize,
    /// Tasks whose first page did not load, with the error, when the collector goes on
    /// without them ([`crate::rollout::UnreachableTask::SkipTask`]): their jobs were not run.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub unreachable: Vec<(String, String)>,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

impl CollectStats {
    /// Episodes per second.
    pub fn episodes_per_s(&self) -> f64 {
        self.episodes as f64 / self.seconds.max(1e-9)
    }
    /// Env steps per second.
    pub fn steps_per_s(&self) -> f64 {
        self.env_steps as f64 / self.seconds.max(1e-9)
    }
    /// Seconds the policy sat waiting for envs (resets and steps): the collection's
    /// wall-clock less its time in policy calls. Large against `policy_secs`, the envs
    /// are the bottleneck; small, the policy is.
    pub fn env_wait_secs(&self) -> f64 {
        (self.seconds - self.policy_secs).max(0.0)
    }
}

impl CollectStats {
    /// Name `task` as one whose first page did not load (once, with its first error).
    pub fn note_unreachable(&mut self, task: String, error: String) {
        if !self.unreachable.iter().any(|(t, _)| *t == task) {
            self.unreachable.push((task, error));
        }
    }

    /// Add the figures of a later collection round (`seconds` add up: rounds run one
    /// after the other).
    pub fn add(&mut self, s: &CollectStats) {
        let calls = self.policy_calls + s.policy_calls;
        if calls > 0 {
            self.mean_batch = (self.mean_batch * self.policy_calls as f64
                + s.mean_batch * s.policy_calls as f64)
                / calls as f64;
        }
        self.policy_calls = calls;
        for (task, error) in &s.unreachable {
            self.note_unreachable(task.clone(), error.clone());
        }
        self.episodes += s.episodes;
        self.env_steps += s.env_steps;
        self.env_errors += s.env_errors;
        self.policy_errors += s.policy_errors;
        self.judge_errors += s.judge_errors;
        self.seconds += s.seconds;
        self.policy_secs += s.policy_secs;
        self.prefill_secs += s.prefill_secs;
        self.decode_secs += s.decode_secs;
        self.env_action_secs += s.env_action_secs;
        self.env_settle_secs += s.env_settle_secs;
        self.env_screenshot_secs += s.env_screenshot_secs;
        self.reward_model_agree += s.reward_model_agree;
        self.reward_model_disagree += s.reward_model_disagree;
    }
}
