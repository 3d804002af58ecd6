//! Attention of one new token per row over that row's cached keys and values, as one
//! kernel: the decoding step's attention without its products, casts, mask and softmax
//! as separate launches (seven a layer at the 2B shape, the profile of docs/gpu.md).
//!
//! Row `r` attends to the first `lens[r]` positions of its keys and values `[R, Hkv, W, D]`
//! and nothing else: positions past its length are never read (a window's unwritten tail,
//! a free row's whole slot), where a masked product reads and multiplies all `W`. A row of
//! length 0 gives zeros. Scores, softmax and the weighted sum run in f32 and the output is
//! rounded once to the inputs' dtype. Every row's result is computed from its own inputs
//! in a fixed order, so it is the same bits whatever shares the call (batch invariance).
//!
//! On the CPU a straightforward loop (two passes over the scores); on CUDA a kernel
//! compiled at first use with NVRTC, one block per row and key/value head, each warp
//! walking positions with an online softmax and the warps combined in a fixed order. The
//! two devices agree within rounding, not bit for bit. Forward only: decoding keeps no
//! graph.

use crate::nn::few_rows;
use candle_core::{CpuStorage, CustomOp3, DType, Layout, Result, Shape, Tensor, WithDType};
use rayon::prelude::*;

/// `[R, H, D]`: each row's query heads `q` `[R, H, D]` attending over the first `lens[r]`
/// positions of its keys `k` and values `v` `[R, Hkv, W, D]` (grouped-query: query head
/// `h` reads key/value head `h / (H / Hkv)`), scores scaled by `scale`. `lens` is `[R]`
/// u32 on the same device, each at most `W`. The last dimension of `q`, `k` and `v` must
/// be contiguous (any other strides, so views of longer buffers do).
pub fn attention(q: &Tensor, k: &Tensor, v: &Tensor, lens: &Tensor, scale: f64) -> Result<Tensor> {
    let (r, h, d) = q.dims3()?;
    let (kr, hkv, w, kd) = k.dims4()?;
    if v.dims() != k.dims() || kr != r || kd != d {
        candle_core::bail!(
            "decode attention: queries {:?}, keys {:?}, values {:?}: want [R, H, D] and two [R, Hkv, W, D]",
            q.dims(),
            k.dims(),
            v.dims()
        );
    }
    if hkv == 0 || h % hkv != 0 {
        candle_core::bail!("decode attention: {h} query heads do not group over {hkv} key/value heads");
    }
    if q.dtype() != k.dtype() || k.dtype() != v.dtype() {
        candle_core::bail!(
            "decode attention: queries, keys and values in {:?}, {:?}, {:?}",
            q.dtype(),
            k.dtype(),
            v.dtype()
        );
    }
    if lens.dims() != [r] || lens.dtype() != DType::U32 {
        candle_core::bail!("decode attention: lengths {:?} {:?}, want [{r}] u32", lens.dims(), lens.dtype());
    }
    let inner = |t: &Tensor| if t.stride().last() == Some(&1) { Ok(t.clone()) } else { t.contiguous() };
    let op = AttentionOp { lens: lens.contiguous()?, w, scale: scale as f32 };
    inner(q)?.apply_op3_no_bwd(&inner(k)?, &inner(v)?, &op)
}

/// The op: the lengths, the window and the scale beside the three tensors.
pub(super) struct AttentionOp {
    pub(super) lens: Tensor,
    pub(super) w: usize,
    pub(super) scale: f32,
}

/// Strides of a `[R, H, D]` or `[R, Hkv, W, D]` layout, leading dimensions only.
pub(super) fn strides(l: &Layout) -> Vec<usize> {
    let s = l.stride();
    s[..s.len() - 1].to_vec()
}

fn check_lens(lens: &[u32], w: usize) -> Result<()> {
    if let Some((row, n)) = lens.iter().enumerate().find(|(_, &n)| n as usize > w) {
        candle_core::bail!("decode attention: row {row} attends to {n} positions of a cache of {w}");
    }
    Ok(())
}

/// The CPU forward in `T`: f32 arithmetic, one rounding to `T` at the end.
#[allow(clippy::too_many_arguments)]
fn cpu<T: WithDType>(
    q: &[T],
    ql: &Layout,
    k: &[T],
    kl: &Layout,
    v: &[T],
    vl: &Layout,
    lens: &[u32],
    scale: f32,
) -> Vec<T> {
    let (qd, kd) = (ql.dims(), kl.dims());
    let (h, d, hkv) = (qd[1], qd[2], kd[1]);
    let g = h / hkv;
    let (qs, ks, vs) = (strides(ql), strides(kl), strides(vl));
    let (q0, k0, v0) = (ql.start_offset(), kl.start_offset(), vl.start_offset());
    let f = |x: T| x.to_f64() as f32;
    let mut out = vec![T::zero(); qd[0] * h * d];
    out.par_chunks_mut(d).enumerate().for_each(|(i, o)| {
        let (r, head) = (i / h, i % h);
        let n = lens[r] as usize;
        if n == 0 {
            return;
        }
        let kh = head / g;
        let qrow = &q[q0 + r * qs[0] + head * qs[1]..][..d];
        let kat = |j: usize| &k[k0 + r * ks[0] + kh * ks[1] + j * ks[2]..][..d];
        let vat = |j: usize| &v[v0 + r * vs[0] + kh * vs[1] + j * vs[2]..][..d];
        // f32 rows are read in place by a vectorised dot product; other dtypes widened first,
        // into one buffer reused for every position
        let qf: Vec<f32> = qrow.iter().map(|x| f(*x)).collect();
        let mut wide = vec![0f32; d];
        let scores: Vec<f32> = (0..n)
            .map(|j| {
                let kr = kat(j);
                let kr = as_f32(kr).unwrap_or_else(|| {
                    wide.iter_mut().zip(kr).for_each(|(o, x)| *o = f(*x));
                    &wide
                });
                few_rows::dot(&qf, kr) * scale
            })
            .collect();
        let m = scores.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let p: Vec<f32> = scores.iter().map(|s| (s - m).exp()).collect();
        let total: f32 = p.iter().sum();
        let mut acc = vec![0f32; d];
        for (j, pj) in p.iter().enumerate() {
            for (a, x) in acc.iter_mut().zip(vat(j)) {
                *a += pj * f(*x);
            }
        }
        for (o, a) in o.iter_mut().zip(acc) {
            *o = T::from_f64((a / total) as f64);
        }
    });
    out
}

/// `x` as f32 when `T` is f32.
fn as_f32<T: WithDType>(x: &[T]) -> Option<&[f32]> {
    // SAFETY: `T` is f32 itself (checked), so the slice's memory is f32s
    (T::DTYPE == DType::F32).then(|| unsafe { std::slice::from_raw_parts(x.as_ptr().cast::<f32>(), x.len()) })
}

impl CustomOp3 for AttentionOp {
    fn name(&self) -> &'static str {
        "decode-attention"
    }

    fn cpu_fwd(
        &self,
        q: &CpuStorage,
        ql: &Layout,
        k: &CpuStorage,
        kl: &Layout,
        v: &CpuStorage,
        vl: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let lens = self.lens.to_vec1::<u32>()?;
        check_lens(&lens, self.w)?;
        let s = self.scale;
        let out = match (q, k, v) {
            (CpuStorage::F32(q), CpuStorage::F32(k), CpuStorage::F32(v)) => {
                CpuStorage::F32(cpu(q, ql, k, kl, v, vl, &lens, s))
            }
            (CpuStorage::BF16(q), CpuStorage::BF16(k), CpuStorage::BF16(v)) => {
                CpuStorage::BF16(cpu(q, ql, k, kl, v, vl, &lens, s))
            }
            (CpuStorage::F16(q), CpuStorage::F16(k), CpuStorage::F16(v)) => {
                CpuStorage::F16(cpu(q, ql, k, kl, v, vl, &lens, s))
            }
            _ => candle_core::bail!("decode attention: f32, bf16 or f16 only"),
        };
        Ok((out, ql.shape().clone()))
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(
        &self,
        q: &candle_core::CudaStorage,
        ql: &Layout,
        k: &candle_core::CudaStorage,
        kl: &Layout,
        v: &candle_core::CudaStorage,
        vl: &Layout,
    ) -> Result<(candle_core::CudaStorage, Shape)> {
        crate::nn::kernel::cuda::run(self, &[(q, ql), (k, kl), (v, vl)])
    }
}

#[cfg(test)]
#[path = "attention_tests.rs"]
mod tests;
