//! A decoding layer's small steps fused (`decode_kernels = "fused"`): where candle launches
//! a kernel per step, one kernel does the whole row. At the 2B shape they take a layer's
//! 20 launches (the attention fused) to 15, or 11 with the adapters merged (docs/gpu.md):
//!
//! - [`add_rms_norm`]: the residual sum and the next RMSNorm (twice a layer);
//! - [`norm_rope`]: the query's or key's per-head RMSNorm and its rotary embedding (a
//!   [`split_heads`] of query heads alone);
//! - [`swiglu`]: `silu(gate) ⊙ up`; [`swiglu_halves`] over one product's two halves;
//! - [`split_heads`]: one product of a layer's queries, keys and values split into heads,
//!   with the bias, the q/k norms and the rotation (the merged adapters' concatenated
//!   weights, `decode_lora = "merged"`).
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
    // the split of a product of query heads alone: no bias, every head normed by `w`
    let inputs =
        HeadsIn { heads: (x.dim(1)?, 0, d), bias: None, norms: Some((w, w, eps)), tables: (cos, sin) };
    let (q, _, _) = split_heads(&x.reshape((r, ()))?, r, inputs)?;
    Ok(q)
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

/// `silu(g) ⊙ u` over the halves of `gu` `[M, 2I]` (one product of the gate and up
/// weights, concatenated): `[M, I]`. One kernel on CUDA, [`crate::nn::activation::swiglu`]
/// over the two halves elsewhere.
pub fn swiglu_halves(gu: &Tensor) -> Result<Tensor> {
    let (_, two) = gu.dims2()?;
    if two % 2 != 0 {
        candle_core::bail!("decode swiglu_halves: {two} columns, want an even count (gate then up)");
    }
    if !gu.device().is_cuda() {
        return crate::nn::activation::swiglu(&gu.narrow(1, 0, two / 2)?, &gu.narrow(1, two / 2, two / 2)?);
    }
    gu.contiguous()?.apply_op1_no_bwd(&SwigluHalves)
}

/// What [`split_heads`] does besides splitting: a bias to add, per-head norms of the queries
/// and keys, and the rotary tables' halves of each row.
pub struct HeadsIn<'a> {
    /// Query heads, key/value heads, head size.
    pub heads: (usize, usize, usize),
    /// `[(H + 2 Hkv) · D]`, added before anything else.
    pub bias: Option<&'a Tensor>,
    /// The query and key norms' weights `[D]` and their epsilon.
    pub norms: Option<(&'a Tensor, &'a Tensor, f64)>,
    /// `cos` and `sin` `[b, D/2]`.
    pub tables: (&'a Tensor, &'a Tensor),
}

/// The first `b` rows of `qkv` `[M, (H + 2 Hkv) · D]` (one product of the query, key and
/// value weights, concatenated) as heads, in one pass: the queries `[b, H, D]` and keys
/// `[b, Hkv, D]` with the bias added, normed per head (`norms`) and rotated, the values
/// `[b, Hkv, D]` with the bias added; each contiguous. Rounds where the unfused ops round
/// (after the bias, after the norm).
pub fn split_heads(qkv: &Tensor, b: usize, inputs: HeadsIn) -> Result<(Tensor, Tensor, Tensor)> {
    let (m, width) = qkv.dims2()?;
    let (h, hkv, d) = inputs.heads;
    let (cos, sin) = inputs.tables;
    if b == 0
        || b > m
        || width != (h + 2 * hkv) * d
        || d % 2 != 0
        || cos.dims() != [b, d / 2]
        || sin.dims() != [b, d / 2]
    {
        candle_core::bail!(
            "decode split_heads: {b} rows of {:?} as {h} + 2 × {hkv} heads of {d}, tables {:?} and {:?}: want [M ≥ b, (H + 2 Hkv) · D] and two [b, D/2], D even",
            qkv.dims(),
            cos.dims(),
            sin.dims()
        );
    }
    let t = |a: &Tensor| a.to_dtype(qkv.dtype())?.contiguous();
    if inputs.bias.is_some_and(|x| x.dims() != [width]) {
        candle_core::bail!(
            "decode split_heads: a bias of {:?} for {width} columns",
            inputs.bias.map(|x| x.dims())
        );
    }
    let norms = match inputs.norms {
        Some((wq, wk, _)) if wq.dims() != [d] || wk.dims() != [d] => {
            candle_core::bail!(
                "decode split_heads: norm weights {:?} and {:?}, want [{d}]",
                wq.dims(),
                wk.dims()
            )
        }
        Some((wq, wk, eps)) => Some((t(wq)?, t(wk)?, eps as f32)),
        None => None,
    };
    let op = SplitHeads { b, h, hkv, d, bias: inputs.bias.map(t).transpose()?, norms };
    let flat = qkv.contiguous()?.apply_op3_no_bwd(&t(cos)?, &t(sin)?, &op)?;
    let (nq, nk) = (b * h * d, b * hkv * d);
    Ok((
        flat.narrow(0, 0, nq)?.reshape((b, h, d))?,
        flat.narrow(0, nq, nk)?.reshape((b, hkv, d))?,
        flat.narrow(0, nq + nk, nk)?.reshape((b, hkv, d))?,
    ))
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

/// [`swiglu`]'s op (CUDA only: the CPU path is the activation module's).
pub(super) struct Swiglu;

/// [`swiglu_halves`]' op (CUDA only).
pub(super) struct SwigluHalves;

/// [`split_heads`]' op over `(qkv, cos, sin)`; its output is flat: the queries, the keys,
/// the values.
pub(super) struct SplitHeads {
    pub(super) b: usize,
    pub(super) h: usize,
    pub(super) hkv: usize,
    pub(super) d: usize,
    pub(super) bias: Option<Tensor>,
    pub(super) norms: Option<(Tensor, Tensor, f32)>,
}

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

/// One head `v` (f32, the bias added): normed by `norm` (weight, epsilon) and rounded, then
/// rotated by the row's table halves `c`, `s`, into `y`.
fn rotate_head<T: WithDType>(v: &mut [f32], norm: Option<(&[T], f32)>, c: &[T], s: &[T], y: &mut [T]) {
    let f = |v: T| v.to_f64() as f32;
    let (d, half) = (v.len(), v.len() / 2);
    if let Some((w, eps)) = norm {
        let m = (v.iter().map(|a| a * a).sum::<f32>() / d as f32 + eps).sqrt();
        for (e, x) in v.iter_mut().enumerate() {
            *x = round::<T>(*x / m * f(w[e]));
        }
    }
    for e in 0..half {
        let (a, b, ce, se) = (v[e], v[e + half], f(c[e]), f(s[e]));
        y[e] = T::from_f64((a * ce - b * se) as f64);
        y[e + half] = T::from_f64((b * ce + a * se) as f64);
    }
}

/// [`split_heads`] on the CPU: `x` the product's rows, `c`/`s` the tables, `bias` and
/// `norms` (query weight, key weight, epsilon) as the op holds them.
fn split_heads_cpu<T: WithDType>(
    x: &[T],
    (c, s): (&[T], &[T]),
    bias: Option<&[T]>,
    norms: Option<(&[T], &[T], f32)>,
    op: &SplitHeads,
) -> Vec<T> {
    let (b, h, hkv, d) = (op.b, op.h, op.hkv, op.d);
    let (heads, half, width) = (h + 2 * hkv, d / 2, (h + 2 * hkv) * d);
    // where head `j` of row `row` goes: the queries, then the keys, then the values
    let at = |row: usize, j: usize| match j {
        j if j < h => (row * h + j) * d,
        j if j < h + hkv => b * h * d + (row * hkv + j - h) * d,
        j => b * (h + hkv) * d + (row * hkv + j - h - hkv) * d,
    };
    let done: Vec<(usize, Vec<T>)> = (0..b * heads)
        .into_par_iter()
        .map(|i| {
            let (row, j) = (i / heads, i % heads);
            let src = &x[row * width + j * d..][..d];
            let mut v: Vec<f32> = (0..d)
                .map(|e| {
                    let y = src[e].to_f64() as f32;
                    bias.map_or(y, |bb| round::<T>(y + bb[j * d + e].to_f64() as f32))
                })
                .collect();
            let mut y = vec![T::zero(); d];
            if j >= h + hkv {
                y.iter_mut().zip(&v).for_each(|(o, a)| *o = T::from_f64(*a as f64));
            } else {
                let norm = norms.map(|(wq, wk, eps)| (if j < h { wq } else { wk }, eps));
                rotate_head(&mut v, norm, &c[row * half..][..half], &s[row * half..][..half], &mut y);
            }
            (at(row, j), y)
        })
        .collect();
    let mut out = vec![T::zero(); b * heads * d];
    for (o, y) in done {
        out[o..o + d].copy_from_slice(&y);
    }
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

/// The contiguous data of a tensor an op holds beside its inputs (a weight), on the CPU.
fn held<'a, T: WithDType>(g: &'a (candle_core::StorageRef<'_>, &Layout)) -> Result<&'a [T]> {
    match &*g.0 {
        candle_core::Storage::Cpu(s) => data(s, g.1),
        _ => candle_core::bail!("decode layer op: a weight not on the CPU"),
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
        crate::nn::kernel::cuda::run(self, &[(x, xl), (d, dl), (w, wl)])
    }
}

impl CustomOp3 for SplitHeads {
    fn name(&self) -> &'static str {
        "decode-split-heads"
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
        let bias = self.bias.as_ref().map(|t| t.storage_and_layout());
        let norms =
            self.norms.as_ref().map(|(q, k, eps)| (q.storage_and_layout(), k.storage_and_layout(), *eps));
        let n = self.b * (self.h + 2 * self.hkv) * self.d;
        let out = by_dtype!(x, "split_heads", |T| split_heads_cpu::<T>(
            data(x, xl)?,
            (data(c, cl)?, data(s, sl)?),
            bias.as_ref().map(held::<T>).transpose()?,
            match &norms {
                Some((q, k, eps)) => Some((held::<T>(q)?, held::<T>(k)?, *eps)),
                None => None,
            },
            self
        ));
        Ok((out, Shape::from(n)))
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
        crate::nn::kernel::cuda::run(self, &[(x, xl), (c, cl), (s, sl)])
    }
}

impl candle_core::CustomOp1 for SwigluHalves {
    fn name(&self) -> &'static str {
        "decode-swiglu-halves"
    }

    fn cpu_fwd(&self, _: &CpuStorage, _: &Layout) -> Result<(CpuStorage, Shape)> {
        candle_core::bail!("decode swiglu_halves: the CPU path is nn::activation::swiglu")
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(
        &self,
        gu: &candle_core::CudaStorage,
        l: &Layout,
    ) -> Result<(candle_core::CudaStorage, Shape)> {
        crate::nn::kernel::cuda::run(self, &[(gu, l)])
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
        crate::nn::kernel::cuda::run(self, &[(g, gl), (u, ul)])
    }
}

#[cfg(test)]
#[path = "layer_tests.rs"]
mod tests;
