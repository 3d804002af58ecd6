//! The critic's network: V(s) from the screenshot and the instruction.
//!
//! ```text
//! screenshot [H, W, 3] (standardized like the policy's) ─ patchify p, linear → c, GELU
//!                                                       ─ patchify m, linear → 2c, GELU
//!                                                       ─ flatten (keeps where), linear → d, GELU = img
//! instruction ─ words, hashed into buckets ─ mean of their embeddings              = txt
//! V = linear(GELU(linear([img, txt, img ⊙ txt])))        (img ⊙ txt: what the screen shows
//!                                                        against what was asked)
//! ```
//! The two convolutions are non-overlapping, written as patchify + matmul (as the policy's
//! stem), so the graph has only ops with a backward pass (CANDLE-TRAINING.md): reshape /
//! permute, matmul, [`fused`] GELU and bias add, `index_select` for the word table.
//!
//! The step index is deliberately not an input: a truncated rollout is bootstrapped with
//! the final observation's value as if the episode went on (`advantage/gae.rs`), which is
//! only right if V does not depend on the time left.

use crate::env::ScreenState;
use crate::policy::vlm::fused;
use crate::policy::vlm::inputs::{image_values, instruction_words};
use crate::policy::vlm::layers::{linear, Linear};
use crate::policy::vlm::model::patchify;
use crate::policy::vlm::VlmConfig;
use anyhow::{bail, Result};
use candle_core::{DType, Device, Module, Tensor};
use candle_nn::{Init, VarBuilder};
use serde::{Deserialize, Serialize};

/// The critic's architecture (written to `critic.json` beside its weights).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CriticConfig {
    /// Side of the (resized) screenshot, pixels.
    pub image_width: usize,
    /// Height of the (resized) screenshot, pixels.
    pub image_height: usize,
    /// First convolution's kernel and stride.
    pub patch: usize,
    /// Second convolution's kernel and stride (over the first one's cells).
    pub merge: usize,
    /// First convolution's channels (the second has twice as many).
    pub channels: usize,
    /// Width of the image and instruction features and of the hidden layer.
    pub width: usize,
    /// Hash buckets of the instruction's words.
    pub word_buckets: usize,
    /// Instruction words read (later ones are dropped).
    pub max_words: usize,
}

impl CriticConfig {
    /// A critic that sees the screenshot at the policy's resolution, cut in its cells.
    pub fn for_policy(v: &VlmConfig) -> CriticConfig {
        CriticConfig {
            image_width: v.image_width,
            image_height: v.image_height,
            patch: v.stem_patch,
            merge: v.stem_merge,
            channels: 16,
            width: 64,
            word_buckets: 512,
            max_words: 32,
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
        ] {
            if v == 0 {
                bail!("critic config: `{k}` must be at least 1");
            }
        }
        if self.word_buckets < 2 {
            bail!("critic config: `word_buckets` must be at least 2");
        }
        let s = self.patch * self.merge;
        if !self.image_width.is_multiple_of(s) || !self.image_height.is_multiple_of(s) {
            bail!(
                "critic config: the image ({}x{}) must be a multiple of patch * merge = {s}",
                self.image_width,
                self.image_height
            );
        }
        Ok(())
    }
}

/// The network's inputs for a batch of states; build once per iteration, pick minibatches
/// with [`CriticInputs::select`].
#[derive(Debug, Clone)]
pub struct CriticInputs {
    /// [B, H, W, 3] standardized RGB.
    pub images: Tensor,
    /// [B, L] u32 word buckets (0 on padding).
    pub words: Tensor,
    /// [B, L, 1] f32: 1 for a word, 0 for padding.
    pub word_mask: Tensor,
}

impl CriticInputs {
    /// Tensors for `states`.
    pub fn new(states: &[ScreenState], cfg: &CriticConfig, device: &Device) -> Result<CriticInputs> {
        let b = states.len();
        let (w, h) = (cfg.image_width, cfg.image_height);
        let mut pixels = Vec::with_capacity(b * w * h * 3);
        for s in states {
            image_values(&s.screenshot, w, h, &mut pixels);
        }
        let words: Vec<Vec<u32>> = states
            .iter()
            .map(|s| instruction_words(&s.instruction, cfg.word_buckets, cfg.max_words))
            .collect();
        let l = words.iter().map(Vec::len).max().unwrap_or(0).max(1);
        let (mut ids, mut mask) = (vec![0u32; b * l], vec![0f32; b * l]);
        for (i, ws) in words.iter().enumerate() {
            ids[i * l..i * l + ws.len()].copy_from_slice(ws);
            mask[i * l..i * l + ws.len()].fill(1.0);
        }
        Ok(CriticInputs {
            images: Tensor::from_vec(pixels, (b, h, w, 3), device)?,
            words: Tensor::from_vec(ids, (b, l), device)?,
            word_mask: Tensor::from_vec(mask, (b, l, 1), device)?,
        })
    }

    /// The rows `rows` of every tensor.
    pub fn select(&self, rows: &[usize]) -> Result<CriticInputs> {
        let idx: Vec<u32> = rows.iter().map(|&r| r as u32).collect();
        let idx = Tensor::from_vec(idx, rows.len(), self.images.device())?;
        Ok(CriticInputs {
            images: self.images.index_select(&idx, 0)?,
            words: self.words.index_select(&idx, 0)?,
            word_mask: self.word_mask.index_select(&idx, 0)?,
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

/// The value network. See the module docs.
#[derive(Debug, Clone)]
pub struct ValueNet {
    conv1: Linear,
    conv2: Linear,
    img: Linear,
    word_emb: Tensor,
    hidden: Linear,
    out: Linear,
    patch: usize,
    merge: usize,
}

impl ValueNet {
    /// Build (or fetch from `vb`'s store) every weight for `cfg`. Hidden layers start
    /// fan-in scaled; the output starts near 0, so the first advantages are about the
    /// (λ-discounted) returns.
    pub fn new(cfg: &CriticConfig, vb: VarBuilder) -> Result<ValueNet> {
        cfg.validate()?;
        let (c, d, p, m) = (cfg.channels, cfg.width, cfg.patch, cfg.merge);
        let (gw, gh) = cfg.grid();
        let fan = |n: usize| 1.0 / (n as f64).sqrt();
        Ok(ValueNet {
            conv1: linear(vb.pp("conv1"), p * p * 3, c, true, fan(p * p * 3))?,
            conv2: linear(vb.pp("conv2"), m * m * c, 2 * c, true, fan(m * m * c))?,
            img: linear(vb.pp("img"), gw * gh * 2 * c, d, true, fan(gw * gh * 2 * c))?,
            word_emb: vb.get_with_hints(
                (cfg.word_buckets, d),
                "word_emb",
                Init::Randn { mean: 0.0, stdev: 1.0 },
            )?,
            hidden: linear(vb.pp("hidden"), 3 * d, d, true, fan(3 * d))?,
            out: linear(vb.pp("out"), d, 1, true, 0.01)?,
            patch: p,
            merge: m,
        })
    }

    /// V(s) for each row of `x`: [B].
    pub fn forward(&self, x: &CriticInputs) -> candle_core::Result<Tensor> {
        let b = x.images.dim(0)?;
        let cells = fused::gelu(&self.conv1.forward(&patchify(&x.images, self.patch)?)?)?;
        let grid = fused::gelu(&self.conv2.forward(&patchify(&cells, self.merge)?)?)?;
        let img = fused::gelu(&self.img.forward(&grid.reshape((b, ()))?)?)?;
        // txt = Σ_w mask_w E[w] / max(1, Σ_w mask_w)
        let (_, l) = x.words.dims2()?;
        let d = self.word_emb.dim(1)?;
        let emb = self.word_emb.index_select(&x.words.flatten_all()?, 0)?.reshape((b, l, d))?;
        let count = x.word_mask.sum(1)?.clamp(1.0, f64::INFINITY)?; // [B, 1]
        let txt = emb.broadcast_mul(&x.word_mask)?.sum(1)?.broadcast_div(&count)?;
        let joint = Tensor::cat(&[&img, &txt, &(&img * &txt)?], 1)?;
        let h = fused::gelu(&self.hidden.forward(&joint)?)?;
        self.out.forward(&h)?.squeeze(1)?.to_dtype(DType::F32)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::vlm::inputs::word_buckets;

    #[test]
    fn words_are_one_bucket_each_in_order() {
        let w = instruction_words("Click  B, then  OK.", 512, 32);
        assert_eq!(w.len(), 4);
        assert_eq!(w[1], word_buckets(b"B", 512)[0]);
        assert_eq!(instruction_words("a b c d", 512, 2).len(), 2);
        assert!(instruction_words("", 512, 8).is_empty());
        let mut c = CriticConfig::for_policy(&VlmConfig::tiny());
        c.validate().unwrap();
        c.image_width = 30;
        assert!(c.validate().unwrap_err().to_string().contains("multiple of patch * merge"));
    }
}
