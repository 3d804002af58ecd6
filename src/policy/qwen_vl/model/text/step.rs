//! A decoding step's layers: one new token per row, with per-answer caches
//! ([`TextModel::decode`]) or a chunk's window slots (`window.rs`). The layer's small steps
//! run as candle's ops one by one, or fused (`decode_kernels`, [`crate::nn::decode`]): the
//! residual sum with the next norm, the query's and key's norms with their rotation,
//! SwiGLU, the attention.
//!
//! A layer takes its input already normed (`y`) beside the residual stream (`x`) and hands
//! the next layer the same pair, so the sum that ends a layer and the norm that starts the
//! next are one kernel when fused; the last layer's pair ends in the model's final norm.

use super::{Layer, LayerDims, TextModel};
use crate::nn::decode::layer::HeadsIn;
use crate::nn::fused::{fused_rms_norm, RopeHalves};
use crate::nn::{activation, decode, gemm};
use crate::policy::qwen_vl::model::kv_cache::KvCache;
use crate::policy::qwen_vl::model::nn::{attention, Linear, RmsNorm};
use crate::policy::qwen_vl::settings::DecodeKernels;
use anyhow::{bail, Result};
use candle_core::{Module, Tensor};

/// A norm's weight and epsilon, as a decoding step applies it.
pub(super) struct Norm {
    weight: Tensor,
    eps: f64,
}

impl Norm {
    fn of(n: &RmsNorm) -> Self {
        Norm { weight: n.weight.clone(), eps: n.eps() }
    }
}

impl TextModel {
    /// Final hidden states `[B, H]` of one new token per row (`ids`, rotary tables `cos`/`sin`
    /// `[B, D]`), row `i` attending to its own cache `caches[i]` and appended to it.
    ///
    /// The linear layers run on exactly `rows` rows (the real ones, then copies of the
    /// first): a product's kernel, and so its rounding, depends on the row count, never on
    /// the other rows' values, so a row's result is the same whichever states share the
    /// step. Where no count up to `rows` changes the rounding ([`gemm::padded_rows`]: f32
    /// on a CPU, up to 8 rows) the real rows run alone. Attention runs per row over its own
    /// cache, with `kernels`' attention.
    pub fn decode(
        &self,
        ids: &Tensor,
        cos: &Tensor,
        sin: &Tensor,
        caches: &mut [&mut KvCache],
        rows: usize,
        kernels: DecodeKernels,
    ) -> Result<Tensor> {
        let b = ids.dim(0)?;
        if b == 0 || b > rows || caches.len() != b {
            bail!("decoding {b} rows with {} caches in steps of {rows} rows", caches.len());
        }
        let h = self.cfg.hidden_size;
        let rows = gemm::padded_rows(b, rows, self.invariant_rows(kernels));
        // padding rows repeat the first token (on the device: the ids may not be read yet)
        let padded = match rows - b {
            0 => ids.clone(),
            n => Tensor::cat(&[ids.clone(), ids.narrow(0, 0, 1)?.broadcast_as(n)?.contiguous()?], 0)?,
        };
        let x = self.embed(&padded.unsqueeze(1)?)?.reshape((rows, h))?;
        let (d, hd) = (self.dims(), self.cfg.head_dim);
        let rope = RopeHalves::new(&cos.reshape((b, 1, 1, hd))?, &sin.reshape((b, 1, 1, hd))?, x.dtype())?;
        for c in caches.iter_mut() {
            c.ensure_layers(self.layers.len());
            c.limit_to(self.cfg.max_position_embeddings);
        }
        // the fused kernel's length of each row with the step's token, uploaded once a step
        let lens = match kernels {
            DecodeKernels::Eager => None,
            DecodeKernels::Fused => Some(
                caches
                    .iter()
                    .map(|c| Tensor::new(&[c.len() as u32 + 1], x.device()))
                    .collect::<candle_core::Result<Vec<_>>>()?,
            ),
        };
        let (mut x, mut y) = self.first_norm(x)?;
        for (i, layer) in self.layers.iter().enumerate() {
            let step = Step { dims: d, layer, rope: &rope, kernels, next: self.norm_after(i) };
            let (q, k, v) = step.project(&y, b)?;
            let hd = d.head_dim;
            let scale = (hd as f64).powf(-0.5);
            let mut out = Vec::with_capacity(rows);
            for (r, cache) in caches.iter_mut().enumerate() {
                let (kr, vr) = cache.append(i, &k.narrow(0, r, 1)?, &v.narrow(0, r, 1)?)?;
                let qr = q.narrow(0, r, 1)?;
                let a = match &lens {
                    None => attention(&qr, &kr, &vr, None, scale)?,
                    Some(lens) => decode::attention(&qr.squeeze(2)?, &kr, &vr, &lens[r], scale)?,
                };
                out.push(a.reshape((1, d.heads * hd))?);
            }
            // the padding rows' attention output: any values do (rows never mix)
            let pad = out[0].clone();
            out.resize(rows, pad);
            (x, y) = step.finish(&x, &Tensor::cat(&out, 0)?)?;
        }
        Ok(y.narrow(0, 0, b)?)
    }

    /// The most rows a decoding step with `kernels` runs as they are, each row's bits the
    /// same whatever the count: [`gemm::invariant_rows`] with candle's products, the fused
    /// products' [`decode::rows::invariant_rows`] (16 on CUDA) with the fused kernels.
    pub fn invariant_rows(&self, kernels: DecodeKernels) -> usize {
        let device = self.embed.device();
        match kernels {
            DecodeKernels::Eager => gemm::invariant_rows(device, self.dtype()),
            DecodeKernels::Fused => decode::rows::invariant_rows(device, self.dtype()),
        }
    }

    /// The residual stream `x` and `x` under the first layer's input norm.
    pub(super) fn first_norm(&self, x: Tensor) -> Result<(Tensor, Tensor)> {
        let y = self.layers[0].input_norm.forward(&x)?;
        Ok((x, y))
    }

    /// The norm that follows layer `i`: the next layer's input norm, or after the last the
    /// model's final norm (its weight read as the pass and the switch ask).
    pub(super) fn norm_after(&self, i: usize) -> Norm {
        match self.layers.get(i + 1) {
            Some(next) => Norm::of(&next.input_norm),
            None => Norm {
                weight: self.frozen_whole(&self.norm.weight).unwrap_or_else(|| self.norm.weight.clone()),
                eps: self.norm.eps(),
            },
        }
    }
}

/// One layer of a decoding step: its weights, the rows' rotary tables, the kernels, and
/// the norm its output feeds.
pub(super) struct Step<'a> {
    pub(super) dims: LayerDims,
    pub(super) layer: &'a Layer,
    pub(super) rope: &'a RopeHalves,
    pub(super) kernels: DecodeKernels,
    pub(super) next: Norm,
}

impl Step<'_> {
    /// The rotated queries, keys and values `[B, n, 1, D]` of the first `b` rows of `y`
    /// `[M, H]` (normed; the products run on all `M`), the rotary tables' rows being `b`.
    pub(super) fn project(&self, y: &Tensor, b: usize) -> Result<(Tensor, Tensor, Tensor)> {
        let (l, hd) = (self.layer, self.dims.head_dim);
        if let Some(split) = self.merged_split(y, b)? {
            return Ok(split);
        }
        let heads = |lin: &Linear, n: usize| -> Result<Tensor> {
            Ok(self.linear(lin, y)?.narrow(0, 0, b)?.reshape((b, n, 1, hd))?)
        };
        let (q, k) = (heads(&l.q, self.dims.heads)?, heads(&l.k, self.dims.kv_heads)?);
        let v = heads(&l.v, self.dims.kv_heads)?;
        let (q, k) = match (&l.q_norm, &l.k_norm, self.kernels) {
            (Some(qn), Some(kn), DecodeKernels::Fused) => {
                let (c, s) = self.rope.halves();
                let (c, s) = (c.reshape((b, ()))?, s.reshape((b, ()))?);
                let normed = |x: &Tensor, n: &RmsNorm| -> Result<Tensor> {
                    let (_, heads, _, _) = x.dims4()?;
                    let y =
                        decode::layer::norm_rope(&x.reshape((b, heads, hd))?, &n.weight, n.eps(), &c, &s)?;
                    Ok(y.reshape((b, heads, 1, hd))?)
                };
                (normed(&q, qn)?, normed(&k, kn)?)
            }
            (Some(qn), Some(kn), DecodeKernels::Eager) => {
                (self.rope.apply(&qn.forward(&q)?)?, self.rope.apply(&kn.forward(&k)?)?)
            }
            _ => (self.rope.apply(&q)?, self.rope.apply(&k)?),
        };
        Ok((q, k, v))
    }

    /// With the fused kernels and the layer's q/k/v merged into one weight
    /// ([`crate::policy::qwen_vl::model::QwenVl::merge_adapters`]): one product and one
    /// kernel for the heads (bias, norms, rotation). None otherwise.
    fn merged_split(&self, y: &Tensor, b: usize) -> Result<Option<(Tensor, Tensor, Tensor)>> {
        let l = self.layer;
        if self.kernels != DecodeKernels::Fused {
            return Ok(None);
        }
        let Some((w, bias)) = l.q.lora.as_ref().and_then(|a| a.merged_group()) else { return Ok(None) };
        let norms = match (&l.q_norm, &l.k_norm) {
            (Some(qn), Some(kn)) if qn.eps() == kn.eps() => Some((&qn.weight, &kn.weight, qn.eps())),
            (None, None) => None,
            _ => return Ok(None),
        };
        let qkv = self.product(y, &w, None)?;
        let (c, s) = self.rope.halves();
        let (c, s) = (c.reshape((b, ()))?, s.reshape((b, ()))?);
        let d = self.dims;
        let inputs = HeadsIn {
            heads: (d.heads, d.kv_heads, d.head_dim),
            bias: bias.as_ref(),
            norms,
            tables: (&c, &s),
        };
        let (q, k, v) = decode::layer::split_heads(&qkv, b, inputs)?;
        Ok(Some((q.unsqueeze(2)?, k.unsqueeze(2)?, v.unsqueeze(2)?)))
    }

    /// The rest of the layer after attention (`a` `[M, heads · D]`): the output projection,
    /// the residual, the MLP, the residual; the new residual stream and it under the next
    /// norm.
    pub(super) fn finish(&self, x: &Tensor, a: &Tensor) -> Result<(Tensor, Tensor)> {
        let l = self.layer;
        let (x, y) = self.add_norm(x, &self.linear(&l.o, a)?, &Norm::of(&l.post_norm))?;
        let merged = match self.kernels {
            DecodeKernels::Fused => l.gate.lora.as_ref().and_then(|a| a.merged_group()),
            DecodeKernels::Eager => None,
        };
        let act = match (self.kernels, merged) {
            // gate and up merged into one weight: one product, its halves' SwiGLU
            (_, Some((w, bias))) => decode::layer::swiglu_halves(&self.product(&y, &w, bias.as_ref())?)?,
            (DecodeKernels::Fused, None) => {
                decode::layer::swiglu(&self.linear(&l.gate, &y)?, &self.linear(&l.up, &y)?)?
            }
            (DecodeKernels::Eager, None) => activation::swiglu(&l.gate.forward(&y)?, &l.up.forward(&y)?)?,
        };
        self.add_norm(&x, &self.linear(&l.down, &act)?, &self.next)
    }

    /// `lin` on `y`: with the fused kernels and the layer's weight outside the graph (no
    /// adapter, or merged into it), [`Step::product`]; the layer's own forward otherwise
    /// (with the fused kernels on rows that keep each row's rounding,
    /// [`decode::rows::fallback`]).
    fn linear(&self, lin: &Linear, y: &Tensor) -> Result<Tensor> {
        match self.kernels {
            DecodeKernels::Eager => Ok(lin.forward(y)?),
            DecodeKernels::Fused => match lin.step_weight()? {
                Some(w) => self.product(y, &w, lin.bias.as_ref()),
                None => Ok(decode::rows::fallback(y, |y| lin.forward(y))?),
            },
        }
    }

    /// `y Wᵀ + b`: with the fused kernels one kernel for a few rows
    /// ([`decode::rows::product`]) where it takes them, else candle's product (on rows that
    /// keep each row's rounding, [`decode::rows::fallback`]); candle's product with eager ones.
    fn product(&self, y: &Tensor, w: &Tensor, bias: Option<&Tensor>) -> Result<Tensor> {
        let plain = |y: &Tensor| Linear::from_tensors(w.clone(), bias.cloned()).forward_base(y);
        match self.kernels {
            DecodeKernels::Eager => plain(y),
            DecodeKernels::Fused if decode::rows::takes(y, w, bias) => Ok(decode::rows::product(y, w, bias)?),
            DecodeKernels::Fused => {
                Ok(decode::rows::fallback(y, |y| plain(y).map_err(candle_core::Error::wrap))?)
            }
        }
    }

    /// `x + delta` and it normed by `norm`.
    fn add_norm(&self, x: &Tensor, delta: &Tensor, norm: &Norm) -> Result<(Tensor, Tensor)> {
        Ok(match self.kernels {
            DecodeKernels::Eager => {
                let s = (x + delta)?;
                let y = fused_rms_norm(&s, &norm.weight, norm.eps)?;
                (s, y)
            }
            DecodeKernels::Fused => decode::layer::add_rms_norm(x, delta, &norm.weight, norm.eps)?,
        })
    }
}
