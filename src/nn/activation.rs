//! SiLU, SwiGLU, tanh-GELU and attention's softmax: one vectorised CPU pass each, and
//! SwiGLU as one graph node.
//!
//! candle evaluates `exp` and `tanh` through libm one element at a time, and its SiLU's
//! backward is a chain of elementwise nodes, each a tensor written and a zero tensor added
//! into. In the 0.5B Qwen3-VL LoRA update that was about 6 % of the time in `exp`/`tanh`
//! alone (`docs/qwen-vl-speed.md`). Here `exp` is a branch-free polynomial the compiler
//! vectorises, built for AVX-512 and AVX2 and chosen at run time, split over rayon's threads.
//! bf16 and f16 on the CPU go through the f32 path and are rounded once, as transformers
//! computes these in f32; on CUDA the same functions run candle's ops.

use super::attach::attach2;
use candle_core::{DType, Device, Result, Storage, Tensor};
use rayon::prelude::*;

/// Elements per rayon task: large enough that the split costs nothing against the math.
const CHUNK: usize = 1 << 14;

/// `silu(gate) ⊙ up` (the SwiGLU of Qwen's MLPs) as one graph node over `(gate, up)`.
/// Backward, with `s = σ(gate)`: `∂up = g · gate · s`, `∂gate = g · up · s (1 + gate (1 − s))`.
/// Only the two inputs are kept; `s` is recomputed.
pub fn swiglu(gate: &Tensor, up: &Tensor) -> Result<Tensor> {
    if low_precision_cpu(gate) {
        return swiglu(&gate.to_dtype(DType::F32)?, &up.to_dtype(DType::F32)?)?.to_dtype(gate.dtype());
    }
    let (g0, u0) = (gate.detach(), up.detach());
    let fast = on_cpu_f32(&[&g0, &u0], |[a, b]| {
        let mut out = vec![0f32; a.len()];
        out.par_chunks_mut(CHUNK)
            .zip(a.par_chunks(CHUNK).zip(b.par_chunks(CHUNK)))
            .for_each(|(o, (a, b))| kernels::swiglu(o, a, b));
        out
    })?;
    let y = match fast {
        Some(out) => Tensor::from_vec(out, gate.shape(), &Device::Cpu)?,
        None => (g0.silu()? * &u0)?,
    };
    if !gate.track_op() && !up.track_op() {
        return Ok(y);
    }
    attach2([gate, up], y, "swiglu", |[gate, up], g| {
        let (dg, du) = swiglu_grads(&gate.detach(), &up.detach(), g)?;
        Ok((gate.track_op().then_some(dg), up.track_op().then_some(du)))
    })
}

/// `(∂gate, ∂up)` of [`swiglu`] for the output gradient `g`.
fn swiglu_grads(gate: &Tensor, up: &Tensor, g: &Tensor) -> Result<(Tensor, Tensor)> {
    let fast = on_cpu_f32(&[gate, up, g], |[a, b, g]| {
        let (mut da, mut db) = (vec![0f32; a.len()], vec![0f32; a.len()]);
        da.par_chunks_mut(CHUNK)
            .zip(db.par_chunks_mut(CHUNK))
            .zip(a.par_chunks(CHUNK).zip(b.par_chunks(CHUNK)).zip(g.par_chunks(CHUNK)))
            .for_each(|((da, db), ((a, b), g))| kernels::swiglu_grad(da, db, a, b, g));
        (da, db)
    })?;
    if let Some((da, db)) = fast {
        let shape = gate.shape();
        return Ok((Tensor::from_vec(da, shape, &Device::Cpu)?, Tensor::from_vec(db, shape, &Device::Cpu)?));
    }
    let s = candle_nn::ops::sigmoid(gate)?;
    let du = (g * gate)?.mul(&s)?;
    let dg = ((g * up)? * &s)?.mul(&(((1.0 - &s)? * gate)? + 1.0)?)?;
    Ok((dg, du))
}

/// SiLU `x σ(x)`: the vectorised pass outside a graph on the CPU in f32, else candle's op.
pub fn silu(x: &Tensor) -> Result<Tensor> {
    unary(x, kernels::silu, Tensor::silu)
}

/// GELU with the tanh approximation (`gelu_pytorch_tanh`), computed as `x σ(2u)` with
/// `u = √(2/π) (x + 0.044715 x³)`, which equals `x (1 + tanh u) / 2`: the vectorised pass
/// outside a graph on the CPU in f32, else candle's op.
pub fn gelu_tanh(x: &Tensor) -> Result<Tensor> {
    unary(x, kernels::gelu_tanh, Tensor::gelu)
}

/// `kernel` over `x` outside a graph on the CPU in f32; `fallback` (candle's op, with its
/// backward) otherwise.
fn unary(
    x: &Tensor,
    kernel: fn(&mut [f32], &[f32]),
    fallback: fn(&Tensor) -> Result<Tensor>,
) -> Result<Tensor> {
    if low_precision_cpu(x) {
        return unary(&x.to_dtype(DType::F32)?, kernel, fallback)?.to_dtype(x.dtype());
    }
    if x.track_op() {
        return fallback(x);
    }
    let fast = on_cpu_f32(&[x], |[a]| {
        let mut out = vec![0f32; a.len()];
        out.par_chunks_mut(CHUNK).zip(a.par_chunks(CHUNK)).for_each(|(o, a)| kernel(o, a));
        out
    })?;
    match fast {
        Some(out) => Tensor::from_vec(out, x.shape(), &Device::Cpu),
        None => fallback(x),
    }
}

/// Attention's probabilities `softmax(scores · scale + mask)` over the last axis, for
/// `scores` `[…, R, S]` and an additive `mask` `[T, S]` (0 or −∞) whose rows repeat down
/// the score rows (`R` a multiple of `T`: query heads grouped, `nn::group_heads`), as
/// transformers' eager attention computes them (the softmax in f32; bf16 scores on the CPU
/// are scaled and masked in f32 too, and the probabilities rounded once). On the CPU in
/// f32 one pass per row; else candle's ops.
pub fn scaled_softmax(scores: &Tensor, scale: f64, mask: Option<&Tensor>) -> Result<Tensor> {
    let s = scores.dim(candle_core::D::Minus1)?;
    let r = scores.dim(candle_core::D::Minus2)?;
    let t = match mask {
        Some(m) => match m.dims() {
            &[t, ms] if ms == s && t > 0 && r % t == 0 => t,
            _ => candle_core::bail!("attention mask {:?} for scores {:?}", m.dims(), scores.dims()),
        },
        None => r,
    };
    if low_precision_cpu(scores) {
        return scaled_softmax(&scores.to_dtype(DType::F32)?, scale, mask)?.to_dtype(scores.dtype());
    }
    if scores.dtype() == DType::F32 && scores.device().is_cpu() {
        // the mask is small ([T, S]); one row of zeros stands for none
        let (m, mask_rows) = match mask {
            Some(m) => (m.to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>()?, t),
            None => (vec![0f32; s], 1),
        };
        let fast = on_cpu_f32(&[&scores.detach()], |[x]| {
            let mut out = vec![0f32; x.len()];
            let scale = scale as f32;
            let k = rows_per_task(s);
            out.par_chunks_mut(s * k).zip(x.par_chunks(s * k)).enumerate().for_each(|(i, (o, x))| {
                for (j, (o, x)) in o.chunks_mut(s).zip(x.chunks(s)).enumerate() {
                    let row = ((i * k + j) % mask_rows) * s;
                    kernels::softmax_row(o, x, &m[row..row + s], scale)
                }
            });
            out
        })?;
        if let Some(out) = fast {
            return Tensor::from_vec(out, scores.shape(), &Device::Cpu);
        }
    }
    let mut x = (scores * scale)?;
    if let Some(m) = mask {
        x = x.broadcast_add(&m.repeat((r / t, 1))?)?;
    }
    candle_nn::ops::softmax_last_dim(&x)
}

/// The gradient through attention's softmax: `scale · p ⊙ (∂p − Σ ∂p ⊙ p)` over the last
/// axis, in f32, returned in `p`'s dtype.
pub fn softmax_grad(p: &Tensor, dp: &Tensor, scale: f64) -> Result<Tensor> {
    let s = p.dim(candle_core::D::Minus1)?;
    let fast = on_cpu_f32(&[p, dp], |[p, dp]| {
        let mut out = vec![0f32; p.len()];
        let scale = scale as f32;
        let k = rows_per_task(s);
        out.par_chunks_mut(s * k).zip(p.par_chunks(s * k).zip(dp.par_chunks(s * k))).for_each(
            |(o, (p, dp))| {
                for (o, (p, dp)) in o.chunks_mut(s).zip(p.chunks(s).zip(dp.chunks(s))) {
                    kernels::softmax_grad_row(o, p, dp, scale)
                }
            },
        );
        out
    })?;
    if let Some(out) = fast {
        return Tensor::from_vec(out, p.shape(), &Device::Cpu);
    }
    let (pf, dpf) = (p.to_dtype(DType::F32)?, dp.to_dtype(DType::F32)?);
    let dot = (&dpf * &pf)?.sum_keepdim(candle_core::D::Minus1)?;
    ((pf * dpf.broadcast_sub(&dot)?)? * scale)?.to_dtype(p.dtype())
}

/// Rows of `s` elements that make one rayon task of about [`CHUNK`] elements.
fn rows_per_task(s: usize) -> usize {
    (CHUNK / s.max(1)).max(1)
}

/// A bf16 or f16 tensor on the CPU. candle's CPU kernels compute those dtypes in the
/// dtype itself (its softmax sums the exponentials in bf16, its SiLU rounds after every
/// step), where transformers computes softmax and activations in f32 and rounds once: the
/// functions here take such a tensor through their f32 path and round the result once.
/// (On CUDA candle's kernels already compute in f32 inside.)
fn low_precision_cpu(t: &Tensor) -> bool {
    matches!(t.dtype(), DType::BF16 | DType::F16) && t.device().is_cpu()
}

/// `f` of the elements of `N` same-shaped CPU f32 tensors, in order (copied only where one
/// is not contiguous); `None` for other devices, dtypes or differing shapes.
fn on_cpu_f32<const N: usize, R>(ts: &[&Tensor; N], f: impl FnOnce([&[f32]; N]) -> R) -> Result<Option<R>> {
    if ts.iter().any(|t| t.dtype() != DType::F32 || !t.device().is_cpu() || t.shape() != ts[0].shape()) {
        return Ok(None);
    }
    let ts: Vec<Tensor> = ts.iter().map(|t| t.contiguous()).collect::<Result<_>>()?;
    let guards: Vec<_> = ts.iter().map(|t| t.storage_and_layout()).collect();
    let mut slices: [&[f32]; N] = [&[]; N];
    for (i, (storage, layout)) in guards.iter().enumerate() {
        let Storage::Cpu(cpu) = &**storage else { return Ok(None) };
        let start = layout.start_offset();
        slices[i] = &cpu.as_slice::<f32>()?[start..start + ts[i].elem_count()];
    }
    Ok(Some(f(slices)))
}

/// The elementwise kernels. Each is written once as plain loops and compiled three times:
/// for AVX-512, for AVX2 + FMA and for the baseline, the first the CPU has chosen at run
/// time (the loops have no branches, so the compiler vectorises them to the full width).
mod kernels {
    /// Defines `pub fn $name` that runs `$body` built for the best instruction set present.
    macro_rules! multiversion {
        ($(#[$doc:meta])* fn $name:ident($($arg:ident: $ty:ty),*) $body:block) => {
            $(#[$doc])*
            pub fn $name($($arg: $ty),*) {
                #[inline(always)]
                fn body($($arg: $ty),*) $body
                #[cfg(target_arch = "x86_64")]
                {
                    #[target_feature(enable = "avx512f,avx512vl,avx2,fma")]
                    unsafe fn v4($($arg: $ty),*) { body($($arg),*) }
                    #[target_feature(enable = "avx2,fma")]
                    unsafe fn v3($($arg: $ty),*) { body($($arg),*) }
                    if std::is_x86_feature_detected!("avx512f") && std::is_x86_feature_detected!("avx512vl") {
                        // SAFETY: the features v4 is built for are present
                        return unsafe { v4($($arg),*) };
                    }
                    if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma") {
                        // SAFETY: as above, for v3
                        return unsafe { v3($($arg),*) };
                    }
                }
                body($($arg),*)
            }
        };
    }

    /// `eˣ` to about 1 ulp over f32's range (Cephes' `expf`: `x = n ln 2 + r`, a degree-6
    /// polynomial in `r`, `2ⁿ` written into the exponent bits), without branches.
    #[inline(always)]
    pub(super) fn exp(x: f32) -> f32 {
        const LOG2E: f32 = std::f32::consts::LOG2_E;
        // adding 1.5 · 2²³ rounds to an integer, which then sits in the low mantissa bits
        const MAGIC: f32 = 12_582_912.0;
        let x0 = x;
        let x = x.clamp(-87.3, 88.3);
        let v = x * LOG2E + MAGIC;
        let n = v - MAGIC;
        // ln 2 in two parts, so that x − n ln 2 is exact
        let r = x - n * 0.693_359_4 - n * -2.121_944_4e-4;
        let p = ((((1.987_569_1e-4 * r + 1.398_199_9e-3) * r + 8.333_452e-3) * r + 4.166_579_6e-2) * r
            + 0.166_666_65)
            * r
            + 0.5;
        let y = p * r * r + r + 1.0;
        let scale = f32::from_bits(v.to_bits().wrapping_sub(0x4B40_0000 - 127) << 23);
        // below the range (e⁻⁸⁷ is f32's smallest normal), and −∞ from a mask: exactly 0
        if x0 < -87.3 {
            0.0
        } else {
            y * scale
        }
    }

    /// Lanes of the explicit reductions: the compiler keeps float sums and maxima in order
    /// unless the code itself splits them.
    const LANES: usize = 16;

    /// The largest element (−∞ for none).
    #[inline(always)]
    fn max(x: &[f32]) -> f32 {
        let mut acc = [f32::NEG_INFINITY; LANES];
        let mut chunks = x.chunks_exact(LANES);
        for c in &mut chunks {
            for (a, &v) in acc.iter_mut().zip(c) {
                *a = if v > *a { v } else { *a };
            }
        }
        chunks.remainder().iter().chain(&acc).fold(f32::NEG_INFINITY, |m, &v| if v > m { v } else { m })
    }

    /// `Σ a ⊙ b`.
    #[inline(always)]
    fn dot(a: &[f32], b: &[f32]) -> f32 {
        let mut acc = [0f32; LANES];
        let (ca, cb) = (a.chunks_exact(LANES), b.chunks_exact(LANES));
        let tail: f32 = ca.remainder().iter().zip(cb.remainder()).map(|(x, y)| x * y).sum();
        for (x, y) in ca.zip(cb) {
            for i in 0..LANES {
                acc[i] += x[i] * y[i];
            }
        }
        acc.iter().sum::<f32>() + tail
    }

    multiversion! {
        /// One row of `softmax(x · scale + m)`.
        fn softmax_row(out: &mut [f32], x: &[f32], m: &[f32], scale: f32) {
            for ((o, &x), &m) in out.iter_mut().zip(x).zip(m) {
                *o = x * scale + m;
            }
            let top = max(out);
            if top == f32::NEG_INFINITY {
                // every key masked: transformers' softmax gives NaN; a row of zeros is
                // what the fused kernels do and what cannot poison a sum
                out.fill(0.0);
                return;
            }
            let mut acc = [0f32; LANES];
            let mut chunks = out.chunks_exact_mut(LANES);
            for c in &mut chunks {
                for (a, o) in acc.iter_mut().zip(c.iter_mut()) {
                    *o = exp(*o - top);
                    *a += *o;
                }
            }
            let mut sum = 0.0;
            for o in chunks.into_remainder() {
                *o = exp(*o - top);
                sum += *o;
            }
            let inv = 1.0 / (acc.iter().sum::<f32>() + sum);
            for o in out.iter_mut() {
                *o *= inv;
            }
        }
    }

    multiversion! {
        /// One row of `scale · p ⊙ (dp − Σ dp ⊙ p)`.
        fn softmax_grad_row(out: &mut [f32], p: &[f32], dp: &[f32], scale: f32) {
            let d = dot(p, dp);
            for ((o, &p), &dp) in out.iter_mut().zip(p).zip(dp) {
                *o = scale * p * (dp - d);
            }
        }
    }

    /// `σ(x) = 1 / (1 + e⁻ˣ)`.
    #[inline(always)]
    pub(super) fn sigmoid(x: f32) -> f32 {
        1.0 / (1.0 + exp(-x))
    }

    multiversion! {
        /// `out = a σ(a)`.
        fn silu(out: &mut [f32], a: &[f32]) {
            for (o, &a) in out.iter_mut().zip(a) {
                *o = a * sigmoid(a);
            }
        }
    }

    multiversion! {
        /// `out = a σ(a) b`.
        fn swiglu(out: &mut [f32], a: &[f32], b: &[f32]) {
            for ((o, &a), &b) in out.iter_mut().zip(a).zip(b) {
                *o = a * sigmoid(a) * b;
            }
        }
    }

    multiversion! {
        /// The gradients of [`swiglu`] with respect to `a` and `b` for the output's `g`.
        fn swiglu_grad(da: &mut [f32], db: &mut [f32], a: &[f32], b: &[f32], g: &[f32]) {
            for ((((da, db), &a), &b), &g) in da.iter_mut().zip(db.iter_mut()).zip(a).zip(b).zip(g) {
                let s = sigmoid(a);
                *db = g * a * s;
                *da = g * b * s * (1.0 + a * (1.0 - s));
            }
        }
    }

    multiversion! {
        /// `out = a σ(2u)`, `u = √(2/π) (a + 0.044715 a³)`: tanh-GELU.
        fn gelu_tanh(out: &mut [f32], a: &[f32]) {
            const K: f32 = 0.797_884_6; // √(2/π)
            for (o, &a) in out.iter_mut().zip(a) {
                let u = K * (a + 0.044_715 * a * a * a);
                *o = a * sigmoid(2.0 * u);
            }
        }
    }
}

#[cfg(test)]
#[path = "activation_tests.rs"]
mod tests;
