//! `TrainablePolicy`: everything the trainer knows of a model.
//!
//! The trainer samples actions with [`Policy::act_keyed`] (one sampling stream per
//! `(episode, step)`, so a run draws the same actions however the collector batches the
//! envs), keeps the sampled token ids and their log-probs with each step, and later scores
//! exactly those token ids with [`TrainablePolicy::score`] (differentiable). It saves and
//! loads weights through the policy, and asks it for a frozen reference for the KL term.
//!
//! Two kinds implement it: a model trained whole (the small VLM, whose reference is an
//! independent copy of its weights) and a pretrained backbone with adapters (Qwen-VL, whose
//! reference shares the frozen base weights and holds a snapshot of the adapters and of any
//! weights trained whole). The trainer names neither: it holds a `Box<dyn TrainablePolicy>`.

use super::Policy;
use crate::env::{GuiAction, ScreenState};
use anyhow::Result;
use candle_core::backprop::GradStore;
use candle_core::{Device, Tensor, Var};
use std::path::Path;

/// Per-token scores of given token sequences; all `[B, T]`, zero on padding.
#[derive(Debug, Clone)]
pub struct TokenScores {
    /// log π(token | state, earlier tokens), on temperature-scaled, grammar-masked logits.
    pub logp: Tensor,
    /// 1 for real tokens, 0 for padding.
    pub mask: Tensor,
    /// Entropy of the (scaled, masked) next-token distribution at each position.
    pub entropy: Tensor,
}

/// Sampling settings the trainer switches between rollouts (sampled, at the training
/// temperature) and evaluation (greedy).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sampling {
    /// Temperature (> 0); log-probs are taken on `logits / temperature`.
    pub temperature: f64,
    /// Take the most likely allowed token instead of sampling.
    pub greedy: bool,
    /// Base seed of the sampling streams (mixed with each state's key).
    pub seed: u64,
}

impl Default for Sampling {
    fn default() -> Self {
        Sampling { temperature: 1.0, greedy: false, seed: 0 }
    }
}

/// A policy the trainer can update. See the module docs.
pub trait TrainablePolicy: Policy {
    /// The sampling settings in force.
    fn sampling(&self) -> Sampling;
    /// Change the sampling settings (the same temperature is used by [`Self::score`]).
    fn set_sampling(&mut self, s: Sampling);

    /// The token ids this policy would write for `action` in `state` (behaviour cloning on
    /// demonstrations); an action the policy cannot write is an error saying why.
    fn encode(&self, state: &ScreenState, action: &GuiAction) -> Result<Vec<u32>>;

    /// How many tokens the model reads for `state` before it answers: the prompt, image
    /// tokens included (what `serve-policy` reports as `usage.prompt_tokens`).
    fn prompt_tokens(&self, state: &ScreenState) -> Result<usize>;

    /// Differentiable per-token log-probs and entropies of the token sequences `tokens[i]`
    /// taken in `states[i]`, at the current temperature.
    fn score(&self, states: &[ScreenState], tokens: &[Vec<u32>]) -> Result<TokenScores>;

    /// [`Self::score`] for a training pass (the pass whose loss is back-propagated): what
    /// a policy does only while training (LoRA dropout, gradient checkpointing) happens here,
    /// its randomness drawn from `pass` (from the run's seed and the update step) alone.
    /// Rollouts, evaluation and the KL reference use [`Self::score`].
    fn score_train(&self, states: &[ScreenState], tokens: &[Vec<u32>], pass: u64) -> Result<TokenScores> {
        let _ = pass;
        self.score(states, tokens)
    }

    /// The gradients of `loss` (built from [`Self::score_train`]) for the optimizer: the
    /// graph's, plus any the policy computed outside it (checkpointed layers). Trainers call
    /// this rather than `loss.backward()`.
    fn gradients(&self, loss: &Tensor) -> Result<GradStore> {
        Ok(loss.backward()?)
    }

    /// The trainable variables, with stable names (sorted), for the optimizer.
    fn trainable_vars(&self) -> Vec<(String, Var)>;

    /// Where the weights live.
    fn device(&self) -> &Device;

    /// Write what [`Self::load`] reads into `dir` (weights and architecture).
    fn save(&self, dir: &Path) -> Result<()>;

    /// Replace this policy's trainable weights with those saved in `dir` by [`Self::save`]
    /// (a resume, or a reference read back); another architecture is an error.
    fn load(&mut self, dir: &Path) -> Result<()>;

    /// A frozen reference for the KL term: the policy as it is now, unaffected by later
    /// updates (a copy of the weights, or the same base weights with a snapshot of the adapters).
    fn reference(&self) -> Result<Box<dyn TrainablePolicy>>;

    /// A copy of this policy holding every weight of its own on `device`, its trainable
    /// weights as they are now; `None` where the policy makes none (the trainer then
    /// shares weights through [`Self::reference`]). An overlapped run collects on such a
    /// copy on a second stream of its GPU ([`crate::policy::device::second_stream`]).
    fn copy_on(&self, device: &Device) -> Result<Option<Box<dyn TrainablePolicy>>> {
        let _ = device;
        Ok(None)
    }

    /// A short description for logs and `config.json` diffs (architecture, size).
    fn describe(&self) -> String {
        self.name()
    }

    /// A token id as text (for log-probs reported per token, e.g. by `serve-policy`).
    fn token_text(&self, token: u32) -> String {
        token.to_string()
    }

    /// What the model wrote with `tokens` (any prefix of an answer), for a model that
    /// answers in text (Qwen-VL): `serve-policy` answers with it, in [`Self::answer_frame`].
    /// `None` (the default): the tokens are not text, and the answer is the action.
    fn answer_text(&self, tokens: &[u32]) -> Result<Option<String>> {
        let _ = tokens;
        Ok(None)
    }

    /// Whether an answer of `tokens` ended by itself, rather than at the policy's token limit.
    fn answer_stopped(&self, tokens: &[u32]) -> bool {
        let _ = tokens;
        true
    }

    /// The coordinate frame of [`Self::answer_text`]'s clicks (screenshot pixels where the
    /// answer is the action).
    fn answer_frame(&self) -> crate::policy::api::coords::CoordMode {
        crate::policy::api::coords::CoordMode::Px
    }

    /// Whether the policy reads `ScreenState.previous_screenshot`: training then rebuilds
    /// each step's state with the frame before it (and skips that work otherwise).
    fn reads_previous_screenshot(&self) -> bool {
        false
    }
}

/// Set `to`'s trainable weights to `from`'s (the same names and shapes, wherever each
/// lives): `from`'s device is synchronised first, so work still queued there (an
/// optimizer step) has written them before another stream reads them.
pub fn copy_trainable(from: &dyn TrainablePolicy, to: &dyn TrainablePolicy) -> Result<()> {
    let (src, dst) = (from.trainable_vars(), to.trainable_vars());
    let names = |v: &[(String, Var)]| v.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>();
    anyhow::ensure!(
        names(&src) == names(&dst),
        "copying trainable weights between policies of different adapters: {} against {} tensors",
        src.len(),
        dst.len()
    );
    from.device().synchronize()?;
    for ((_, s), (_, d)) in src.iter().zip(&dst) {
        d.set(&s.as_tensor().to_device(to.device())?)?;
    }
    Ok(())
}

/// A sampling stream key for step `step` of the `job`-th episode of a collection.
pub fn stream_key(job: usize, step: u32) -> u64 {
    ((job as u64) << 20) ^ u64::from(step)
}

/// The sampling stream of the episode of `task` on `seed` (44 bits of FNV-1a over both,
/// so that [`stream_key`] keeps its steps apart): for collections whose draws must not
/// depend on the other episodes collected with it.
pub fn episode_stream(task: &str, seed: u64) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in task.as_bytes().iter().chain(&[0xff]).chain(&seed.to_le_bytes()) {
        h = (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3);
    }
    h & ((1 << 44) - 1)
}

/// The generator of one sampling stream: a policy's base `seed` mixed with a state's `key`
/// (from [`stream_key`]), so a state's draw does not depend on batching or env order.
pub fn stream_rng(seed: u64, key: u64) -> rand_chacha::ChaCha8Rng {
    use rand::SeedableRng;
    let mixed = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ key;
    rand_chacha::ChaCha8Rng::seed_from_u64(mixed.rotate_left(17).wrapping_mul(0xBF58_476D_1CE4_E5B9))
}
