//! The layers the Qwen-VL models are built from, written with differentiable ops only.
//!
//! candle's fused `rms_norm`, `layer_norm`, `softmax_last_dim` and `rope` have no backward
//! (`shared/CANDLE-TRAINING.md`): a LoRA adapter behind them would silently get no
//! gradient. Everything here is composed from ops that have one.

use super::lora::LoraAdapter;
use super::weights::Weights;
use anyhow::Result;
use candle_core::{DType, Module, Tensor, D};

/// A linear layer over a frozen weight (a plain tensor, never a `Var`), with an optional
/// LoRA adapter: `y = x Wᵀ + b + scale · (x Aᵀ) Bᵀ`.
pub struct Linear {
    pub(crate) weight: Tensor,
    pub(crate) bias: Option<Tensor>,
    pub(crate) lora: Option<LoraAdapter>,
}

impl Linear {
    /// `name.weight` of shape `[out, in]` (and `name.bias` when `bias`).
    pub fn load(w: &Weights, name: &str, out_dim: usize, in_dim: usize, bias: bool) -> Result<Self> {
        let weight = w.get(&format!("{name}.weight"), &[out_dim, in_dim])?;
        let bias = if bias { Some(w.get(&format!("{name}.bias"), &[out_dim])?) } else { None };
        Ok(Linear { weight, bias, lora: None })
    }

    /// The same layer over given tensors (tied heads, tests).
    pub fn from_tensors(weight: Tensor, bias: Option<Tensor>) -> Self {
        Linear { weight, bias, lora: None }
    }

    /// Output features.
    pub fn out_dim(&self) -> usize {
        self.weight.dims()[0]
    }

    /// Input features.
    pub fn in_dim(&self) -> usize {
        self.weight.dims()[1]
    }

    /// The frozen layer alone, adapters ignored (the KL reference's forward).
    pub fn forward_base(&self, x: &Tensor) -> Result<Tensor> {
        let dims = x.dims().to_vec();
        let flat = x.reshape(((), self.in_dim()))?;
        // a fully trained weight is an f32 Var even in a bf16 model
        let w = if self.weight.dtype() == x.dtype() {
            self.weight.clone()
        } else {
            self.weight.to_dtype(x.dtype())?
        };
        let mut y = flat.matmul(&w.t()?)?;
        if let Some(b) = &self.bias {
            y = y.broadcast_add(b)?;
        }
        let mut out = dims;
        *out.last_mut().expect("a linear layer's input has a feature axis") = self.out_dim();
        Ok(y.reshape(out)?)
    }
}

impl Module for Linear {
    fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        let y = self.forward_base(x).map_err(candle_core::Error::wrap)?;
        match self.lora.as_ref().map(|l| l.delta(x)).transpose().map_err(candle_core::Error::wrap)?.flatten()
        {
            Some(d) => y + d,
            None => Ok(y),
        }
    }
}

/// RMSNorm computed in f32, as transformers does: `w · x / sqrt(mean(x²) + eps)`.
pub struct RmsNorm {
    pub(crate) weight: Tensor,
    eps: f64,
}

impl RmsNorm {
    pub fn load(w: &Weights, name: &str, dim: usize, eps: f64) -> Result<Self> {
        Ok(RmsNorm { weight: w.get(&format!("{name}.weight"), &[dim])?, eps })
    }
}

impl Module for RmsNorm {
    fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        let dtype = x.dtype();
        let x = x.to_dtype(DType::F32)?;
        let ms = x.sqr()?.mean_keepdim(D::Minus1)?;
        let y = x.broadcast_div(&(ms + self.eps)?.sqrt()?)?;
        y.to_dtype(dtype)?.broadcast_mul(&self.weight.to_dtype(dtype)?)
    }
}

/// LayerNorm with weight and bias, from mean and biased variance.
pub struct LayerNorm {
    weight: Tensor,
    bias: Tensor,
    eps: f64,
}

impl LayerNorm {
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
        "silu" => x.silu(),
        "gelu_pytorch_tanh" => x.gelu(),
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
    x.broadcast_mul(cos)? + rotate_half(x)?.broadcast_mul(sin)?
}

/// Plain softmax attention: `q` `[B, H, T, D]`, `k`/`v` `[B, Hkv, S, D]` (key/value heads
/// repeated to `H`), an optional additive `mask` broadcast to `[B, H, T, S]`. The softmax
/// runs in f32 (as transformers' eager path) and is candle's composed, differentiable one.
pub fn attention(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    mask: Option<&Tensor>,
    scale: f64,
) -> candle_core::Result<Tensor> {
    let (b, h, _, d) = q.dims4()?;
    let hkv = k.dim(1)?;
    let (k, v) = if hkv == h {
        (k.clone(), v.clone())
    } else {
        let rep = h / hkv;
        let s = k.dim(2)?;
        let expand = |t: &Tensor| -> candle_core::Result<Tensor> {
            t.unsqueeze(2)?.expand((b, hkv, rep, s, d))?.reshape((b, h, s, d))
        };
        (expand(k)?, expand(v)?)
    };
    let mut scores = (q.contiguous()?.matmul(&k.t()?.contiguous()?)? * scale)?;
    if let Some(m) = mask {
        scores = scores.broadcast_add(m)?;
    }
    let dtype = scores.dtype();
    let p = candle_nn::ops::softmax(&scores.to_dtype(DType::F32)?, D::Minus1)?.to_dtype(dtype)?;
    p.matmul(&v.contiguous()?)
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
