//! candle's fused kernels forward, a backward of our own.
//!
//! candle's fused `softmax_last_dim`, `rms_norm` and `rope` have no backward: in a graph
//! they silently cut it (docs/contributing/candle.md). The softmax runs inside the fused
//! attention node; the LoRA layer is a node of its own too, for candle's backward cost
//! per node (see [`lora_linear`]). Their composed equivalents are
//! differentiable but launch a kernel per elementwise step and keep every intermediate for
//! backward, f32 copies included; on an H100 the Qwen3-VL-2B LoRA update's backward took
//! 5.5× PyTorch's and 2.6× its memory. Here the fused kernel computes the output outside
//! the graph and [`attach`] hangs it on the input with a hand-written backward: one kernel
//! (and one copy) forward, a few backward, and only the input and output kept. Outside a
//! graph (generation, the frozen vision tower) the fused kernel runs alone.

use candle_core::{DType, Result, Tensor, D};

use super::attach::{attach, attach2, attach3, Grads2, Grads3};

/// RMSNorm `w ⊙ x / sqrt(mean(x²) + eps)` over the last axis (f32 inside the kernel).
/// Backward, with `r = 1/sqrt(mean(x²) + eps)`, `n = x r`, `d = g ⊙ w`:
/// `∂x = r (d − n · mean(d ⊙ n))`, `∂w = Σ g ⊙ n` (only when `w` is trained).
pub fn fused_rms_norm(x: &Tensor, w: &Tensor, eps: f64) -> Result<Tensor> {
    let x = x.contiguous()?;
    let w = w.to_dtype(x.dtype())?;
    let y = candle_nn::ops::rms_norm(&x.detach(), &w.detach(), eps as f32)?;
    if !x.track_op() && !w.track_op() {
        return Ok(y);
    }
    attach2([&x, &w], y, "rms-norm", move |[x, w], g| rms_norm_grads(x, w, g, eps))
}

/// [`fused_rms_norm`]'s backward.
fn rms_norm_grads(x: &Tensor, w: &Tensor, g: &Tensor, eps: f64) -> Result<Grads2> {
    let (xf, gf, wf) = (x.to_dtype(DType::F32)?, g.to_dtype(DType::F32)?, w.to_dtype(DType::F32)?);
    let r = (xf.sqr()?.mean_keepdim(D::Minus1)? + eps)?.sqrt()?.recip()?;
    let n = xf.broadcast_mul(&r)?;
    let d = gf.broadcast_mul(&wf)?;
    let dot = (&d * &n)?.mean_keepdim(D::Minus1)?;
    let dx = (d - n.broadcast_mul(&dot)?)?.broadcast_mul(&r)?.to_dtype(x.dtype())?;
    let dw = if w.track_op() {
        let dim = w.dim(0)?;
        Some((gf * n)?.reshape(((), dim))?.sum(0)?.to_dtype(w.dtype())?)
    } else {
        None
    };
    Ok((x.track_op().then_some(dx), dw))
}

/// Rotary embedding `x cos + rotate_half(x) sin` by candle's kernel, for `x` `[B, H, T, D]`
/// with tables `[B, 1, T, D]` or `[1, 1, T, D]`, or `x` `[N, H, D]` with tables `[N, 1, D]`
/// (the vision tower), where the tables repeat their first half (all Qwen-VL tables do).
/// `None` for other shapes (the caller composes it). Backward: rotation by −θ.
pub fn fused_rope(x: &Tensor, cos: &Tensor, sin: &Tensor) -> Result<Option<Tensor>> {
    let d = x.dim(D::Minus1)?;
    let half = |t: &Tensor, keep: usize| -> Result<Tensor> {
        t.narrow(D::Minus1, 0, d / 2)?.to_dtype(x.dtype())?.reshape(keep)?.contiguous()
    };
    match (x.rank(), cos.dims()) {
        (4, &[b, 1, t, cd]) if cd == d && d % 2 == 0 && t == x.dim(2)? && (b == 1 || b == x.dim(0)?) => {
            Ok(Some(RopeHalves::new(cos, sin, x.dtype())?.apply(x)?))
        }
        (3, &[n, 1, cd]) if cd == d && d % 2 == 0 && n == x.dim(0)? => {
            let (c, s) =
                (half(cos, n * d / 2)?.reshape((n, d / 2))?, half(sin, n * d / 2)?.reshape((n, d / 2))?);
            let x4 = x.transpose(0, 1)?.unsqueeze(0)?; // [1, H, N, D]
            Ok(Some(rope4(&x4, c, s)?.squeeze(0)?.transpose(0, 1)?))
        }
        _ => Ok(None),
    }
}

/// Rotary tables `[B, 1, T, D]` (repeating their first half) cut to the half candle's
/// kernel reads, `[B, T, D/2]`, contiguous, in the rotated tensors' dtype. A decoding step
/// makes them once for all its layers' queries and keys: cut per rotation, they cost two
/// copies a rotation, four kernels a decoder layer.
pub struct RopeHalves {
    c: Tensor,
    s: Tensor,
}

impl RopeHalves {
    /// The halves of `cos` and `sin` `[B, 1, T, D]` for tensors of `dtype`.
    pub fn new(cos: &Tensor, sin: &Tensor, dtype: DType) -> Result<Self> {
        let (b, _, t, d) = cos.dims4()?;
        let half =
            |x: &Tensor| x.narrow(D::Minus1, 0, d / 2)?.to_dtype(dtype)?.contiguous()?.reshape((b, t, d / 2));
        Ok(RopeHalves { c: half(cos)?, s: half(sin)? })
    }

    /// The tables' first halves, `cos` and `sin` `[B, T, D/2]`.
    pub fn halves(&self) -> (&Tensor, &Tensor) {
        (&self.c, &self.s)
    }

    /// `x` `[B', H, T, D]` rotated (`B'` = `B`, or any when `B` is 1), by candle's kernel.
    pub fn apply(&self, x: &Tensor) -> Result<Tensor> {
        let (b, t, half) = self.c.dims3()?;
        let (xb, _, xt, xd) = x.dims4()?;
        if xt != t || xd != 2 * half || (b != xb && b != 1) {
            candle_core::bail!("rotary tables [{b}, {t}, {half}] for a tensor {:?}", x.dims());
        }
        if b == xb {
            return rope4(x, self.c.clone(), self.s.clone());
        }
        let full = (xb, t, half);
        rope4(x, self.c.broadcast_as(full)?.contiguous()?, self.s.broadcast_as(full)?.contiguous()?)
    }
}

/// candle's rope on `[B, H, T, D]` with half tables, attached with its inverse rotation.
fn rope4(x: &Tensor, c: Tensor, s: Tensor) -> Result<Tensor> {
    let x = x.contiguous()?;
    let y = candle_nn::rotary_emb::rope(&x.detach(), &c, &s)?;
    if !x.track_op() {
        return Ok(y);
    }
    let neg = s.neg()?;
    attach(&x, y, "rope", move |_, _, g| Ok(Some(candle_nn::rotary_emb::rope(&g.contiguous()?, &c, &neg)?)))
}

/// A frozen linear layer and its LoRA adapter as one graph node over `(x, A, B)`:
/// `y = x Wᵀ + bias + s · (x_d Aᵀ) Bᵀ`, with `x_d = x ⊙ mask` under dropout, else `x`.
/// `x` is `[N, in]`, `w` `[out, in]` in `x`'s dtype (frozen), `a` `[r, in]` and `b`
/// `[out, r]` in any dtype (the f32 `Var`s, or a snapshot), `mask` in `x`'s dtype.
///
/// The low-rank side is computed in f32 whatever `x`'s dtype, as peft does in a bf16
/// model (it keeps A and B in f32, casts the input up, and adds the term to the base
/// output in f32): in bf16 only the base product and the sum are rounded, where casting
/// A and B down rounded the adapter itself. In an f32 model nothing changes.
///
/// Composed, the layer is about ten nodes (two casts, three matmuls, the scale, the sums),
/// and candle's backward writes a zero tensor and adds into it for every node's gradient:
/// two more passes over `[N, in]` or `[N, out]` per node. Here the forward is computed
/// outside the graph, and the backward, with `h = x_d A'ᵀ` kept from the forward (`[N, r]`, small), is
/// `∂B = s gᵀ h`, `∂A = s (g B')ᵀ x_d`, `∂x = g W + s ((g B') A') ⊙ mask`. On the CPU the
/// low-rank terms are accumulated into the base products (`gemm::add_product`): the
/// forward then differs from the composed layer in the last bits.
pub fn lora_linear(
    x: &Tensor,
    w: &Tensor,
    bias: Option<&Tensor>,
    (a, b, scale): (&Tensor, &Tensor, f64),
    mask: Option<Tensor>,
) -> Result<Tensor> {
    let dt = x.dtype();
    let x0 = x.detach();
    let xd = masked(x0.clone(), mask.as_ref())?.to_dtype(DType::F32)?;
    let (a_, b_) = (a.detach().to_dtype(DType::F32)?, b.detach().to_dtype(DType::F32)?);
    let h = super::gemm::product(&xd, &a_.t()?)?;
    // bf16 on the CPU: the base product in f32 too (candle's CPU bf16 product widens to
    // f32 anyway), so that base, bias and low-rank term are rounded once, together
    let mut y = if dt != DType::F32 && x.device().is_cpu() {
        super::gemm::product(&x0.to_dtype(DType::F32)?, &w.to_dtype(DType::F32)?.t()?)?
    } else {
        super::gemm::product(&x0, &w.t()?)?
    };
    if let Some(bias) = bias {
        y = y.broadcast_add(&bias.to_dtype(y.dtype())?)?;
    }
    if y.dtype() != DType::F32 {
        y = (y.to_dtype(DType::F32)? + (h.matmul(&b_.t()?)? * scale)?)?;
    } else if !super::gemm::add_product(&y, &h, &b_.t()?, scale)? {
        // (on the CPU the low-rank term is accumulated into the fresh output in one pass)
        y = (y + (h.matmul(&b_.t()?)? * scale)?)?;
    }
    let y = y.to_dtype(dt)?;
    if !x.track_op() && !a.track_op() && !b.track_op() {
        return Ok(y);
    }
    let w = w.clone();
    attach3([x, a, b], y, "lora-linear", move |[x, a, b], g| {
        lora_grads((x, a, b), g, (&w, &h, mask.as_ref(), scale))
    })
}

/// `t ⊙ mask`, or `t` without dropout.
fn masked(t: Tensor, mask: Option<&Tensor>) -> Result<Tensor> {
    match mask {
        Some(m) => t * m,
        None => Ok(t),
    }
}

/// [`lora_linear`]'s backward, with `w`, `h` (f32), the mask and the scale of its
/// forward. The low-rank side in f32 as in the forward; `∂x` in `x`'s dtype.
fn lora_grads(
    (x, a, b): (&Tensor, &Tensor, &Tensor),
    g: &Tensor,
    (w, h, mask, scale): (&Tensor, &Tensor, Option<&Tensor>, f64),
) -> Result<Grads3> {
    let dt = x.dtype();
    let f32 = |t: &Tensor| t.to_dtype(DType::F32);
    let (a_, b_) = (f32(&a.detach())?, f32(&b.detach())?);
    let (g32, mask32) = (f32(g)?, mask.map(f32).transpose()?);
    // ∂h = s · g B' ([N, r]); the scale goes on the small side of every product
    let gh = (super::gemm::product(&g32, &b_)? * scale)?;
    let gb = if b.track_op() { Some((g32.t()?.matmul(h)? * scale)?.to_dtype(b.dtype())?) } else { None };
    let ga = if a.track_op() {
        Some(gh.t()?.matmul(&masked(f32(&x.detach())?, mask32.as_ref())?)?.to_dtype(a.dtype())?)
    } else {
        None
    };
    let gx = if !x.track_op() {
        None
    } else if mask.is_none() && dt == DType::F32 {
        let gx = super::gemm::product(g, w)?;
        Some(if super::gemm::add_product(&gx, &gh, &a_, 1.0)? { gx } else { (gx + gh.matmul(&a_)?)? })
    } else {
        let low = masked(gh.matmul(&a_)?, mask32.as_ref())?.to_dtype(dt)?;
        Some((super::gemm::product(g, w)? + low)?)
    };
    Ok((gx, ga, gb))
}

/// Attention `o = softmax(q kᵀ · scale + mask) v` (computed outside the graph, with its
/// probabilities `p`) as one node over `(q, k, v)`. Composed, it is a node per matmul,
/// scale, mask and softmax, each keeping a `[B, H, T, S]` tensor for the backward and
/// writing a zero tensor of that size to add its gradient into; here only `p` is kept.
/// Backward, query heads grouped by their key/value head: `∂v = pᵀ g`, `∂p = g vᵀ`,
/// `∂s = p ⊙ (∂p − Σ ∂p ⊙ p)` (f32, as the softmax's), `∂q = scale · ∂s k`,
/// `∂k = scale · ∂sᵀ q`.
pub fn attention_node(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    p: Tensor,
    o: Tensor,
    scale: f64,
) -> Result<Tensor> {
    attach3([q, k, v], o, "attention", move |[q, k, v], g| attention_grads((q, k, v), g, &p, scale))
}

/// [`attention_node`]'s backward, with the probabilities and scale of its forward.
fn attention_grads(
    (q, k, v): (&Tensor, &Tensor, &Tensor),
    g: &Tensor,
    p: &Tensor,
    scale: f64,
) -> Result<Grads3> {
    let hkv = k.dim(1)?;
    // in grouped rows (`nn::group_heads`), like `p`: the sums over the query heads that
    // share a key/value head are inside the matmuls
    let gg = group_heads(&g.contiguous()?, hkv)?;
    let dv = if v.track_op() { Some(p.t()?.matmul(&gg)?) } else { None };
    if !(q.track_op() || k.track_op()) {
        return Ok((None, None, dv));
    }
    let dp = gg.matmul(&v.detach().contiguous()?.t()?)?;
    let ds = super::activation::softmax_grad(p, &dp, scale)?;
    let dq =
        if q.track_op() { Some(ds.matmul(&k.detach().contiguous()?)?.reshape(q.shape())?) } else { None };
    let dk = if k.track_op() { Some(ds.t()?.matmul(&group_heads(&q.detach(), hkv)?)?) } else { None };
    Ok((dq, dk, dv))
}

/// `t` `[B, H, T, D]` as `[B, Hkv, (H / Hkv) · T, D]`: the query heads that share a
/// key/value head stacked along the rows, so grouped-query attention is one matmul per
/// key/value head and the keys and values are never repeated (a reshape, no copy).
pub fn group_heads(t: &Tensor, hkv: usize) -> candle_core::Result<Tensor> {
    let (b, h, n, d) = t.dims4()?;
    t.contiguous()?.reshape((b, hkv, (h / hkv) * n, d))
}

#[cfg(test)]
#[path = "fused_tests.rs"]
mod tests;
