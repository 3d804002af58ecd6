//! The layers the Qwen-VL models are built from, each with a backward wherever it is in a graph.
//!
//! candle's fused `rms_norm`, `layer_norm`, `softmax_last_dim` and `rope` have no backward
//! (docs/contributing/candle.md): a LoRA adapter behind them would silently get no
//! gradient. In a graph, RMSNorm, rope, attention and the LoRA layer run `crate::nn::fused`'s
//! kernels with a hand-written backward attached (`attach`), a frozen weight's product skips
//! the weight's gradient (`frozen_matmul`), and LayerNorm is composed from differentiable ops.
//! Outside a graph the fused kernels run alone.

use super::weights::Weights;
use crate::nn::attach::attach;
use crate::nn::fused::{fused_rms_norm, fused_rope, group_heads};
use crate::nn::{activation, fused, gemm};
use crate::policy::qwen_vl::train::lora::LoraAdapter;
use anyhow::Result;
use candle_core::{DType, Module, Tensor, D};

/// A linear layer over a frozen weight (a plain tensor, never a `Var`), with an optional
/// LoRA adapter: `y = x Wᵀ + b + scale · (x Aᵀ) Bᵀ`.
pub struct Linear {
    pub(crate) weight: Tensor,
    pub(crate) bias: Option<Tensor>,
    pub(crate) lora: Option<LoraAdapter>,
    /// The kernel's trailing dims `[C, T, p, p]` when transformers has this layer as a
    /// convolution over whole patches (the vision patch embedding): its PEFT adapter's A is
    /// saved in that shape, and B as `[out, r, 1, 1, 1]`.
    pub(crate) kernel: Option<[usize; 4]>,
}

impl Linear {
    /// `name.weight` of shape `[out, in]` (and `name.bias` when `bias`).
    pub fn load(w: &Weights, name: &str, out_dim: usize, in_dim: usize, bias: bool) -> Result<Self> {
        let weight = w.get(&format!("{name}.weight"), &[out_dim, in_dim])?;
        let bias = if bias { Some(w.get(&format!("{name}.bias"), &[out_dim])?) } else { None };
        Ok(Linear { weight, bias, lora: None, kernel: None })
    }

    /// The same layer over given tensors (tied heads, tests).
    pub fn from_tensors(weight: Tensor, bias: Option<Tensor>) -> Self {
        Linear { weight, bias, lora: None, kernel: None }
    }

    /// Output features.
    pub fn out_dim(&self) -> usize {
        self.weight.dims()[0]
    }

    /// Input features.
    pub fn in_dim(&self) -> usize {
        self.weight.dims()[1]
    }

    /// The weight a decoding step multiplies by, outside the graph: the layer's own
    /// without an adapter, the merged copy where this thread's forwards read merged layers;
    /// None where an adapter runs beside the layer.
    pub(crate) fn step_weight(&self) -> Result<Option<Tensor>> {
        match &self.lora {
            None => Ok(Some(self.weight.clone())),
            Some(l) => l.merged(),
        }
    }

    /// The frozen layer alone, adapters ignored (the KL reference's forward).
    pub fn forward_base(&self, x: &Tensor) -> Result<Tensor> {
        self.forward_over(x, &self.weight)
    }

    /// The layer over `weight` in place of its own (its adapter merged into it), bias
    /// included.
    fn forward_over(&self, x: &Tensor, weight: &Tensor) -> Result<Tensor> {
        let dims = x.dims().to_vec();
        let mut flat = x.reshape(((), self.in_dim()))?;
        // bf16/f16 with a bias on the CPU: product and bias in f32 and one rounding, as
        // PyTorch's linear (candle's CPU bf16 product widens to f32 anyway, and rounded
        // before the bias was added)
        if self.bias.is_some() && matches!(x.dtype(), DType::BF16 | DType::F16) && x.device().is_cpu() {
            flat = flat.to_dtype(DType::F32)?;
        }
        let w = in_dtype_of(weight, &flat)?;
        let mut y = if flat.track_op() && !w.track_op() {
            frozen_matmul(&flat, &w)?
        } else {
            gemm::product(&flat, &w.t()?)?
        };
        if let Some(b) = &self.bias {
            y = y.broadcast_add(&b.to_dtype(y.dtype())?)?;
        }
        let y = y.to_dtype(x.dtype())?;
        let mut out = dims;
        *out.last_mut().expect("a linear layer's input has a feature axis") = self.out_dim();
        Ok(y.reshape(out)?)
    }
}

impl Linear {
    /// The layer with its adapter (if any and switched on) as one fused graph node.
    /// `None` when the composed path must run: no adapter, or a weight trained whole.
    fn forward_fused(&self, x: &Tensor) -> Result<Option<Tensor>> {
        let Some(lora) = &self.lora else { return Ok(None) };
        let Some((a, b, mask)) = lora.parts(x)? else { return Ok(None) };
        if self.weight.track_op() {
            return Ok(None);
        }
        let w = in_dtype_of(&self.weight, x)?;
        let mut dims = x.dims().to_vec();
        let flat = x.reshape(((), self.in_dim()))?;
        let mask = mask.map(|m| m.reshape(flat.shape())).transpose()?;
        let y = fused::lora_linear(&flat, &w, self.bias.as_ref(), (&a, &b, lora.scale), mask)?;
        *dims.last_mut().expect("a linear layer's input has a feature axis") = self.out_dim();
        Ok(Some(y.reshape(dims)?))
    }
}

impl Module for Linear {
    fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        let merged =
            self.lora.as_ref().map(LoraAdapter::merged).transpose().map_err(candle_core::Error::wrap)?;
        if let Some(w) = merged.flatten() {
            return self.forward_over(x, &w).map_err(candle_core::Error::wrap);
        }
        if let Some(y) = self.forward_fused(x).map_err(candle_core::Error::wrap)? {
            return Ok(y);
        }
        let y = self.forward_base(x).map_err(candle_core::Error::wrap)?;
        match self.lora.as_ref().map(|l| l.delta(x)).transpose().map_err(candle_core::Error::wrap)?.flatten()
        {
            // the low-rank term is f32: added in f32 and rounded once, as peft does
            Some(d) if y.dtype() != d.dtype() => (y.to_dtype(d.dtype())? + d)?.to_dtype(y.dtype()),
            Some(d) => y + d,
            None => Ok(y),
        }
    }
}

/// `w` in `x`'s dtype (a fully trained weight is an f32 Var even in a bf16 model).
fn in_dtype_of(w: &Tensor, x: &Tensor) -> Result<Tensor> {
    Ok(if w.dtype() == x.dtype() { w.clone() } else { w.to_dtype(x.dtype())? })
}

/// `x Wᵀ` for a weight that gets no gradient, with `x` in the graph.
///
/// candle's matmul backward computes the gradient of both operands whatever they are, and
/// adds the weight's into a zero tensor of the weight's size: for a frozen base weight that
/// is a wasted matmul per layer and, summed over the model, a gradient buffer as large as the
/// model (the Qwen-VL LoRA update's backward and memory). Here the product is computed
/// outside the graph and attached to `x` by an op whose backward is `∂L/∂x = g W` alone.
pub fn frozen_matmul(x: &Tensor, w: &Tensor) -> candle_core::Result<Tensor> {
    let y = gemm::product(&x.detach(), &w.t()?)?;
    let w = w.clone();
    attach(x, y, "frozen-matmul", move |_, _, g| Ok(Some(gemm::product(g, &w)?)))
}

/// RMSNorm computed in f32, as transformers does: `w · x / sqrt(mean(x²) + eps)` (by
/// candle's kernel, `fused::fused_rms_norm`).
pub struct RmsNorm {
    pub(crate) weight: Tensor,
    eps: f64,
}

impl RmsNorm {
    /// `{name}.weight` `[dim]` from the checkpoint.
    pub fn load(w: &Weights, name: &str, dim: usize, eps: f64) -> Result<Self> {
        Ok(RmsNorm { weight: w.get(&format!("{name}.weight"), &[dim])?, eps })
    }

    /// The norm over `weight` in place of its own (a weight trained whole read detached,
    /// or a snapshot's frozen copy of it).
    pub(crate) fn forward_with(&self, x: &Tensor, weight: &Tensor) -> candle_core::Result<Tensor> {
        fused_rms_norm(x, weight, self.eps)
    }

    /// The epsilon under the square root.
    pub(crate) fn eps(&self) -> f64 {
        self.eps
    }
}

impl Module for RmsNorm {
    fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        fused_rms_norm(x, &self.weight, self.eps)
    }
}

/// LayerNorm with weight and bias, from mean and biased variance.
pub struct LayerNorm {
    weight: Tensor,
    bias: Tensor,
    eps: f64,
}

impl LayerNorm {
    /// `{name}.weight` and `{name}.bias` `[dim]` from the checkpoint.
    pub fn load(w: &Weights, name: &str, dim: usize, eps: f64) -> Result<Self> {
        Ok(LayerNorm {
            weight: w.get(&format!("{name}.weight"), &[dim])?,
            bias: w.get(&format!("{name}.bias"), &[dim])?,
            eps,
        })
    }
}

impl Module for LayerNorm {
    fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        if !x.track_op() {
            // outside a graph (the frozen vision tower): candle's fused kernel, f32 inside
            let (w, b) = (self.weight.to_dtype(x.dtype())?, self.bias.to_dtype(x.dtype())?);
            return candle_nn::ops::layer_norm(&x.contiguous()?, &w, &b, self.eps as f32);
        }
        let dtype = x.dtype();
        let x = x.to_dtype(DType::F32)?;
        let centred = x.broadcast_sub(&x.mean_keepdim(D::Minus1)?)?;
        let var = centred.sqr()?.mean_keepdim(D::Minus1)?;
        let y = centred.broadcast_div(&(var + self.eps)?.sqrt()?)?;
        y.to_dtype(dtype)?.broadcast_mul(&self.weight)?.broadcast_add(&self.bias)
    }
}

/// The activations the configs name.
pub fn activate(x: &Tensor, act: &str) -> candle_core::Result<Tensor> {
    match act {
        "silu" => activation::silu(x),
        "gelu_pytorch_tanh" => activation::gelu_tanh(x),
        "quick_gelu" => x.broadcast_mul(&candle_nn::ops::sigmoid(&(x * 1.702)?)?),
        _ => x.gelu_erf(),
    }
}

/// `[-x₂, x₁]` over the last axis (the rotation RoPE pairs with).
pub fn rotate_half(x: &Tensor) -> candle_core::Result<Tensor> {
    let half = x.dim(D::Minus1)? / 2;
    let x1 = x.narrow(D::Minus1, 0, half)?;
    let x2 = x.narrow(D::Minus1, half, half)?;
    Tensor::cat(&[&x2.neg()?, &x1], D::Minus1)
}

/// `x · cos + rotate_half(x) · sin`, broadcasting `cos`/`sin` over the heads.
pub fn apply_rope(x: &Tensor, cos: &Tensor, sin: &Tensor) -> candle_core::Result<Tensor> {
    match fused_rope(x, cos, sin)? {
        Some(y) => Ok(y),
        None => x.broadcast_mul(cos)? + rotate_half(x)?.broadcast_mul(sin)?,
    }
}

/// Softmax attention: `q` `[B, H, T, D]`, `k`/`v` `[B, Hkv, S, D]` (each key/value head
/// shared by `H / Hkv` consecutive query heads), an optional additive `mask` `[T, S]`. The
/// softmax is f32 inside, as transformers' eager path. In a graph the whole attention is
/// one node with its own backward (`fused::attention_node`), which keeps only the
/// probabilities of the `[B, H, T, S]` intermediates.
pub fn attention(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    mask: Option<&Tensor>,
    scale: f64,
) -> candle_core::Result<Tensor> {
    let (p, o) = attention_parts(&q.detach(), &k.detach(), &v.detach(), mask, scale)?;
    if !(q.track_op() || k.track_op() || v.track_op()) {
        return Ok(o);
    }
    fused::attention_node(q, k, v, p, o, scale)
}

/// Key/value heads repeated to `h` query heads (grouped-query attention).
pub fn repeat_kv(t: &Tensor, h: usize) -> candle_core::Result<Tensor> {
    let (b, hkv, s, d) = t.dims4()?;
    if hkv == h {
        return Ok(t.clone());
    }
    t.unsqueeze(2)?.expand((b, hkv, h / hkv, s, d))?.reshape((b, h, s, d))
}

/// The attention's probabilities `[B, Hkv, (H / Hkv) · T, S]` (query heads grouped, see
/// [`group_heads`](crate::nn::fused::group_heads)) and its output `[B, H, T, D]`, outside any graph.
fn attention_parts(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    mask: Option<&Tensor>,
    scale: f64,
) -> candle_core::Result<(Tensor, Tensor)> {
    let (b, h, t, d) = q.dims4()?;
    let hkv = k.dim(1)?;
    let scores = group_heads(q, hkv)?.matmul(&matmul_operand(k)?.t()?)?;
    let p = activation::scaled_softmax(&scores, scale, mask)?;
    let o = p.matmul(&matmul_operand(v)?)?.reshape((b, h, t, d))?;
    Ok((p, o))
}

/// `t` `[B, Hkv, S, D]` as a product's operand: a view of a longer cache buffer (rows of
/// `D` contiguous, one stride between heads) is taken as it is when `B` is 1, which the
/// products accept; anything else is made contiguous. A decoding step then reads the
/// cache in place instead of copying it.
fn matmul_operand(t: &Tensor) -> candle_core::Result<Tensor> {
    let st = t.stride();
    if t.is_contiguous() || (t.dim(0)? == 1 && st[3] == 1 && st[2] == t.dim(3)?) {
        Ok(t.clone())
    } else {
        t.contiguous()
    }
}

/// The additive causal mask of `t` new queries over `s` keys (the first `s - t` cached):
/// 0 where query `i` may see key `j` (`j <= s - t + i`), −∞ elsewhere; `[t, s]`.
pub fn causal_mask(t: usize, s: usize, dtype: DType, device: &candle_core::Device) -> Result<Tensor> {
    let past = s - t;
    let data: Vec<f32> = (0..t)
        .flat_map(|i| (0..s).map(move |j| if j <= past + i { 0.0 } else { f32::NEG_INFINITY }))
        .collect();
    Ok(Tensor::from_vec(data, (t, s), device)?.to_dtype(dtype)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{Device, Var};

    #[test]
    fn frozen_matmul_equals_matmul_and_gives_only_the_input_gradient() {
        let dev = Device::Cpu;
        let x = Var::from_tensor(&Tensor::randn(0f32, 1.0, (5, 7), &dev).unwrap()).unwrap();
        let w = Tensor::randn(0f32, 1.0, (3, 7), &dev).unwrap();
        let c = Tensor::randn(0f32, 1.0, (5, 3), &dev).unwrap();
        let plain = x.matmul(&w.t().unwrap()).unwrap();
        let frozen = frozen_matmul(&x, &w).unwrap();
        // within rounding: a few rows by a plain weight run `nn::few_rows`, not candle's kernel
        let diff = (&frozen - &plain).unwrap().abs().unwrap().max_all().unwrap().to_scalar::<f32>().unwrap();
        assert!(diff < 1e-5, "{diff}");
        let g_plain = (plain * &c).unwrap().sum_all().unwrap().backward().unwrap();
        let g_frozen = (frozen * &c).unwrap().sum_all().unwrap().backward().unwrap();
        let gx = |g: &candle_core::backprop::GradStore| g.get(&x).unwrap().to_vec2::<f32>().unwrap();
        let (a, b) = (gx(&g_plain), gx(&g_frozen));
        for (ra, rb) in a.iter().zip(&b) {
            for (p, q) in ra.iter().zip(rb) {
                assert!((p - q).abs() < 1e-5, "{a:?} vs {b:?}");
            }
        }
        // candle's matmul also computes a gradient for `wᵀ` (stored under that view's id); the
        // frozen op computes none.
        let n = |g: &candle_core::backprop::GradStore| g.get_ids().count();
        assert_eq!(n(&g_plain), n(&g_frozen) + 1, "plain {}, frozen {}", n(&g_plain), n(&g_frozen));
    }
}
