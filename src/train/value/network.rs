//! The critic's network: V(s) from the screenshot and the instruction.
//!
//! ```text
//! screenshot, instruction ─ the screen encoder = [img, txt, img ⊙ txt]
//! V = linear(GELU(linear([img, txt, img ⊙ txt])))
//! ```
//! The encoder ([`crate::policy::screen_encoder`], shared with the reward model) sees the
//! screenshot at the policy's resolution, cut in its cells ([`EncoderConfig::for_policy`]).
//!
//! The step index is deliberately not an input: a truncated rollout is bootstrapped with
//! the final observation's value as if the episode went on (`advantage/gae.rs`), which is
//! only right if V does not depend on the time left.

use crate::env::ScreenState;
use crate::policy::screen_encoder::{EncoderConfig, ScalarHead, ScreenEncoder, ScreenInputs};
use anyhow::Result;
use candle_core::{Device, Tensor};
use candle_nn::VarBuilder;

/// The critic's architecture: the screen encoder's alone (written to `critic.json` beside
/// its weights, with the same keys as before the encoder was shared).
pub type CriticConfig = EncoderConfig;

/// The network's inputs for a batch of states; build once per iteration with
/// [`critic_inputs`], pick minibatches with [`ScreenInputs::select`].
pub type CriticInputs = ScreenInputs;

/// The critic's inputs for `states`: their screenshots and instructions.
pub fn critic_inputs(states: &[ScreenState], cfg: &CriticConfig, device: &Device) -> Result<CriticInputs> {
    ScreenInputs::new(states.iter().map(|s| (&*s.screenshot, s.instruction.as_str())), cfg, device)
}

/// The value network. See the module docs.
#[derive(Debug, Clone)]
pub struct ValueNet {
    encoder: ScreenEncoder,
    head: ScalarHead,
}

impl ValueNet {
    /// Build (or fetch from `vb`'s store) every weight for `cfg`. Hidden layers start
    /// fan-in scaled; the output starts near 0, so the first advantages are about the
    /// (λ-discounted) returns. The names and the order of drawing are those of the critic
    /// before the encoder was shared: `conv1`, `conv2`, `img`, `word_emb`, `hidden`, `out`.
    pub fn new(cfg: &CriticConfig, vb: VarBuilder) -> Result<ValueNet> {
        cfg.validate("critic config")?;
        let encoder = ScreenEncoder::new(cfg, &vb)?;
        Ok(ValueNet { encoder, head: ScalarHead::new(&vb, cfg.feature_width(), cfg.width)? })
    }

    /// V(s) for each row of `x`: `[B]`.
    pub fn forward(&self, x: &CriticInputs) -> candle_core::Result<Tensor> {
        self.head.forward(&self.encoder.forward(x)?)
    }
}
