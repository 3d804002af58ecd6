//! Policies: anything that maps screen states to actions. The environment knows nothing
//! of policies; a policy knows nothing of browsers (it sees only `ScreenState`).

pub mod api;
pub mod device;
pub mod from_checkpoint;
pub mod judge;
mod load;
pub mod observation;
pub mod oracle;
pub mod qwen_vl;
pub mod random;
pub mod reward_model;
pub mod screen_encoder;
pub mod trainable;
pub mod vlm;

pub use load::{load_checkpoint, observation_of_checkpoint};
pub use trainable::{copy_trainable, episode_stream, stream_key, Sampling, TokenScores, TrainablePolicy};

use crate::env::{GuiAction, ScreenState};

/// One action chosen by a policy, with what a trainer needs to score it later.
#[derive(Debug, Clone)]
pub struct Decision {
    /// The action to take.
    pub action: GuiAction,
    /// Log-probability of the whole action under the policy (0 for deterministic ones).
    pub logprob: f32,
    /// Per-token log-probs of the action's text form, for trainable policies.
    pub token_logprobs: Vec<f32>,
    /// The token ids those log-probs belong to (trainable policies), so the trainer scores
    /// exactly what was sampled.
    pub tokens: Vec<u32>,
    /// The model's whole answer, when the policy is a model answering in text (API
    /// policies): kept in the trajectory next to the action read from it.
    pub answer: Option<String>,
    /// Why there is no action to take, when there is none.
    pub failure: Option<PolicyFailure>,
}

/// Why a policy has no action for a state.
#[derive(Debug, Clone, PartialEq)]
pub enum PolicyFailure {
    /// The model answered, but no action could be read from the answer: the step is an
    /// `invalid_action` step (the episode goes on), with this message as its error.
    Unparsable(String),
    /// The policy could not answer (endpoint down, timeout, an error response): the
    /// episode ends as `policy_error`, which is not counted as the agent's failure.
    Error(String),
}

impl Decision {
    /// A decision from a policy that does not model probabilities.
    pub fn deterministic(action: GuiAction) -> Self {
        Decision {
            action,
            logprob: 0.0,
            token_logprobs: Vec::new(),
            tokens: Vec::new(),
            answer: None,
            failure: None,
        }
    }

    /// A decision with no action, for `failure`; `answer` is the model's text if any.
    pub fn failed(failure: PolicyFailure, answer: Option<String>) -> Self {
        Decision { answer, failure: Some(failure), ..Decision::deterministic(GuiAction::Done) }
    }
}

/// A batched policy: one decision per state, in order.
pub trait Policy: Send {
    /// A short name for logs and reports.
    fn name(&self) -> String;
    /// Choose an action for each state.
    fn act(&mut self, states: &[ScreenState]) -> anyhow::Result<Vec<Decision>>;
    /// Choose an action for each state, state `i` drawing its randomness from the stream
    /// `keys[i]` (see [`stream_key`]), so the result does not depend on how states were
    /// batched. Deterministic policies ignore the keys.
    fn act_keyed(&mut self, states: &[ScreenState], keys: &[u64]) -> anyhow::Result<Vec<Decision>> {
        let _ = keys;
        self.act(states)
    }
    /// Whether [`Policy::act_keyed`]'s decision for a state never depends on which other
    /// states share the call, to the last bit: the collector then batches waiting states
    /// even in runs that must be bit-exact whatever the timing.
    fn batch_invariant(&self) -> bool {
        false
    }
    /// What a report should record about this policy to reproduce it (an API policy adds
    /// its model id, endpoint and prompt hash).
    fn info(&self) -> serde_json::Value {
        serde_json::json!({ "name": self.name() })
    }
    /// A decoder that answers token by token and takes new states between its steps
    /// (continuous batching), for a policy whose answers are decoded that way; the
    /// collector then lets an env that becomes ready join the next step instead of waiting
    /// for the answers in flight. `live` is the most answers the caller keeps in flight at
    /// once (the collector: its env count), which the decoder may size its steps by.
    /// `None` (the default): the policy answers whole calls.
    fn step_decoder(&self, _live: usize) -> Option<Box<dyn StepDecoder>> {
        None
    }
}

/// Answers decoded a token at a time for states that join and leave between steps: every
/// live answer advances one token per [`StepDecoder::step`], whoever it belongs to.
///
/// An answer must not depend on what shares its steps, to the last bit: the same state and
/// key give the same decision whenever it was admitted and whatever else was live (what
/// [`Policy::batch_invariant`] promises for whole calls), unless the policy's settings give
/// that up (Qwen-VL's `batch_invariant = false`; its `batch_invariant()` then says so).
pub trait StepDecoder: Send {
    /// Start answering `state`, drawing from the sampling stream `key` ([`stream_key`]):
    /// its prompt runs now, or with the others admitted before the next
    /// [`StepDecoder::prefill`] or step; `id` names its decision in [`StepDecoder::step`]'s
    /// results.
    fn admit(&mut self, id: u64, state: &ScreenState, key: u64) -> anyhow::Result<()>;
    /// Run the prompts of the states admitted since the last step, where the decoder runs
    /// them together rather than in `admit` (the next `step` runs them otherwise): a caller
    /// that times prompts apart from decoding calls it after admitting.
    fn prefill(&mut self) -> anyhow::Result<()> {
        Ok(())
    }
    /// Advance every live answer one token; returns the decisions of those that finished.
    fn step(&mut self) -> anyhow::Result<Vec<(u64, Decision)>>;
    /// Answers admitted and not yet finished.
    fn live(&self) -> usize;
    /// Rows each decoding step computes: answers advance together in batches of exactly
    /// this many (more live answers run as further batches), or of at most this many where
    /// the policy's settings give up batch invariance (a batch then runs its live answers
    /// alone).
    fn rows(&self) -> usize;
}
