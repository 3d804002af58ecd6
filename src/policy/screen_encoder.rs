//! The small screen encoder shared by the reward model (`policy/reward_model/`) and PPO's
//! critic (`train/value/`): a feature vector from a screenshot and an instruction.
//!
//! ```text
//! screenshot [H, W, 3] (standardized like the policy's) ─ patchify p, linear → c, GELU
//!                                                       ─ patchify m, linear → 2c, GELU
//!                                                       ─ flatten (keeps where), linear → d, GELU = img
//! instruction ─ words, hashed into buckets ─ mean of their embeddings              = txt
//! features = [img, txt, img ⊙ txt]    [B, 3d]    (img ⊙ txt: what the screen shows against
//!                                                 what was asked)
//! ```
//!
//! The two convolutions are non-overlapping, written as patchify + matmul (as the policy's
//! stem), so the graph has only ops with a backward pass (docs/contributing/candle.md): reshape /
//! permute, matmul, [`fused`] GELU and bias add, `index_select` for the word table.
//!
//! Each model puts its own head on the features ([`ScalarHead`]: one number a row). The
//! encoder's weights sit at the root of the model's `VarBuilder` (`conv1`, `conv2`, `img`,
//! `word_emb`), as they did before the two models shared it, so saved models still load.

use crate::nn::custom_ops as fused;
use crate::policy::vlm::inputs::image_values;
use crate::policy::vlm::layers::{linear, Linear};
use crate::policy::vlm::model::patchify;
use crate::policy::vlm::words::instruction_words;
use crate::policy::vlm::VlmConfig;
use anyhow::{bail, Result};
use candle_core::{DType, Device, Module, Tensor};
use candle_nn::{Init, VarBuilder};
use image::RgbImage;
use serde::{Deserialize, Serialize};

/// The encoder's architecture. Written as it is into `critic.json`, and flattened into the
/// `config` of `reward_model.json` (the same keys as before the two shared it).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EncoderConfig {
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
    /// Width of the image and instruction features (and of the heads' hidden layer).
    pub width: usize,
    /// Hash buckets of the instruction's words.
    pub word_buckets: usize,
    /// Instruction words read (later ones are dropped).
    pub max_words: usize,
}

impl EncoderConfig {
    /// The default encoder at `width`×`height` pixels (patch 4, merge 2).
    pub fn new(width: usize, height: usize) -> EncoderConfig {
        EncoderConfig {
            image_width: width,
            image_height: height,
            patch: 4,
            merge: 2,
            channels: 16,
            width: 64,
            word_buckets: 512,
            max_words: 32,
        }
    }

    /// An encoder that sees the screenshot at the policy's resolution, cut in its cells.
    pub fn for_policy(v: &VlmConfig) -> EncoderConfig {
        EncoderConfig {
            patch: v.stem_patch,
            merge: v.stem_merge,
            ..EncoderConfig::new(v.image_width, v.image_height)
        }
    }

    /// Cells of the second convolution, across and down.
    pub fn grid(&self) -> (usize, usize) {
        let s = self.patch * self.merge;
        (self.image_width / s, self.image_height / s)
    }

    /// Width of [`ScreenEncoder::forward`]'s features: `3 · width`.
    pub fn feature_width(&self) -> usize {
        3 * self.width
    }

    /// Check the sizes; errors start with `what` (the model's name, e.g. "critic config")
    /// and name the key.
    pub fn validate(&self, what: &str) -> Result<()> {
        for (k, v) in [
            ("image_width", self.image_width),
            ("image_height", self.image_height),
            ("patch", self.patch),
            ("merge", self.merge),
            ("channels", self.channels),
            ("width", self.width),
            ("max_words", self.max_words),
        ] {
            at_least_one(what, k, v)?;
        }
        if self.word_buckets < 2 {
            bail!("{what}: `word_buckets` must be at least 2");
        }
        let s = self.patch * self.merge;
        if !self.image_width.is_multiple_of(s) || !self.image_height.is_multiple_of(s) {
            bail!(
                "{what}: the image size ({}x{}) must be a multiple of {s} (patch {} × merge {})",
                self.image_width,
                self.image_height,
                self.patch,
                self.merge
            );
        }
        Ok(())
    }
}

/// The error for a size `key` of 0, in [`EncoderConfig::validate`]'s words (for the
/// models' own keys too).
pub fn at_least_one(what: &str, key: &str, value: usize) -> Result<()> {
    if value == 0 {
        bail!("{what}: `{key}` must be at least 1");
    }
    Ok(())
}

/// Word-bucket ids padded to one length: ([B, L] u32, [B, L, 1] f32 mask), L at least 1.
pub fn padded(words: &[Vec<u32>], device: &Device) -> Result<(Tensor, Tensor)> {
    let b = words.len();
    let l = words.iter().map(Vec::len).max().unwrap_or(0).max(1);
    let (mut ids, mut mask) = (vec![0u32; b * l], vec![0f32; b * l]);
    for (i, ws) in words.iter().enumerate() {
        ids[i * l..i * l + ws.len()].copy_from_slice(ws);
        mask[i * l..i * l + ws.len()].fill(1.0);
    }
    Ok((Tensor::from_vec(ids, (b, l), device)?, Tensor::from_vec(mask, (b, l, 1), device)?))
}

/// `Σ_w mask_w E[w] / max(1, Σ_w mask_w)`: the mean embedding of each row's words, `[B, d]`.
pub fn bag(table: &Tensor, ids: &Tensor, mask: &Tensor) -> candle_core::Result<Tensor> {
    let (b, l) = ids.dims2()?;
    let d = table.dim(1)?;
    let emb = table.index_select(&ids.flatten_all()?, 0)?.reshape((b, l, d))?;
    let count = mask.sum(1)?.clamp(1.0, f64::INFINITY)?; // [B, 1]
    emb.broadcast_mul(mask)?.sum(1)?.broadcast_div(&count)
}

/// `rows` as a u32 index tensor, for `index_select` on the batch dimension.
pub fn row_index(rows: &[usize], device: &Device) -> Result<Tensor> {
    let idx: Vec<u32> = rows.iter().map(|&r| r as u32).collect();
    Ok(Tensor::from_vec(idx, rows.len(), device)?)
}

/// The encoder's inputs for a batch of screens; build once, pick minibatches with
/// [`ScreenInputs::select`].
#[derive(Debug, Clone)]
pub struct ScreenInputs {
    /// [B, H, W, 3] standardized RGB.
    pub images: Tensor,
    /// [B, L] u32 instruction word buckets (0 on padding).
    pub words: Tensor,
    /// [B, L, 1] f32: 1 for a word, 0 for padding.
    pub word_mask: Tensor,
}

impl ScreenInputs {
    /// Tensors for `screens`: each a screenshot (any size; resized to the config's) and
    /// its instruction.
    pub fn new<'a>(
        screens: impl ExactSizeIterator<Item = (&'a RgbImage, &'a str)>,
        cfg: &EncoderConfig,
        device: &Device,
    ) -> Result<ScreenInputs> {
        let b = screens.len();
        let (w, h) = (cfg.image_width, cfg.image_height);
        let mut pixels = Vec::with_capacity(b * w * h * 3);
        let mut words = Vec::with_capacity(b);
        for (image, instruction) in screens {
            image_values(image, w, h, &mut pixels);
            words.push(instruction_words(instruction, cfg.word_buckets, cfg.max_words));
        }
        let (words, word_mask) = padded(&words, device)?;
        Ok(ScreenInputs { images: Tensor::from_vec(pixels, (b, h, w, 3), device)?, words, word_mask })
    }

    /// The rows `rows` of every tensor.
    pub fn select(&self, rows: &[usize]) -> Result<ScreenInputs> {
        self.select_index(&row_index(rows, self.images.device())?)
    }

    /// The rows of every tensor that `idx` ([`row_index`]) names.
    pub fn select_index(&self, idx: &Tensor) -> Result<ScreenInputs> {
        Ok(ScreenInputs {
            images: self.images.index_select(idx, 0)?,
            words: self.words.index_select(idx, 0)?,
            word_mask: self.word_mask.index_select(idx, 0)?,
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

/// `1 / √n`: the init scale of a layer with fan-in `n`.
pub fn fan_in(n: usize) -> f64 {
    1.0 / (n as f64).sqrt()
}

/// The screen encoder. See the module docs.
#[derive(Debug, Clone)]
pub struct ScreenEncoder {
    conv1: Linear,
    conv2: Linear,
    img: Linear,
    word_emb: Tensor,
    patch: usize,
    merge: usize,
}

impl ScreenEncoder {
    /// Build (or fetch from `vb`'s store) the encoder's weights, fan-in scaled, in the
    /// order `conv1`, `conv2`, `img`, `word_emb` (a seeded store draws them in that order,
    /// so a model's weights stay what its seed gave before the encoder was shared).
    pub fn new(cfg: &EncoderConfig, vb: &VarBuilder) -> Result<ScreenEncoder> {
        cfg.validate("screen encoder config")?;
        let (c, d, p, m) = (cfg.channels, cfg.width, cfg.patch, cfg.merge);
        let (gw, gh) = cfg.grid();
        Ok(ScreenEncoder {
            conv1: linear(vb.pp("conv1"), p * p * 3, c, true, fan_in(p * p * 3))?,
            conv2: linear(vb.pp("conv2"), m * m * c, 2 * c, true, fan_in(m * m * c))?,
            img: linear(vb.pp("img"), gw * gh * 2 * c, d, true, fan_in(gw * gh * 2 * c))?,
            word_emb: vb.get_with_hints(
                (cfg.word_buckets, d),
                "word_emb",
                Init::Randn { mean: 0.0, stdev: 1.0 },
            )?,
            patch: p,
            merge: m,
        })
    }

    /// `[img, txt, img ⊙ txt]` of each row of `x`: [B, 3d].
    pub fn forward(&self, x: &ScreenInputs) -> candle_core::Result<Tensor> {
        let b = x.images.dim(0)?;
        let cells = fused::gelu(&self.conv1.forward(&patchify(&x.images, self.patch)?)?)?;
        let grid = fused::gelu(&self.conv2.forward(&patchify(&cells, self.merge)?)?)?;
        let img = fused::gelu(&self.img.forward(&grid.reshape((b, ()))?)?)?;
        let txt = bag(&self.word_emb, &x.words, &x.word_mask)?;
        Tensor::cat(&[&img, &txt, &(&img * &txt)?], 1)
    }
}

/// One number a row: `linear(GELU(linear(x)))`, the hidden layer `width` wide and fan-in
/// scaled, the output starting near 0. Its weights are `hidden` and `out`.
#[derive(Debug, Clone)]
pub struct ScalarHead {
    hidden: Linear,
    out: Linear,
}

impl ScalarHead {
    /// Build (or fetch) `hidden` (`input` → `width`), then `out` (`width` → 1).
    pub fn new(vb: &VarBuilder, input: usize, width: usize) -> Result<ScalarHead> {
        Ok(ScalarHead {
            hidden: linear(vb.pp("hidden"), input, width, true, fan_in(input))?,
            out: linear(vb.pp("out"), width, 1, true, 0.01)?,
        })
    }

    /// The head's number for each row of `x` (`[B, input]`): `[B]` f32.
    pub fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        let h = fused::gelu(&self.hidden.forward(x)?)?;
        self.out.forward(&h)?.squeeze(1)?.to_dtype(DType::F32)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::vlm::words::word_buckets;

    #[test]
    fn words_are_one_bucket_each_in_order() {
        let w = instruction_words("Click  B, then  OK.", 512, 32);
        assert_eq!(w.len(), 4);
        assert_eq!(w[1], word_buckets(b"B", 512)[0]);
        assert_eq!(instruction_words("a b c d", 512, 2).len(), 2);
        assert!(instruction_words("", 512, 8).is_empty());
        let (ids, mask) = padded(&[vec![3, 4], vec![]], &Device::Cpu).unwrap();
        assert_eq!(ids.to_vec2::<u32>().unwrap(), [[3, 4], [0, 0]]);
        assert_eq!(mask.squeeze(2).unwrap().to_vec2::<f32>().unwrap(), [[1.0, 1.0], [0.0, 0.0]]);
    }

    #[test]
    fn sizes_are_checked_naming_the_model_and_the_key() {
        let mut c = EncoderConfig::for_policy(&VlmConfig::tiny());
        c.validate("critic config").unwrap();
        c.image_width = 30;
        let e = c.validate("critic config").unwrap_err().to_string();
        assert!(e.starts_with("critic config: the image size (30x") && e.contains("multiple of 8"), "{e}");
        let e = EncoderConfig { channels: 0, ..EncoderConfig::new(32, 32) }.validate("x").unwrap_err();
        assert_eq!(e.to_string(), "x: `channels` must be at least 1");
        let e = EncoderConfig { word_buckets: 1, ..EncoderConfig::new(32, 32) }.validate("x").unwrap_err();
        assert_eq!(e.to_string(), "x: `word_buckets` must be at least 2");
    }

    #[test]
    fn features_are_image_text_and_their_product() {
        let cfg = EncoderConfig { channels: 2, width: 4, word_buckets: 8, ..EncoderConfig::new(16, 8) };
        let map = candle_nn::VarMap::new();
        let vb = crate::policy::vlm::init::seeded_var_builder(&map, 1, &Device::Cpu);
        let enc = ScreenEncoder::new(&cfg, &vb).unwrap();
        let img = RgbImage::from_fn(20, 10, |x, y| image::Rgb([(x * 12) as u8, (y * 25) as u8, 90]));
        let x = ScreenInputs::new([(&img, "Click OK"), (&img, "")].into_iter(), &cfg, &Device::Cpu).unwrap();
        assert_eq!((x.len(), x.select(&[1]).unwrap().len()), (2, 1));
        let f = enc.forward(&x).unwrap().to_vec2::<f32>().unwrap();
        assert_eq!(f[0].len(), cfg.feature_width());
        for row in &f {
            for k in 0..4 {
                assert!((row[8 + k] - row[k] * row[4 + k]).abs() < 1e-6, "{row:?}");
            }
        }
        assert!(f[1][4..8].iter().all(|&t| t == 0.0), "no words: a zero text feature");
    }
}
