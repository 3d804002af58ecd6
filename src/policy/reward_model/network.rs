//! The reward model's network: a success logit from the final screenshot, the
//! instruction and, optionally, a bag of the action history's words.
//!
//! ```text
//! screenshot, instruction ─ the screen encoder = [img, txt, img ⊙ txt]               = screen
//! history ─ verbs and typed words, hashed ─ mean of their embeddings ‖ ln(1+steps)/ln(100) = hist
//! logit = linear(GELU(linear([screen, hist?])))
//! ```
//!
//! The screenshot and instruction part is the screen encoder PPO's critic uses too
//! ([`crate::policy::screen_encoder`]); this file adds the history's words and the head. A
//! coordinate in the history (`click(12, 40)`) is not a word: only the verb, a key's name
//! and typed text are.

use crate::policy::screen_encoder::{
    at_least_one, bag, padded, row_index, EncoderConfig, ScalarHead, ScreenEncoder, ScreenInputs,
};
use crate::policy::vlm::words::instruction_words;
use anyhow::Result;
use candle_core::{Device, Tensor};
use candle_nn::{Init, VarBuilder};
use image::RgbImage;
use serde::{Deserialize, Serialize};

/// The reward model's architecture (written to `reward_model.json` beside its weights; the
/// encoder's keys stand beside `history` and `max_history_words`, as they always have).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RewardConfig {
    /// The screenshot and instruction encoder (its `word_buckets` hash the history's
    /// words too, its `width` is also the history feature's and the hidden layer's).
    #[serde(flatten)]
    pub encoder: EncoderConfig,
    /// Whether the action history is an input.
    pub history: bool,
    /// History words read (the latest ones are kept).
    pub max_history_words: usize,
}

impl RewardConfig {
    /// The default architecture at `width`×`height` pixels.
    pub fn new(width: usize, height: usize, history: bool) -> RewardConfig {
        RewardConfig { encoder: EncoderConfig::new(width, height), history, max_history_words: 64 }
    }

    /// Check the sizes; errors name the key.
    pub fn validate(&self) -> Result<()> {
        const WHAT: &str = "reward model config";
        self.encoder.validate(WHAT)?;
        at_least_one(WHAT, "max_history_words", self.max_history_words)
    }
}

/// What the reward model judges: the screen at the episode's end, what was asked, and
/// the actions taken (their text forms, in order).
#[derive(Debug, Clone)]
pub struct RewardExample {
    /// The final screenshot (any size; resized to the config's).
    pub image: RgbImage,
    /// The instruction.
    pub instruction: String,
    /// The actions' text forms, in order (read only when the config has `history`).
    pub history: Vec<String>,
}

/// The words of an action history: each action's verb, a key's name, typed text.
pub fn history_text(history: &[String]) -> String {
    let mut out = String::new();
    for a in history {
        let (verb, rest) = a.split_once('(').unwrap_or((a.as_str(), ""));
        out.push_str(verb.trim());
        out.push(' ');
        if matches!(verb.trim(), "type" | "key") {
            out.push_str(rest.trim_end_matches(')'));
            out.push(' ');
        }
    }
    out
}

/// The network's inputs for a batch of examples; build once, pick minibatches with
/// [`RewardInputs::select`].
#[derive(Debug, Clone)]
pub struct RewardInputs {
    /// The final screenshots and the instructions.
    pub screen: ScreenInputs,
    /// ([B, M] history word buckets, [B, M, 1] mask, [B, 1] ln(1 + steps) / ln(100)),
    /// when the config has `history`.
    pub history: Option<(Tensor, Tensor, Tensor)>,
}

impl RewardInputs {
    /// Tensors for `examples`.
    pub fn new(examples: &[RewardExample], cfg: &RewardConfig, device: &Device) -> Result<RewardInputs> {
        let b = examples.len();
        let screens = examples.iter().map(|e| (&e.image, e.instruction.as_str()));
        let screen = ScreenInputs::new(screens, &cfg.encoder, device)?;
        let history = if cfg.history {
            let hist: Vec<Vec<u32>> = examples
                .iter()
                .map(|e| {
                    let mut ws =
                        instruction_words(&history_text(&e.history), cfg.encoder.word_buckets, usize::MAX);
                    ws.drain(..ws.len().saturating_sub(cfg.max_history_words));
                    ws
                })
                .collect();
            let (ids, mask) = padded(&hist, device)?;
            let steps: Vec<f32> =
                examples.iter().map(|e| ((1.0 + e.history.len() as f64).ln() / 100f64.ln()) as f32).collect();
            Some((ids, mask, Tensor::from_vec(steps, (b, 1), device)?))
        } else {
            None
        };
        Ok(RewardInputs { screen, history })
    }

    /// The rows `rows` of every tensor.
    pub fn select(&self, rows: &[usize]) -> Result<RewardInputs> {
        let idx = row_index(rows, self.screen.images.device())?;
        let pick = |t: &Tensor| t.index_select(&idx, 0);
        Ok(RewardInputs {
            screen: self.screen.select_index(&idx)?,
            history: match &self.history {
                Some((a, b, c)) => Some((pick(a)?, pick(b)?, pick(c)?)),
                None => None,
            },
        })
    }

    /// Rows in the batch.
    pub fn len(&self) -> usize {
        self.screen.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The reward network. See the module docs.
#[derive(Debug, Clone)]
pub struct RewardNet {
    encoder: ScreenEncoder,
    history_emb: Option<Tensor>,
    head: ScalarHead,
}

impl RewardNet {
    /// Build (or fetch from `vb`'s store) every weight for `cfg`: hidden layers fan-in
    /// scaled, the output near 0 (every first prediction about ½). The names and the
    /// order of drawing are those of the model before the encoder was shared: `conv1`,
    /// `conv2`, `img`, `word_emb`, `history_emb`, `hidden`, `out`.
    pub fn new(cfg: &RewardConfig, vb: VarBuilder) -> Result<RewardNet> {
        cfg.validate()?;
        let d = cfg.encoder.width;
        let encoder = ScreenEncoder::new(&cfg.encoder, &vb)?;
        let history_emb = if cfg.history {
            let init = Init::Randn { mean: 0.0, stdev: 1.0 };
            Some(vb.get_with_hints((cfg.encoder.word_buckets, d), "history_emb", init)?)
        } else {
            None
        };
        let joint = cfg.encoder.feature_width() + if cfg.history { d + 1 } else { 0 };
        Ok(RewardNet { encoder, history_emb, head: ScalarHead::new(&vb, joint, d)? })
    }

    /// The success logit of each row of `x`: `[B]` (σ(logit) is the probability).
    pub fn forward(&self, x: &RewardInputs) -> candle_core::Result<Tensor> {
        let mut parts = vec![self.encoder.forward(&x.screen)?];
        match (&self.history_emb, &x.history) {
            (Some(table), Some((ids, mask, steps))) => {
                parts.push(bag(table, ids, mask)?);
                parts.push(steps.clone());
            }
            (None, None) => {}
            _ => candle_core::bail!("reward model: the inputs and the network disagree on the history"),
        }
        self.head.forward(&Tensor::cat(&parts, 1)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn history_words_are_verbs_keys_and_typed_text() {
        let h =
            ["click(12, 40)".to_string(), "type(\"ann smith\")".into(), "key(Enter)".into(), "done()".into()];
        let t = history_text(&h);
        assert_eq!(instruction_words(&t, 512, 99).len(), 7, "{t}"); // click type ann smith key Enter done
        assert!(!t.contains("12"));
        let mut c = RewardConfig::new(64, 64, true);
        c.validate().unwrap();
        c.encoder.image_width = 60;
        assert!(c.validate().unwrap_err().to_string().contains("multiple of 8"));
        c.encoder.image_width = 64;
        c.max_history_words = 0;
        let e = c.validate().unwrap_err().to_string();
        assert_eq!(e, "reward model config: `max_history_words` must be at least 1");
    }
}
