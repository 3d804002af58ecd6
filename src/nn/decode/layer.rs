//! A decoding layer's small steps fused (`decode_kernels = "fused"`): where candle launches
//! a kernel per step, one kernel does the whole row. At the 2B shape they remove five of a
//! layer's twenty launches, about 140 of a step's 600 (docs/gpu.md's profile):
//!
//! - [`add_rms_norm`]: the residual sum and the next RMSNorm (twice a layer);
//! - [`norm_rope`]: the query's or key's per-head RMSNorm and its rotary embedding;
//! - [`swiglu`]: `silu(gate) ⊙ up`.
//!
//! Each rounds where the unfused ops round (the sum before it is normed, the norm before it
//! is rotated, the SiLU before the product), computing in f32 between, so the decoded
//! log-probs stay as close to the trainer's as the unfused ops' are. Each row (each head for
//! [`norm_rope`]) is computed from its own inputs alone, in a fixed order: batch invariant.
//! On the CPU plain loops (SwiGLU is [`crate::nn::activation::swiglu`]'s); on CUDA
//! `layer.cu`, compiled by NVRTC at first use. Forward only.

use candle_core::{CpuStorage, CustomOp2, CustomOp3, DType, Layout, Result, Shape, Tensor, WithDType};
use rayon::prelude::*;

/// `(x + delta, rms_norm(x + delta) ⊙ w)` for `x` and `delta` `[M, H]` and `w` `[H]`, in one
/// pass: the residual stream's next value (rounded to the dtype) and its norm computed from
/// that rounded value, `s ⊙ w / sqrt(mean(s²) + eps)` in f32.
pub fn add_rms_norm(x: &Tensor, delta: &Tensor, w: &Tensor, eps: f64) -> Result<(Tensor, Tensor)> {
    let (m, h) = x.dims2()?;
    if delta.dims() != [m, h] || w.dims() != [h] {
        candle_core::bail!(
            "decode add_rms_norm: x {:?}, delta {:?}, weight {:?}: want two [M, H] and [H]",
            x.dims(),
            delta.dims(),
            w.dims()
        );
    }
    same_dtype("add_rms_norm", &[x, delta])?;
    let w = w.to_dtype(x.dtype())?;
    let both = x.contiguous()?.apply_op3_no_bwd(
        &delta.contiguous()?,
        &w.contiguous()?,
        &AddRmsNorm { eps: eps as f32 },
    )?;
    Ok((both.get(0)?, both.get(1)?))
}

/// Each head of `x` `[R, n, D]` RMS-normed over its `D` elements with `w` `[D]`, rounded,
/// then rotated by row `r`'s tables `cos`/`sin` `[R, D/2]` (the first halves of Qwen-VL's
/// tables, which repeat them): `y₁ = x₁ cos − x₂ sin`, `y₂ = x₂ cos + x₁ sin` over the two
/// halves, as candle's `rope`.
pub fn norm_rope(x: &Tensor, w: &Tensor, eps: f64, cos: &Tensor, sin: &Tensor) -> Result<Tensor> {
    let (r, _, d) = x.dims3()?;
    if d % 2 != 0 || w.dims() != [d] || cos.dims() != [r, d / 2] || sin.dims() != [r, d / 2] {
        candle_core::bail!(
            "decode norm_rope: x {:?}, weight {:?}, tables {:?} and {:?}: want [R, n, D], [D] and two [R, D/2], D even",
            x.dims(),
            w.dims(),
            cos.dims(),
            sin.dims()
        );
    }
    let t = |a: &Tensor| a.to_dtype(x.dtype())?.contiguous();
    let op = NormRope { w: t(w)?, eps: eps as f32 };
    x.contiguous()?.apply_op3_no_bwd(&t(cos)?, &t(sin)?, &op)
}

/// `silu(gate) ⊙ up`, the SiLU rounded before the product as the unfused ops do; one kernel
/// on CUDA, [`crate::nn::activation::swiglu`] elsewhere.
pub fn swiglu(gate: &Tensor, up: &Tensor) -> Result<Tensor> {
    if !gate.device().is_cuda() {
        return crate::nn::activation::swiglu(gate, up);
    }
    if gate.dims() != up.dims() {
        candle_core::bail!("decode swiglu: gate {:?} and up {:?} differ", gate.dims(), up.dims());
    }
    same_dtype("swiglu", &[gate, up])?;
    gate.contiguous()?.apply_op2_no_bwd(&up.contiguous()?, &Swiglu)
}

fn same_dtype(op: &str, ts: &[&Tensor]) -> Result<()> {
    if ts.iter().any(|t| t.dtype() != ts[0].dtype()) {
        let d: Vec<DType> = ts.iter().map(|t| t.dtype()).collect();
        candle_core::bail!("decode {op}: inputs in {d:?}, want one dtype");
    }
    Ok(())
}

/// [`add_rms_norm`]'s op; its output is `[2, M, H]` (the sum, then the norm).
pub(super) struct AddRmsNorm {
    pub(super) eps: f32,
}

/// [`norm_rope`]'s op over `(x, cos, sin)`, the norm's weight beside them.
pub(super) struct NormRope {
    pub(super) w: Tensor,
    pub(super) eps: f32,
}

/// [`swiglu`]'s op (CUDA only: the CPU path is the activation module's).
pub(super) struct Swiglu;

/// `x` rounded to `T` and back.
fn round<T: WithDType>(x: f32) -> f32 {
    T::from_f64(x as f64).to_f64() as f32
}

fn add_rms_norm_cpu<T: WithDType>(x: &[T], d: &[T], w: &[T], h: usize, eps: f32) -> Vec<T> {
    let n = x.len();
    let mut out = vec![T::zero(); 2 * n];
    let (sums, norms) = out.split_at_mut(n);
    sums.par_chunks_mut(h).zip(norms.par_chunks_mut(h)).enumerate().for_each(|(row, (s, y))| {
        let at = row * h;
        let mut sq = 0f32;
        for i in 0..h {
            let v = round::<T>(x[at + i].to_f64() as f32 + d[at + i].to_f64() as f32);
            s[i] = T::from_f64(v as f64);
            sq += v * v;
        }
        let m = (sq / h as f32 + eps).sqrt();
        for i in 0..h {
            y[i] = T::from_f64((s[i].to_f64() as f32 / m * w[i].to_f64() as f32) as f64);
        }
    });
    out
}

fn norm_rope_cpu<T: WithDType>(x: &[T], c: &[T], s: &[T], w: &[T], dims: (usize, usize), eps: f32) -> Vec<T> {
    let (n, d) = dims;
    let half = d / 2;
    let f = |v: T| v.to_f64() as f32;
    let mut out = vec![T::zero(); x.len()];
    out.par_chunks_mut(d).enumerate().for_each(|(i, y)| {
        let (row, xs) = (i / n, &x[i * d..(i + 1) * d]);
        let m = (xs.iter().map(|&v| f(v) * f(v)).sum::<f32>() / d as f32 + eps).sqrt();
        let normed = |e: usize| round::<T>(f(xs[e]) / m * f(w[e]));
        let (c, s) = (&c[row * half..][..half], &s[row * half..][..half]);
        for e in 0..half {
            let (a, b) = (normed(e), normed(e + half));
            let (ce, se) = (f(c[e]), f(s[e]));
            y[e] = T::from_f64((a * ce - b * se) as f64);
            y[e + half] = T::from_f64((b * ce + a * se) as f64);
        }
    });
    out
}

/// The contiguous data of a CPU storage as `T`.
fn data<'a, T: WithDType>(s: &'a CpuStorage, l: &Layout) -> Result<&'a [T]> {
    let all = s.as_slice::<T>()?;
    match l.contiguous_offsets() {
        Some((a, b)) => Ok(&all[a..b]),
        None => candle_core::bail!("decode layer op: inputs must be contiguous"),
    }
}

/// Runs `$body` with `$T` bound to the storage's element type (f32, bf16, f16).
macro_rules! by_dtype {
    ($s:expr, $op:literal, |$T:ident| $body:expr) => {
        match $s {
            CpuStorage::F32(_) => {
                type $T = f32;
                CpuStorage::F32($body)
            }
            CpuStorage::BF16(_) => {
                type $T = half::bf16;
                CpuStorage::BF16($body)
            }
            CpuStorage::F16(_) => {
                type $T = half::f16;
                CpuStorage::F16($body)
            }
            _ => candle_core::bail!(concat!("decode ", $op, ": f32, bf16 or f16 only")),
        }
    };
}

impl CustomOp3 for AddRmsNorm {
    fn name(&self) -> &'static str {
        "decode-add-rms-norm"
    }

    fn cpu_fwd(
        &self,
        x: &CpuStorage,
        xl: &Layout,
        d: &CpuStorage,
        dl: &Layout,
        w: &CpuStorage,
        wl: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let (m, h) = xl.shape().dims2()?;
        let out = by_dtype!(x, "add_rms_norm", |T| add_rms_norm_cpu::<T>(
            data(x, xl)?,
            data(d, dl)?,
            data(w, wl)?,
            h,
            self.eps
        ));
        Ok((out, Shape::from((2, m, h))))
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(
        &self,
        x: &candle_core::CudaStorage,
        xl: &Layout,
        d: &candle_core::CudaStorage,
        dl: &Layout,
        w: &candle_core::CudaStorage,
        wl: &Layout,
    ) -> Result<(candle_core::CudaStorage, Shape)> {
        self.forward_cuda(x, xl, d, dl, w, wl)
    }
}

impl CustomOp3 for NormRope {
    fn name(&self) -> &'static str {
        "decode-norm-rope"
    }

    fn cpu_fwd(
        &self,
        x: &CpuStorage,
        xl: &Layout,
        c: &CpuStorage,
        cl: &Layout,
        s: &CpuStorage,
        sl: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let (_, n, d) = xl.shape().dims3()?;
        let (w, wl) = self.w.storage_and_layout();
        let candle_core::Storage::Cpu(w) = &*w else {
            candle_core::bail!("decode norm_rope: weight not on the CPU")
        };
        let out = by_dtype!(x, "norm_rope", |T| norm_rope_cpu::<T>(
            data(x, xl)?,
            data(c, cl)?,
            data(s, sl)?,
            data(w, wl)?,
            (n, d),
            self.eps
        ));
        Ok((out, xl.shape().clone()))
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(
        &self,
        x: &candle_core::CudaStorage,
        xl: &Layout,
        c: &candle_core::CudaStorage,
        cl: &Layout,
        s: &candle_core::CudaStorage,
        sl: &Layout,
    ) -> Result<(candle_core::CudaStorage, Shape)> {
        self.forward_cuda(x, xl, c, cl, s, sl)
    }
}

impl CustomOp2 for Swiglu {
    fn name(&self) -> &'static str {
        "decode-swiglu"
    }

    fn cpu_fwd(&self, _: &CpuStorage, _: &Layout, _: &CpuStorage, _: &Layout) -> Result<(CpuStorage, Shape)> {
        candle_core::bail!("decode swiglu: the CPU path is nn::activation::swiglu")
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(
        &self,
        g: &candle_core::CudaStorage,
        gl: &Layout,
        u: &candle_core::CudaStorage,
        ul: &Layout,
    ) -> Result<(candle_core::CudaStorage, Shape)> {
        self.forward_cuda(g, gl, u, ul)
    }
}

#[cfg(test)]
#[path = "layer_tests.rs"]
mod tests;
