//! Images into patches, as the Qwen-VL image processor makes them.
//!
//! `smart_resize` picks a size whose sides are multiples of patch × merge and whose area
//! lies in `[min_pixels, max_pixels]`; the image is resized (bicubic), scaled to [0, 1],
//! normalised by the processor's mean and std, repeated to the temporal patch size, and
//! cut into `C·T·p·p` patches listed 2×2 merge block by merge block. The number of
//! placeholder tokens an image takes is the merged grid's size, `(h / p / m)·(w / p / m)`.

use super::model::config::{Arch, QwenVlConfig};
use crate::policy::api::coords::smart_resize;
use anyhow::{bail, Context, Result};
use candle_core::{Device, Tensor};
use image::{imageops::FilterType, RgbImage};
use serde_json::Value;
use std::path::Path;

/// The processor's settings (`preprocessor_config.json`).
#[derive(Debug, Clone, PartialEq)]
pub struct ImageProcessor {
    /// Side of a patch in pixels.
    pub patch_size: usize,
    /// Frames per patch (an image is repeated to fill them).
    pub temporal_patch_size: usize,
    /// Side of the block of patches merged into one token.
    pub merge_size: usize,
    /// Fewest pixels an image is resized to (`smart_resize`).
    pub min_pixels: u64,
    /// Most pixels an image is resized to.
    pub max_pixels: u64,
    /// Per-channel mean subtracted after scaling to [0, 1].
    pub mean: [f32; 3],
    /// Per-channel standard deviation divided by.
    pub std: [f32; 3],
}

/// One image, ready for the vision tower.
pub struct ProcessedImage {
    /// `[gh·gw, C·T·p·p]` in merge order.
    pub patches: Vec<f32>,
    /// `(t, gh, gw)` in patches.
    pub grid: [usize; 3],
    /// The resized size `(height, width)` the model sees (Qwen2.5-VL's coordinate frame).
    pub resized: (u32, u32),
}

impl ProcessedImage {
    /// Merged tokens (placeholders) this image takes in the prompt.
    pub fn tokens(&self, merge: usize) -> usize {
        self.grid[0] * self.grid[1] * self.grid[2] / (merge * merge)
    }
}

impl ImageProcessor {
    /// The architecture's defaults (the released models' processor settings).
    pub fn defaults(cfg: &QwenVlConfig) -> Self {
        let v = &cfg.vision;
        let (mean, std, min, max) = match cfg.arch {
            Arch::Qwen3Vl => ([0.5; 3], [0.5; 3], 65_536, 16_777_216),
            Arch::Qwen25Vl => (
                [0.481_454_66, 0.457_827_5, 0.408_210_73],
                [0.268_629_54, 0.261_302_6, 0.275_777_1],
                3136,
                12_845_056,
            ),
        };
        ImageProcessor {
            patch_size: v.patch_size,
            temporal_patch_size: v.temporal_patch_size,
            merge_size: v.spatial_merge_size,
            min_pixels: min,
            max_pixels: max,
            mean,
            std,
        }
    }

    /// Read `preprocessor_config.json` from `dir` if present, over the defaults.
    pub fn load(dir: &Path, cfg: &QwenVlConfig) -> Result<Self> {
        let mut p = Self::defaults(cfg);
        let path = dir.join("preprocessor_config.json");
        if !path.exists() {
            return Ok(p);
        }
        let text =
            std::fs::read_to_string(&path).with_context(|| format!("{}: cannot read", path.display()))?;
        let j: Value =
            serde_json::from_str(&text).with_context(|| format!("{}: not valid JSON", path.display()))?;
        let num = |k: &str| j.get(k).and_then(Value::as_u64);
        if let Some(v) = num("patch_size") {
            p.patch_size = v as usize;
        }
        if let Some(v) = num("temporal_patch_size") {
            p.temporal_patch_size = v as usize;
        }
        if let Some(v) = num("merge_size") {
            p.merge_size = v as usize;
        }
        if let Some(v) = num("min_pixels") {
            p.min_pixels = v;
        }
        if let Some(v) = num("max_pixels") {
            p.max_pixels = v;
        }
        if let Some(size) = j.get("size") {
            if let Some(v) = size.get("shortest_edge").and_then(Value::as_u64) {
                p.min_pixels = v;
            }
            if let Some(v) = size.get("longest_edge").and_then(Value::as_u64) {
                p.max_pixels = v;
            }
        }
        let triple = |k: &str| -> Result<Option<[f32; 3]>> {
            match j.get(k) {
                None => Ok(None),
                Some(Value::Array(a)) if a.len() == 3 => {
                    let v: Vec<f32> = a.iter().filter_map(|x| x.as_f64().map(|f| f as f32)).collect();
                    if v.len() != 3 {
                        bail!("{}: `{k}` must hold three numbers", path.display());
                    }
                    Ok(Some([v[0], v[1], v[2]]))
                }
                Some(_) => bail!("{}: `{k}` must hold three numbers", path.display()),
            }
        };
        if let Some(m) = triple("image_mean")? {
            p.mean = m;
        }
        if let Some(s) = triple("image_std")? {
            p.std = s;
        }
        if p.patch_size != cfg.vision.patch_size || p.merge_size != cfg.vision.spatial_merge_size {
            bail!(
                "{}: patch_size {} / merge_size {} disagree with config.json's vision_config ({} / {})",
                path.display(),
                p.patch_size,
                p.merge_size,
                cfg.vision.patch_size,
                cfg.vision.spatial_merge_size
            );
        }
        Ok(p)
    }

    /// The size `(height, width)` an image of this size is resized to.
    pub fn target_size(&self, height: u32, width: u32) -> (u32, u32) {
        let f = (self.patch_size * self.merge_size) as u32;
        smart_resize(height, width, f, self.min_pixels, self.max_pixels)
    }

    /// The merged tokens an image of this size takes in the prompt (what
    /// [`ProcessedImage::tokens`] says after [`Self::process`], without resizing it).
    pub fn image_tokens(&self, height: u32, width: u32) -> usize {
        let (h, w) = self.target_size(height, width);
        let p = self.patch_size * self.merge_size;
        (h as usize / p) * (w as usize / p)
    }

    /// Resize, normalise and cut one image.
    pub fn process(&self, img: &RgbImage) -> ProcessedImage {
        let (h, w) = self.target_size(img.height(), img.width());
        let resized;
        let img = if (h, w) == (img.height(), img.width()) {
            img
        } else {
            resized = image::imageops::resize(img, w, h, FilterType::CatmullRom);
            &resized
        };
        let (p, m, tp) = (self.patch_size, self.merge_size, self.temporal_patch_size);
        let (gh, gw) = (h as usize / p, w as usize / p);
        let mut patches = Vec::with_capacity(gh * gw * 3 * tp * p * p);
        for br in 0..gh / m {
            for bc in 0..gw / m {
                for ir in 0..m {
                    for ic in 0..m {
                        let (y0, x0) = ((br * m + ir) * p, (bc * m + ic) * p);
                        for c in 0..3 {
                            for _ in 0..tp {
                                for y in 0..p {
                                    for x in 0..p {
                                        let v =
                                            img.get_pixel((x0 + x) as u32, (y0 + y) as u32)[c] as f32 / 255.0;
                                        patches.push((v - self.mean[c]) / self.std[c]);
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
        ProcessedImage { patches, grid: [1, gh, gw], resized: (h, w) }
    }

    /// Several images as one `[N, C·T·p·p]` tensor and their grids.
    pub fn batch<I: std::borrow::Borrow<ProcessedImage>>(
        &self,
        images: &[I],
        device: &Device,
    ) -> Result<(Tensor, Vec<[usize; 3]>)> {
        let dim = 3 * self.temporal_patch_size * self.patch_size * self.patch_size;
        let data: Vec<f32> = images.iter().flat_map(|i| i.borrow().patches.iter().copied()).collect();
        let n = data.len() / dim;
        Ok((Tensor::from_vec(data, (n, dim), device)?, images.iter().map(|i| i.borrow().grid).collect()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_images_token_count_follows_from_its_size() {
        let p = ImageProcessor {
            patch_size: 16,
            temporal_patch_size: 2,
            merge_size: 2,
            min_pixels: 64 * 64,
            max_pixels: 400 * 400,
            mean: [0.5; 3],
            std: [0.5; 3],
        };
        for (w, h) in [(160, 210), (320, 240), (33, 7), (1280, 720), (64, 64)] {
            let img = RgbImage::new(w, h);
            assert_eq!(p.image_tokens(h, w), p.process(&img).tokens(p.merge_size), "{w}x{h}");
        }
    }
}
