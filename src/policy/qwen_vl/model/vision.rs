//! The vision towers: patches in, one embedding per merged 2×2 block out.
//!
//! Both towers embed each `C × T × p × p` patch with one matmul (the Conv3d's kernel equals
//! its stride, so it is a linear map of the flattened patch), rotate q/k by the patch's
//! row and column, and merge each 2×2 block of patches into one language-model token.
//! Qwen3-VL adds a learned position table resampled to the image's grid and three DeepStack
//! taps; Qwen2.5-VL attends inside 2×2-unit windows except in its full-attention blocks.

use super::config::{Arch, VisionConfig};
use super::nn::{activate, apply_rope, attention, LayerNorm, Linear, RmsNorm};
use super::rope::{vision_cos_sin, vision_patch_positions};
use super::weights::Weights;
use crate::nn::activation;
use anyhow::{bail, Result};
use candle_core::{DType, Module, Tensor, D};

/// What the tower gives the language model for a batch of images.
pub struct VisionOutput {
    /// One row per merged token, images in order: `[N, text_hidden]`.
    pub embeds: Tensor,
    /// Qwen3-VL's DeepStack features, each `[N, text_hidden]`, added after decoder layer `i`.
    pub deepstack: Vec<Tensor>,
}

enum Norm {
    Layer(LayerNorm),
    Rms(RmsNorm),
}

impl Norm {
    fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        match self {
            Norm::Layer(n) => n.forward(x),
            Norm::Rms(n) => n.forward(x),
        }
    }
}

enum Mlp {
    /// fc1 → act → fc2 (Qwen3-VL).
    Plain { fc1: Linear, fc2: Linear },
    /// down(act(gate) · up), with biases (Qwen2.5-VL).
    Gated { gate: Linear, up: Linear, down: Linear },
}

struct Block {
    norm1: Norm,
    norm2: Norm,
    qkv: Linear,
    proj: Linear,
    mlp: Mlp,
}

/// A patch merger: norm, then `[4·hidden] → 4·hidden → out` with an exact GELU between.
struct Merger {
    norm: Norm,
    /// Whether the norm runs over the 4 concatenated patches (DeepStack) or each patch.
    post_shuffle: bool,
    fc1: Linear,
    fc2: Linear,
}

impl Merger {
    fn forward(&self, x: &Tensor, unit: usize) -> candle_core::Result<Tensor> {
        let wide = x.dim(D::Minus1)? * unit;
        let x = if self.post_shuffle {
            self.norm.forward(&x.reshape(((), wide))?)?
        } else {
            self.norm.forward(x)?.reshape(((), wide))?
        };
        self.fc2.forward(&self.fc1.forward(&x)?.gelu_erf()?)
    }
}

/// A vision tower of either architecture (frozen in training: plain tensors).
pub struct VisionTower {
    arch: Arch,
    cfg: VisionConfig,
    patch_embed: Linear,
    pos_embed: Option<Tensor>,
    blocks: Vec<Block>,
    merger: Merger,
    deepstack: Vec<Merger>,
    rope_theta: f64,
}

impl VisionTower {
    /// Build from the checkpoint's `visual.*` tensors.
    pub fn load(w: &Weights, cfg: &VisionConfig, arch: Arch) -> Result<Self> {
        let h = cfg.hidden_size;
        let patch_dim = cfg.in_channels * cfg.temporal_patch_size * cfg.patch_size * cfg.patch_size;
        let conv = w.get(
            "visual.patch_embed.proj.weight",
            &[h, cfg.in_channels, cfg.temporal_patch_size, cfg.patch_size, cfg.patch_size],
        )?;
        let bias = match arch {
            Arch::Qwen3Vl => Some(w.get("visual.patch_embed.proj.bias", &[h])?),
            Arch::Qwen25Vl => None,
        };
        let mut patch_embed = Linear::from_tensors(conv.reshape((h, patch_dim))?, bias);
        patch_embed.kernel = Some([cfg.in_channels, cfg.temporal_patch_size, cfg.patch_size, cfg.patch_size]);
        let pos_embed = match arch {
            Arch::Qwen3Vl => Some(w.get("visual.pos_embed.weight", &[cfg.num_position_embeddings, h])?),
            Arch::Qwen25Vl => None,
        };
        let mut blocks = Vec::with_capacity(cfg.depth);
        for i in 0..cfg.depth {
            let p = format!("visual.blocks.{i}");
            let norm = |n: &str| -> Result<Norm> {
                Ok(match arch {
                    Arch::Qwen3Vl => Norm::Layer(LayerNorm::load(w, &format!("{p}.{n}"), h, 1e-6)?),
                    Arch::Qwen25Vl => Norm::Rms(RmsNorm::load(w, &format!("{p}.{n}"), h, 1e-6)?),
                })
            };
            let mlp = match arch {
                Arch::Qwen3Vl => Mlp::Plain {
                    fc1: Linear::load(w, &format!("{p}.mlp.linear_fc1"), cfg.intermediate_size, h, true)?,
                    fc2: Linear::load(w, &format!("{p}.mlp.linear_fc2"), h, cfg.intermediate_size, true)?,
                },
                Arch::Qwen25Vl => Mlp::Gated {
                    gate: Linear::load(w, &format!("{p}.mlp.gate_proj"), cfg.intermediate_size, h, true)?,
                    up: Linear::load(w, &format!("{p}.mlp.up_proj"), cfg.intermediate_size, h, true)?,
                    down: Linear::load(w, &format!("{p}.mlp.down_proj"), h, cfg.intermediate_size, true)?,
                },
            };
            blocks.push(Block {
                norm1: norm("norm1")?,
                norm2: norm("norm2")?,
                qkv: Linear::load(w, &format!("{p}.attn.qkv"), 3 * h, h, true)?,
                proj: Linear::load(w, &format!("{p}.attn.proj"), h, h, true)?,
                mlp,
            });
        }
        let unit = cfg.spatial_merge_size * cfg.spatial_merge_size;
        let wide = h * unit;
        let merger = match arch {
            Arch::Qwen3Vl => load_merger(w, "visual.merger", h, wide, cfg.out_hidden_size, false)?,
            Arch::Qwen25Vl => Merger {
                norm: Norm::Rms(RmsNorm::load(w, "visual.merger.ln_q", h, 1e-6)?),
                post_shuffle: false,
                fc1: Linear::load(w, "visual.merger.mlp.0", wide, wide, true)?,
                fc2: Linear::load(w, "visual.merger.mlp.2", cfg.out_hidden_size, wide, true)?,
            },
        };
        let deepstack = (0..cfg.deepstack_visual_indexes.len())
            .map(|j| {
                load_merger(
                    w,
                    &format!("visual.deepstack_merger_list.{j}"),
                    h,
                    wide,
                    cfg.out_hidden_size,
                    true,
                )
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(VisionTower {
            arch,
            cfg: cfg.clone(),
            patch_embed,
            pos_embed,
            blocks,
            merger,
            deepstack,
            rope_theta: cfg.rope_theta,
        })
    }

    /// Run the tower on `pixel_values` `[N, C·T·p·p]` (patches of all images, in merge
    /// order, as [`crate::policy::qwen_vl::processor`] makes them) with each image's `(t, h, w)` patch grid.
    pub fn forward(&self, pixel_values: &Tensor, grids: &[[usize; 3]]) -> Result<VisionOutput> {
        let m = self.cfg.spatial_merge_size;
        let unit = m * m;
        let n: usize = grids.iter().map(|g| g[0] * g[1] * g[2]).sum();
        if pixel_values.dim(0)? != n {
            bail!("{} patches for image grids that hold {n}", pixel_values.dim(0)?);
        }
        for g in grids {
            if g[1] % m != 0 || g[2] % m != 0 {
                bail!("an image grid of {}×{} patches is not a multiple of the merge size {m}", g[1], g[2]);
            }
        }
        let dtype = self.patch_embed.weight.dtype();
        let mut x = self.patch_embed.forward(&pixel_values.to_dtype(dtype)?)?;
        let positions = vision_patch_positions(grids, m);
        if let Some(table) = &self.pos_embed {
            x = (x + self.interpolated_positions(table, grids)?)?;
        }
        let head_dim = self.cfg.hidden_size / self.cfg.num_heads;
        // f32 tables, never rounded to the model's dtype: transformers applies the vision
        // rotary embedding in f32 with f32 tables
        let (cos, sin) = vision_cos_sin(&positions, head_dim, self.rope_theta, DType::F32, x.device())?;
        let full: Vec<(usize, usize)> =
            segments(grids.iter().flat_map(|g| std::iter::repeat_n(g[1] * g[2], g[0])));

        // Qwen2.5-VL: reorder merge units window by window, so a window is a contiguous run.
        let (order, windows) = match self.arch {
            Arch::Qwen25Vl => {
                let (order, lens) = window_order(grids, m, self.cfg.window_size / m / self.cfg.patch_size);
                let idx = unit_index(&order, unit, x.device())?;
                x = x.index_select(&idx, 0)?;
                (Some(order), segments(lens.into_iter().map(|l| l * unit)))
            }
            Arch::Qwen3Vl => (None, Vec::new()),
        };
        let (cos, sin) = match &order {
            Some(o) => {
                let idx = unit_index(o, unit, x.device())?;
                (cos.index_select(&idx, 0)?, sin.index_select(&idx, 0)?)
            }
            None => (cos, sin),
        };

        // RoPE in f32 (as transformers does), the tables shaped once for every block
        let (cos, sin) = (cos.unsqueeze(1)?, sin.unsqueeze(1)?);
        let mut deepstack = Vec::new();
        for (i, block) in self.blocks.iter().enumerate() {
            let segs = if order.is_some() && !self.cfg.fullatt_block_indexes.contains(&i) {
                &windows
            } else {
                &full
            };
            x = self.block(block, &x, &cos, &sin, segs)?;
            if let Some(j) = self.cfg.deepstack_visual_indexes.iter().position(|&d| d == i) {
                deepstack.push(self.deepstack[j].forward(&x, unit)?);
            }
        }
        let mut embeds = self.merger.forward(&x, unit)?;
        if let Some(o) = &order {
            // back to raster order of merge units
            let mut inverse = vec![0u32; o.len()];
            for (k, &u) in o.iter().enumerate() {
                inverse[u] = k as u32;
            }
            let idx = Tensor::new(inverse, embeds.device())?;
            embeds = embeds.index_select(&idx, 0)?;
        }
        Ok(VisionOutput { embeds, deepstack })
    }

    fn block(
        &self,
        b: &Block,
        x: &Tensor,
        cos: &Tensor,
        sin: &Tensor,
        segs: &[(usize, usize)],
    ) -> Result<Tensor> {
        let (n, h) = x.dims2()?;
        let heads = self.cfg.num_heads;
        let hd = h / heads;
        let qkv = b.qkv.forward(&b.norm1.forward(x)?)?.reshape((n, 3, heads, hd))?;
        let rope = |t: Tensor| -> candle_core::Result<Tensor> {
            apply_rope(&t.to_dtype(candle_core::DType::F32)?, cos, sin)?.to_dtype(x.dtype())
        };
        let q = rope(qkv.narrow(1, 0, 1)?.squeeze(1)?)?;
        let k = rope(qkv.narrow(1, 1, 1)?.squeeze(1)?)?;
        let v = qkv.narrow(1, 2, 1)?.squeeze(1)?;
        let scale = (hd as f64).powf(-0.5);
        let mut outs = Vec::new();
        // Consecutive segments of one length (the images of one size, a row of full
        // windows) attend as one batch: one attention call where there were as many as images.
        for (start, count, len) in equal_runs(segs) {
            let part = |t: &Tensor| -> candle_core::Result<Tensor> {
                t.narrow(0, start, count * len)?.reshape((count, len, heads, hd))?.transpose(1, 2)
            };
            let o = attention(&part(&q)?, &part(&k)?, &part(&v)?, None, scale)?;
            outs.push(o.transpose(1, 2)?.reshape((count * len, h))?);
        }
        let attn = b.proj.forward(&Tensor::cat(&outs, 0)?)?;
        let x = (x + attn)?;
        let y = b.norm2.forward(&x)?;
        let y = match &b.mlp {
            Mlp::Plain { fc1, fc2 } => fc2.forward(&activate(&fc1.forward(&y)?, &self.cfg.hidden_act)?)?,
            Mlp::Gated { gate, up, down } => {
                let (g, u) = (gate.forward(&y)?, up.forward(&y)?);
                let h = if self.cfg.hidden_act == "silu" {
                    activation::swiglu(&g, &u)?
                } else {
                    (activate(&g, &self.cfg.hidden_act)? * u)?
                };
                down.forward(&h)?
            }
        };
        Ok((x + y)?)
    }

    /// Qwen3-VL's learned positions, bilinearly resampled (align-corners) from the square
    /// table to each image's patch grid, in patch order: `[N, hidden]`.
    fn interpolated_positions(&self, table: &Tensor, grids: &[[usize; 3]]) -> Result<Tensor> {
        let side = (self.cfg.num_position_embeddings as f64).sqrt() as usize;
        let m = self.cfg.spatial_merge_size;
        let taps = |i: usize, size: usize| -> [(usize, f32); 2] {
            let src = i as f32 * (side - 1) as f32 / (size.max(2) - 1) as f32;
            let lo = src.floor();
            let frac = src - lo;
            let lo = lo as usize;
            [(lo.min(side - 1), 1.0 - frac), ((lo + 1).min(side - 1), frac)]
        };
        let mut idx: [Vec<u32>; 4] = Default::default();
        let mut wts: [Vec<f32>; 4] = Default::default();
        for (r, c) in vision_patch_positions(grids, m)
            .into_iter()
            .zip(grids.iter().flat_map(|g| std::iter::repeat_n((g[1], g[2]), g[0] * g[1] * g[2])))
        {
            let ((row, col), (gh, gw)) = (r, c);
            let (hs, ws) = (taps(row, gh), taps(col, gw));
            for (k, (a, b)) in [(0, 0), (0, 1), (1, 0), (1, 1)].into_iter().enumerate() {
                idx[k].push((hs[a].0 * side + ws[b].0) as u32);
                wts[k].push(hs[a].1 * ws[b].1);
            }
        }
        let dev = table.device();
        let mut sum: Option<Tensor> = None;
        for k in 0..4 {
            let n = idx[k].len();
            // in f32 and rounded once at the end, as transformers (its weights are f32)
            let rows = table.index_select(&Tensor::new(idx[k].as_slice(), dev)?, 0)?.to_dtype(DType::F32)?;
            let w = Tensor::from_vec(std::mem::take(&mut wts[k]), (n, 1), dev)?;
            let term = rows.broadcast_mul(&w)?;
            sum = Some(match sum {
                None => term,
                Some(s) => (s + term)?,
            });
        }
        Ok(sum.expect("four taps").to_dtype(table.dtype())?)
    }
}

fn load_merger(w: &Weights, p: &str, h: usize, wide: usize, out: usize, post: bool) -> Result<Merger> {
    Ok(Merger {
        norm: Norm::Layer(LayerNorm::load(w, &format!("{p}.norm"), if post { wide } else { h }, 1e-6)?),
        post_shuffle: post,
        fc1: Linear::load(w, &format!("{p}.linear_fc1"), wide, wide, true)?,
        fc2: Linear::load(w, &format!("{p}.linear_fc2"), out, wide, true)?,
    })
}

impl VisionTower {
    /// Every linear layer of the tower, with its name under the tower (`patch_embed.proj`,
    /// the patch embedding, a convolution in transformers; `blocks.0.attn.qkv`,
    /// `merger.linear_fc1`), for adapters.
    pub fn linears(&self) -> Vec<(String, &Linear)> {
        let mut out = vec![("patch_embed.proj".to_string(), &self.patch_embed)];
        for (i, b) in self.blocks.iter().enumerate() {
            let p = |n: &str| format!("blocks.{i}.{n}");
            out.push((p("attn.qkv"), &b.qkv));
            out.push((p("attn.proj"), &b.proj));
            match &b.mlp {
                Mlp::Plain { fc1, fc2 } => {
                    out.extend([(p("mlp.linear_fc1"), fc1), (p("mlp.linear_fc2"), fc2)])
                }
                Mlp::Gated { gate, up, down } => out.extend([
                    (p("mlp.gate_proj"), gate),
                    (p("mlp.up_proj"), up),
                    (p("mlp.down_proj"), down),
                ]),
            }
        }
        let (fc1, fc2) = self.merger_names();
        out.push((format!("merger.{fc1}"), &self.merger.fc1));
        out.push((format!("merger.{fc2}"), &self.merger.fc2));
        for (j, m) in self.deepstack.iter().enumerate() {
            out.push((format!("deepstack_merger_list.{j}.linear_fc1"), &m.fc1));
            out.push((format!("deepstack_merger_list.{j}.linear_fc2"), &m.fc2));
        }
        out
    }

    /// [`Self::linears`], to attach adapters (the same names in the same order).
    pub fn linears_mut(&mut self) -> Vec<(String, &mut Linear)> {
        let (fc1, fc2) = self.merger_names();
        let mut out = vec![("patch_embed.proj".to_string(), &mut self.patch_embed)];
        for (i, b) in self.blocks.iter_mut().enumerate() {
            let p = |n: &str| format!("blocks.{i}.{n}");
            out.push((p("attn.qkv"), &mut b.qkv));
            out.push((p("attn.proj"), &mut b.proj));
            match &mut b.mlp {
                Mlp::Plain { fc1, fc2 } => {
                    out.extend([(p("mlp.linear_fc1"), fc1), (p("mlp.linear_fc2"), fc2)])
                }
                Mlp::Gated { gate, up, down } => out.extend([
                    (p("mlp.gate_proj"), gate),
                    (p("mlp.up_proj"), up),
                    (p("mlp.down_proj"), down),
                ]),
            }
        }
        out.push((format!("merger.{fc1}"), &mut self.merger.fc1));
        out.push((format!("merger.{fc2}"), &mut self.merger.fc2));
        for (j, m) in self.deepstack.iter_mut().enumerate() {
            out.push((format!("deepstack_merger_list.{j}.linear_fc1"), &mut m.fc1));
            out.push((format!("deepstack_merger_list.{j}.linear_fc2"), &mut m.fc2));
        }
        out
    }

    /// The merger MLP's module names: Qwen3-VL `linear_fc1/2`, Qwen2.5-VL `mlp.0/2`.
    fn merger_names(&self) -> (&'static str, &'static str) {
        match self.arch {
            Arch::Qwen3Vl => ("linear_fc1", "linear_fc2"),
            Arch::Qwen25Vl => ("mlp.0", "mlp.2"),
        }
    }

    /// Whether any layer of the tower carries an adapter (then its output depends on
    /// the adapters and is not cached).
    pub fn has_adapters(&self) -> bool {
        self.linears().iter().any(|(_, l)| l.lora.is_some())
    }
}

/// `segs` (contiguous `(start, len)` spans) grouped into runs of consecutive spans of one
/// length: `(start, count, len)`.
fn equal_runs(segs: &[(usize, usize)]) -> Vec<(usize, usize, usize)> {
    let mut runs: Vec<(usize, usize, usize)> = Vec::new();
    for &(start, len) in segs {
        match runs.last_mut() {
            Some((s, c, l)) if *l == len && *s + *c * *l == start => *c += 1,
            _ => runs.push((start, 1, len)),
        }
    }
    runs
}

/// `(start, len)` of consecutive runs with the given lengths.
fn segments(lens: impl Iterator<Item = usize>) -> Vec<(usize, usize)> {
    let mut start = 0;
    lens.filter(|&l| l > 0)
        .map(|l| {
            let s = (start, l);
            start += l;
            s
        })
        .collect()
}

/// Qwen2.5-VL's window order of merge units: for each frame, windows of `win × win` units
/// in row-major window order (edge windows cut short), units row-major inside a window.
/// Returns the new order (indices of units in raster order) and each window's unit count.
fn window_order(grids: &[[usize; 3]], merge: usize, win: usize) -> (Vec<usize>, Vec<usize>) {
    let (mut order, mut lens) = (Vec::new(), Vec::new());
    let mut base = 0;
    for &[t, gh, gw] in grids {
        let (h, w) = (gh / merge, gw / merge);
        for f in 0..t {
            for wr in (0..h).step_by(win) {
                for wc in (0..w).step_by(win) {
                    let before = order.len();
                    for r in wr..(wr + win).min(h) {
                        for c in wc..(wc + win).min(w) {
                            order.push(base + f * h * w + r * w + c);
                        }
                    }
                    lens.push(order.len() - before);
                }
            }
        }
        base += t * h * w;
    }
    (order, lens)
}

/// Patch-row indices that move whole merge units (`unit` patches each) into `order`.
fn unit_index(order: &[usize], unit: usize, dev: &candle_core::Device) -> Result<Tensor> {
    let idx: Vec<u32> = order.iter().flat_map(|&u| (0..unit).map(move |k| (u * unit + k) as u32)).collect();
    Ok(Tensor::new(idx, dev)?)
}
