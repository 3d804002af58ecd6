//! Rotary position embeddings: the language model's 3-D M-RoPE and the vision tower's 2-D one.
//!
//! M-RoPE gives each token three positions (temporal, height, width). Text tokens have
//! all three equal to a running index; the `k` image tokens of an image whose merged grid
//! is `gh × gw`, starting after text index `s`, get `(s, s + row, s + col)`; the text after
//! the image resumes at `s + max(gh, gw)`. Each rotary frequency then takes its angle from
//! one of the three axes: Qwen2.5-VL in three consecutive sections, Qwen3-VL interleaved
//! (slot `i` is height if `i % 3 == 1`, width if `i % 3 == 2`, within the sections' reach).

use super::config::TextConfig;
use anyhow::{bail, Result};
use candle_core::{DType, Device, Tensor};

/// Per-token M-RoPE positions `[3][T]` of a prompt, and the delta that continues them:
/// a token appended at sequence index `n` has all three positions `n + delta`.
pub fn mrope_positions(
    ids: &[u32],
    image_token: u32,
    grids: &[[usize; 3]],
    merge: usize,
) -> Result<([Vec<i64>; 3], i64)> {
    let mut pos: [Vec<i64>; 3] =
        [Vec::with_capacity(ids.len()), Vec::with_capacity(ids.len()), Vec::with_capacity(ids.len())];
    let mut next: i64 = 0;
    let mut i = 0;
    let mut images = grids.iter();
    while i < ids.len() {
        if ids[i] != image_token {
            for p in pos.iter_mut() {
                p.push(next);
            }
            next += 1;
            i += 1;
            continue;
        }
        let run = ids[i..].iter().take_while(|&&t| t == image_token).count();
        let Some(&[gt, gh, gw]) = images.next() else {
            bail!("the prompt has more image placeholder runs than images");
        };
        let (h, w) = (gh / merge, gw / merge);
        if run != gt * h * w {
            bail!(
                "an image of {gt}×{gh}×{gw} patches needs {} placeholder tokens, the prompt has {run}",
                gt * h * w
            );
        }
        for t in 0..gt {
            for r in 0..h {
                for c in 0..w {
                    pos[0].push(next + t as i64);
                    pos[1].push(next + r as i64);
                    pos[2].push(next + c as i64);
                }
            }
        }
        next += h.max(w) as i64;
        i += run;
    }
    if images.next().is_some() {
        bail!("more images than image placeholder runs in the prompt");
    }
    Ok((pos, next - ids.len() as i64))
}

/// The language model's inverse frequencies, `[head_dim / 2]`, in f32 as transformers.
fn inv_freq(dim: usize, theta: f64) -> Vec<f32> {
    (0..dim / 2).map(|i| 1.0 / (theta as f32).powf((2 * i) as f32 / dim as f32)).collect()
}

/// Which axis (0 t, 1 h, 2 w) each of the `head_dim / 2` frequency slots reads.
pub fn axis_of_slots(cfg: &TextConfig) -> Vec<usize> {
    let [st, sh, sw] = cfg.mrope_section;
    let half = cfg.head_dim / 2;
    if cfg.mrope_interleaved {
        (0..half)
            .map(|i| match i % 3 {
                1 if i < 3 * sh => 1,
                2 if i < 3 * sw => 2,
                _ => 0,
            })
            .collect()
    } else {
        (0..half)
            .map(|i| {
                if i < st {
                    0
                } else if i < st + sh {
                    1
                } else {
                    2
                }
            })
            .collect()
    }
}

/// `cos`, `sin` tables `[T, head_dim]` for the given positions (`[3][T]`).
pub fn text_cos_sin(
    cfg: &TextConfig,
    pos: &[Vec<i64>; 3],
    dtype: DType,
    device: &Device,
) -> Result<(Tensor, Tensor)> {
    let inv = inv_freq(cfg.head_dim, cfg.rope_theta);
    let axes = axis_of_slots(cfg);
    let t = pos[0].len();
    let mut cos = Vec::with_capacity(t * cfg.head_dim);
    let mut sin = Vec::with_capacity(t * cfg.head_dim);
    for ((&pt, &ph), &pw) in pos[0].iter().zip(&pos[1]).zip(&pos[2]) {
        // slot i rotates by the position on its axis
        let p = [pt, ph, pw];
        let angles: Vec<f32> = axes.iter().zip(&inv).map(|(&a, f)| p[a] as f32 * f).collect();
        for _ in 0..2 {
            cos.extend(angles.iter().map(|a| a.cos()));
            sin.extend(angles.iter().map(|a| a.sin()));
        }
    }
    let make = |v: Vec<f32>| -> Result<Tensor> {
        Ok(Tensor::from_vec(v, (t, cfg.head_dim), device)?.to_dtype(dtype)?)
    };
    Ok((make(cos)?, make(sin)?))
}

/// The vision tower's `(row, col)` of every patch, in the order patches arrive (2×2 merge
/// blocks, row-major within a block and over blocks), frames repeated.
pub fn vision_patch_positions(grids: &[[usize; 3]], merge: usize) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    for &[t, h, w] in grids {
        for _ in 0..t {
            for br in 0..h / merge {
                for bc in 0..w / merge {
                    for ir in 0..merge {
                        for ic in 0..merge {
                            out.push((br * merge + ir, bc * merge + ic));
                        }
                    }
                }
            }
        }
    }
    out
}

/// The vision tower's `cos`, `sin` `[N, head_dim]`: the first half of the frequencies
/// rotate by the row, the second by the column (head_dim / 4 each), the whole repeated.
pub fn vision_cos_sin(
    positions: &[(usize, usize)],
    head_dim: usize,
    theta: f64,
    dtype: DType,
    device: &Device,
) -> Result<(Tensor, Tensor)> {
    let spatial = head_dim / 2;
    let inv: Vec<f32> =
        (0..spatial / 2).map(|i| 1.0 / (theta as f32).powf((2 * i) as f32 / spatial as f32)).collect();
    let n = positions.len();
    let mut cos = Vec::with_capacity(n * head_dim);
    let mut sin = Vec::with_capacity(n * head_dim);
    for &(r, c) in positions {
        let angles: Vec<f32> =
            inv.iter().map(|f| r as f32 * f).chain(inv.iter().map(|f| c as f32 * f)).collect();
        for _ in 0..2 {
            cos.extend(angles.iter().map(|a| a.cos()));
            sin.extend(angles.iter().map(|a| a.sin()));
        }
    }
    let make =
        |v: Vec<f32>| -> Result<Tensor> { Ok(Tensor::from_vec(v, (n, head_dim), device)?.to_dtype(dtype)?) };
    Ok((make(cos)?, make(sin)?))
}
