//! A few rows by a weight stored in rows, `x Wᵀ + b`, in one kernel: a decoding step's
//! linear layers and its LM head with the fused kernels.
//!
//! A decoding step multiplies one to a few rows by every weight of the model, once: its
//! products are the weights read from memory, not arithmetic. On an H200 cuBLAS's kernels
//! for 1 to 32 rows read them at about 1.6 TB/s of the card's 4.3 (docs/gpu.md, run 11's
//! profile: q/o 1.2, k/v 0.6, gate/up 2.4). `rows.cu` streams one to four weight rows at a
//! time through one or more warps with 16-byte loads and dots them with every input row
//! while they are in the registers, as `nn::few_rows` does on the CPU (up to 8 rows there,
//! 16 on CUDA).
//!
//! Each output element is summed in f32 in an order fixed by `k` and the weight's row
//! count alone, then rounded once with its bias: a row's bits do not depend on the other
//! rows nor on how many there are. On the CPU (f32) this is `nn::few_rows`, the same bits
//! as the unfused product; the CUDA kernel agrees with it within rounding.

use super::super::{few_rows, gemm};
use candle_core::{CpuStorage, CustomOp2, CustomOp3, DType, Device, Layout, Result, Shape, Tensor};

/// Most rows [`product`] takes on any device (the kernel keeps a sum per row and weight
/// row in registers): [`max_rows`] says how many on each.
pub const MAX_ROWS: usize = 16;

/// Most rows [`product`] takes on `device`: 16 on CUDA, 8 on the CPU (`nn::few_rows`).
pub fn max_rows(device: &Device) -> usize {
    if device.is_cuda() {
        MAX_ROWS
    } else {
        few_rows::MAX_ROWS
    }
}

/// Whether [`product`] takes `x` `[m, k]` by `w` `[n, k]` with `bias` `[n]`: `m` from 1 to
/// [`max_rows`], all of one dtype (f32 on the CPU; f32 or bf16 on CUDA) and device,
/// contiguous, outside the autograd graph, and on CUDA rows that 16-byte loads can read
/// (`k` a multiple of 8, each tensor's start aligned). Elsewhere a step runs candle's
/// product.
pub fn takes(x: &Tensor, w: &Tensor, bias: Option<&Tensor>) -> bool {
    let (Ok((m, k)), Ok((n, kw))) = (x.dims2(), w.dims2()) else { return false };
    let dt = x.dtype();
    let cuda = x.device().is_cuda();
    let dtype_ok = dt == DType::F32 || (cuda && dt == DType::BF16);
    let aligned = |t: &Tensor| !cuda || (t.layout().start_offset() * dt.size_in_bytes()).is_multiple_of(16);
    let plain = |t: &Tensor| {
        t.dtype() == dt && t.is_contiguous() && !t.track_op() && t.device().same_device(x.device())
    };
    let bias_ok = bias.is_none_or(|b| plain(b) && b.dims() == [n]);
    (1..=max_rows(x.device())).contains(&m)
        && k == kw
        && k > 0
        && dtype_ok
        && plain(x)
        && plain(w)
        && bias_ok
        && (!cuda || k.is_multiple_of(8))
        && aligned(x)
        && aligned(w)
}

/// `x Wᵀ + b` for `x` `[m, k]`, `w` `[n, k]` and `bias` `[n]` where [`takes`] holds:
/// `[m, n]` in `x`'s dtype, each element summed in f32 and rounded once.
pub fn product(x: &Tensor, w: &Tensor, bias: Option<&Tensor>) -> Result<Tensor> {
    if !takes(x, w, bias) {
        candle_core::bail!(
            "decode rows: {:?} {:?} by {:?} {:?}: want at most {} contiguous rows by a weight of the \
             same dtype stored in rows",
            x.dims(),
            x.dtype(),
            w.dims(),
            w.dtype(),
            max_rows(x.device())
        );
    }
    match bias {
        None => x.apply_op2_no_bwd(w, &RowsOp),
        Some(b) => x.apply_op3_no_bwd(w, b, &RowsOp),
    }
}

/// The most rows a decoding step with the fused kernels runs as they are, each row's bits
/// the same whatever the count: [`MAX_ROWS`] on CUDA in f32 or bf16, where the products run
/// through [`product`] and what it does not take through [`fallback`]; elsewhere
/// [`gemm::invariant_rows`] (8 for f32 on the CPU, `nn::few_rows`'s).
pub fn invariant_rows(device: &Device, dtype: DType) -> usize {
    cuda_invariant_rows(device.is_cuda(), dtype).unwrap_or_else(|| gemm::invariant_rows(device, dtype))
}

/// [`MAX_ROWS`] on CUDA in the dtypes [`product`] takes there, else none.
fn cuda_invariant_rows(cuda: bool, dtype: DType) -> Option<usize> {
    (cuda && matches!(dtype, DType::F32 | DType::BF16)).then_some(MAX_ROWS)
}

/// `f(x)`: a product of the rows `x` `[m, k]` that [`product`] does not take (an adapter kept
/// apart, a shape its loads cannot read) in a step that runs up to [`invariant_rows`] rows
/// as they are. On CUDA `f` runs on exactly [`MAX_ROWS`] rows (`x`'s, then copies of its
/// first) and its first `m` are kept, since cuBLAS picks its kernel, and so its rounding, by
/// the count; elsewhere, and from [`MAX_ROWS`] rows on (a step padded to its chunk), on `x`.
pub fn fallback(x: &Tensor, f: impl FnOnce(&Tensor) -> Result<Tensor>) -> Result<Tensor> {
    match cuda_invariant_rows(x.device().is_cuda(), x.dtype()) {
        Some(rows) => gemm::on_rows(x, rows, f),
        None => f(x),
    }
}

/// The op (no parameters: the shapes say it all).
pub(super) struct RowsOp;

/// The contiguous f32 data of a storage.
fn f32s<'a>(s: &'a CpuStorage, l: &Layout) -> Result<&'a [f32]> {
    match (s, l.contiguous_offsets()) {
        (CpuStorage::F32(v), Some((a, b))) => Ok(&v[a..b]),
        _ => candle_core::bail!("decode rows on the CPU: contiguous f32 only"),
    }
}

impl RowsOp {
    fn cpu(
        &self,
        x: &CpuStorage,
        xl: &Layout,
        w: &CpuStorage,
        wl: &Layout,
        bias: Option<&[f32]>,
    ) -> Result<(CpuStorage, Shape)> {
        let ((m, k), (n, _)) = (xl.shape().dims2()?, wl.shape().dims2()?);
        let cols = few_rows::by_columns(f32s(x, xl)?, m, f32s(w, wl)?, n, k);
        let mut out = vec![0f32; m * n];
        for (j, col) in cols.chunks_exact(m).enumerate() {
            let b = bias.map(|b| b[j]);
            for (i, v) in col.iter().enumerate() {
                out[i * n + j] = b.map_or(*v, |b| v + b);
            }
        }
        Ok((CpuStorage::F32(out), Shape::from((m, n))))
    }
}

impl CustomOp2 for RowsOp {
    fn name(&self) -> &'static str {
        "decode-rows"
    }

    fn cpu_fwd(
        &self,
        x: &CpuStorage,
        xl: &Layout,
        w: &CpuStorage,
        wl: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        self.cpu(x, xl, w, wl, None)
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(
        &self,
        x: &candle_core::CudaStorage,
        xl: &Layout,
        w: &candle_core::CudaStorage,
        wl: &Layout,
    ) -> Result<(candle_core::CudaStorage, Shape)> {
        crate::nn::kernel::cuda::run(self, &[(x, xl), (w, wl)])
    }
}

impl CustomOp3 for RowsOp {
    fn name(&self) -> &'static str {
        "decode-rows"
    }

    fn cpu_fwd(
        &self,
        x: &CpuStorage,
        xl: &Layout,
        w: &CpuStorage,
        wl: &Layout,
        b: &CpuStorage,
        bl: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        self.cpu(x, xl, w, wl, Some(f32s(b, bl)?))
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(
        &self,
        x: &candle_core::CudaStorage,
        xl: &Layout,
        w: &candle_core::CudaStorage,
        wl: &Layout,
        b: &candle_core::CudaStorage,
        bl: &Layout,
    ) -> Result<(candle_core::CudaStorage, Shape)> {
        crate::nn::kernel::cuda::run(self, &[(x, xl), (w, wl), (b, bl)])
    }
}

#[cfg(test)]
#[path = "rows_tests.rs"]
mod tests;
