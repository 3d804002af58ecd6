//! The reward model's network: a success logit from the final screenshot, the
//! instruction and, optionally, a bag of the action history's words.
//!
//! ```text
//! screenshot [H, W, 3] (standardized like the policy's) ─ patchify p, linear → c, GELU
//!                                                       ─ patchify m, linear → 2c, GELU
//!                                                       ─ flatten (keeps where), linear → d, GELU = img
//! instruction ─ words, hashed into buckets ─ mean of their embeddings              = txt
//! history     ─ verbs and typed words, hashed ─ mean of their embeddings ‖ ln(1+steps)/ln(100) = hist
//! logit = linear(GELU(linear([img, txt, img ⊙ txt, hist?])))
//! ```
//!
//! The same design as PPO's critic (`train/value/network.rs`): two non-overlapping
//! convolutions written as patchify + matmul and a bag of hashed words, so the graph has
//! only ops with a backward pass (CANDLE-TRAINING.md). A coordinate in the history
//! (`click(12, 40)`) is not a word: only the verb, a key's name and typed text are.

use crate::policy::vlm::fused;
use crate::policy::vlm::inputs::{image_values, instruction_words};
use crate::policy::vlm::layers::{linear, Linear};
use crate::policy::vlm::model::patchify;
use anyhow::{bail, Result};
use candle_core::{DType, Device, Module, Tensor};
use candle_nn::{Init, VarBuilder};
use image::RgbImage;
use serde::{Deserialize, Serialize};

/// The reward model's architecture (written to `reward_model.json` beside its weights).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RewardConfig {
    /// Width of the (resized) screenshot, pixels.
    pub image_width: usize,
    /// Height of the (resized) screenshot, pixels.
    pub image_height: usize,
    /// First convolution's kernel and stride.
    pub patch: usize,
    /// Second convolution's kernel and stride (over the first one's cells).
    pub merge: usize,
    /// First convolution's channels (the second has twice as many).
    pub channels: usize,
    /// Width of the image, instruction and history features and of the hidden layer.
    pub width: usize,
    /// Hash buckets of the instruction's (and the history's) words.
    pub word_buckets: usize,
    /// Instruction words read (later ones are dropped).
    pub max_words: usize,
    /// Whether the action history is an input.
    pub history: bool,
    /// History words read (the latest ones are kept).
    pub max_history_words: usize,
}

impl RewardConfig {
    /// The default architecture at `width`×`height` pixels.
    pub fn new(width: usize, height: usize, history: bool) -> RewardConfig {
        RewardConfig {
            image_width: width,
            image_height: height,
            patch: 4,
            merge: 2,
            channels: 16,
            width: 64,
            word_buckets: 512,
            max_words: 32,
            history,
            max_history_words: 64,
        }
    }

    /// Cells of the second convolution, across and down.
    pub fn grid(&self) -> (usize, usize) {
        let s = self.patch * self.merge;
        (self.image_width / s, self.image_height / s)
    }

    /// Check the sizes; errors name the key.
    pub fn validate(&self) -> Result<()> {
        for (k, v) in [
            ("image_width", self.image_width),
            ("image_height", self.image_height),
            ("patch", self.patch),
            ("merge", self.merge),
            ("channels", self.channels),
            ("width", self.width),
            ("max_words", self.max_words),
            ("max_history_words", self.max_history_words),
        ] {
            if v == 0 {
                bail!("reward model config: `{k}` must be at least 1");
            }
        }
        if self.word_buckets < 2 {
            bail!("reward model config: `word_buckets` must be at least 2");
        }
        let s = self.patch * self.merge;
        if !self.image_width.is_multiple_of(s) || !self.image_height.is_multiple_of(s) {
            bail!(
                "reward model: the image size ({}x{}) must be a multiple of {s} (patch {} × merge {})",
                self.image_width,
                self.image_height,
                self.patch,
                self.merge
            );
        }
        Ok(())
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

/// Word-bucket ids padded to one length: ([B, L] u32, [B, L, 1] f32 mask).
fn padded(words: &[Vec<u32>], device: &Device) -> Result<(Tensor, Tensor)> {
    let b = words.len();
    let l = words.iter().map(Vec::len).max().unwrap_or(0).max(1);
    let (mut ids, mut mask) = (vec![0u32; b * l], vec![0f32; b * l]);
    for (i, ws) in words.iter().enumerate() {
        ids[i * l..i * l + ws.len()].copy_from_slice(ws);
        mask[i * l..i * l + ws.len()].fill(1.0);
    }
    Ok((Tensor::from_vec(ids, (b, l), device)?, Tensor::from_vec(mask, (b, l, 1), device)?))
}

/// The network's inputs for a batch of examples; build once, pick minibatches with
/// [`RewardInputs::select`].
#[derive(Debug, Clone)]
pub struct RewardInputs {
    /// [B, H, W, 3] standardized RGB.
    pub images: Tensor,
    /// [B, L] u32 instruction word buckets (0 on padding).
    pub words: Tensor,
    /// [B, L, 1] f32: 1 for a word, 0 for padding.
    pub word_mask: Tensor,
    /// ([B, M] history word buckets, [B, M, 1] mask, [B, 1] ln(1 + steps) / ln(100)),
    /// when the config has `history`.
    pub history: Option<(Tensor, Tensor, Tensor)>,
}

impl RewardInputs {
    /// Tensors for `examples`.
    pub fn new(examples: &[RewardExample], cfg: &RewardConfig, device: &Device) -> Result<RewardInputs> {
        let b = examples.len();
        let (w, h) = (cfg.image_width, cfg.image_height);
        let mut pixels = Vec::with_capacity(b * w * h * 3);
        for e in examples {
            image_values(&e.image, w, h, &mut pixels);
        }
        let words: Vec<Vec<u32>> = examples
            .iter()
            .map(|e| instruction_words(&e.instruction, cfg.word_buckets, cfg.max_words))
            .collect();
        let (words, word_mask) = padded(&words, device)?;
        let history = if cfg.history {
            let hist: Vec<Vec<u32>> = examples
                .iter()
                .map(|e| {
                    let mut ws = instruction_words(&history_text(&e.history), cfg.word_buckets, usize::MAX);
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
        Ok(RewardInputs {
            images: Tensor::from_vec(pixels, (b, h, w, 3), device)?,
            words,
            word_mask,
            history,
        })
    }

    /// The rows `rows` of every tensor.
    pub fn select(&self, rows: &[usize]) -> Result<RewardInputs> {
        let idx: Vec<u32> = rows.iter().map(|&r| r as u32).collect();
        let idx = Tensor::from_vec(idx, rows.len(), self.images.device())?;
        let pick = |t: &Tensor| t.index_select(&idx, 0);
        Ok(RewardInputs {
            images: pick(&self.images)?,
            words: pick(&self.words)?,
            word_mask: pick(&self.word_mask)?,
            history: match &self.history {
                Some((a, b, c)) => Some((pick(a)?, pick(b)?, pick(c)?)),
                None => None,
            },
        })
    }

    /// Rows in the batch.
    pub fn len(&self) -> usize {
        self.images.dims().first().copied().unwrap_or(0)
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Σ_w mask_w E[w] / max(1, Σ_w mask_w): the mean embedding of each row's words, [B, d].
fn bag(table: &Tensor, ids: &Tensor, mask: &Tensor) -> candle_core::Result<Tensor> {
    let (b, l) = ids.dims2()?;
    let d = table.dim(1)?;
    let emb = table.index_select(&ids.flatten_all()?, 0)?.reshape((b, l, d))?;
    let count = mask.sum(1)?.clamp(1.0, f64::INFINITY)?; // [B, 1]
    emb.broadcast_mul(mask)?.sum(1)?.broadcast_div(&count)
}

/// The reward network. See the module docs.
#[derive(Debug, Clone)]
pub struct RewardNet {
    conv1: Linear,
    conv2: Linear,
    img: Linear,
    word_emb: Tensor,
    history_emb: Option<Tensor>,
    hidden: Linear,
    out: Linear,
    patch: usize,
    merge: usize,
}

impl RewardNet {
    /// Build (or fetch from `vb`'s store) every weight for `cfg`: hidden layers fan-in
    /// scaled, the output near 0 (every first prediction about ½).
    pub fn new(cfg: &RewardConfig, vb: VarBuilder) -> Result<RewardNet> {
        cfg.validate()?;
        let (c, d, p, m) = (cfg.channels, cfg.width, cfg.patch, cfg.merge);
        let (gw, gh) = cfg.grid();
        let fan = |n: usize| 1.0 / (n as f64).sqrt();
        let table = |name: &str| {
            vb.get_with_hints((cfg.word_buckets, d), name, Init::Randn { mean: 0.0, stdev: 1.0 })
        };
        let joint = if cfg.history { 4 * d + 1 } else { 3 * d };
        Ok(RewardNet {
            conv1: linear(vb.pp("conv1"), p * p * 3, c, true, fan(p * p * 3))?,
            conv2: linear(vb.pp("conv2"), m * m * c, 2 * c, true, fan(m * m * c))?,
            img: linear(vb.pp("img"), gw * gh * 2 * c, d, true, fan(gw * gh * 2 * c))?,
            word_emb: table("word_emb")?,
            history_emb: if cfg.history { Some(table("history_emb")?) } else { None },
            hidden: linear(vb.pp("hidden"), joint, d, true, fan(joint))?,
            out: linear(vb.pp("out"), d, 1, true, 0.01)?,
            patch: p,
            merge: m,
        })
    }

    /// The success logit of each row of `x`: [B] (σ(logit) is the probability).
    pub fn forward(&self, x: &RewardInputs) -> candle_core::Result<Tensor> {
        let b = x.images.dim(0)?;
        let cells = fused::gelu(&self.conv1.forward(&patchify(&x.images, self.patch)?)?)?;
        let grid = fused::gelu(&self.conv2.forward(&patchify(&cells, self.merge)?)?)?;
        let img = fused::gelu(&self.img.forward(&grid.reshape((b, ()))?)?)?;
        let txt = bag(&self.word_emb, &x.words, &x.word_mask)?;
        let mut parts = vec![img.clone(), txt.clone(), (&img * &txt)?];
        match (&self.history_emb, &x.history) {
            (Some(table), Some((ids, mask, steps))) => {
                parts.push(bag(table, ids, mask)?);
                parts.push(steps.clone());
            }
            (None, None) => {}
            _ => candle_core::bail!("reward model: the inputs and the network disagree on the history"),
        }
        let h = fused::gelu(&self.hidden.forward(&Tensor::cat(&parts, 1)?)?)?;
        self.out.forward(&h)?.squeeze(1)?.to_dtype(DType::F32)
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
        c.image_width = 60;
        assert!(c.validate().unwrap_err().to_string().contains("multiple of 8"));
    }
}
