//! The CUDA side of [`super::rows`]: `rows.cu`, compiled by NVRTC once per (dtype, rows,
//! warps a weight row) a model asks for, and its launch.

use super::cuda::{compiled, contiguous};
use super::rows::{split, RowsOp, WARPS};
use candle_core::cuda_backend::cudarc::driver::{DeviceRepr, LaunchConfig, PushKernelArg};
use candle_core::cuda_backend::{CudaDType, CudaStorageSlice, WrapErr};
use candle_core::{CudaStorage, Layout, Result, Shape};

const ROWS: &str = include_str!("rows.cu");

/// `rows.cu`'s PTX for element type `ty` (`float` or bf16's `unsigned short`), `m` rows and
/// `s` warps a weight row, and its module's name.
pub(super) fn rows_ptx(ty: &str, m: usize, s: usize) -> Result<(std::sync::Arc<String>, String)> {
    let vec = if ty == "float" { 4 } else { 8 };
    let key = format!("rows_{}_m{m}_s{s}", if ty == "float" { "f32" } else { "bf16" });
    let src = || {
        format!("#define T {ty}\n#define VEC {vec}\n#define M {m}\n#define SPLIT {s}\n#define WARPS {WARPS}\n{ROWS}")
    };
    Ok((compiled(&key, src)?, format!("guirl_decode_{key}")))
}

impl RowsOp {
    /// `CustomOp2`/`CustomOp3::cuda_fwd`: one launch, [`WARPS`] warps a block, `s` warps a
    /// weight row.
    pub(super) fn forward_cuda(
        &self,
        x: &CudaStorage,
        xl: &Layout,
        w: &CudaStorage,
        wl: &Layout,
        bias: Option<(&CudaStorage, &Layout)>,
    ) -> Result<(CudaStorage, Shape)> {
        let ((m, _), (n, _)) = (xl.shape().dims2()?, wl.shape().dims2()?);
        let slice = match &x.slice {
            CudaStorageSlice::F32(_) => CudaStorageSlice::F32(self.run::<f32>(x, xl, w, wl, bias, "float")?),
            CudaStorageSlice::BF16(_) => {
                CudaStorageSlice::BF16(self.run::<half::bf16>(x, xl, w, wl, bias, "unsigned short")?)
            }
            _ => candle_core::bail!(
                "decode rows on CUDA: f32 or bf16 only: set model.decode_kernels = \"eager\""
            ),
        };
        Ok((CudaStorage { slice, device: x.device.clone() }, Shape::from((m, n))))
    }

    #[allow(clippy::too_many_arguments)]
    fn run<T: DeviceRepr + CudaDType>(
        &self,
        x: &CudaStorage,
        xl: &Layout,
        w: &CudaStorage,
        wl: &Layout,
        bias: Option<(&CudaStorage, &Layout)>,
        ty: &str,
    ) -> Result<candle_core::cuda_backend::cudarc::driver::CudaSlice<T>> {
        let dev = &x.device;
        let ((m, k), (n, _)) = (xl.shape().dims2()?, wl.shape().dims2()?);
        let s = split(n, k, 16 / std::mem::size_of::<T>());
        let (ptx, module) = rows_ptx(ty, m, s)?;
        let func = dev.get_or_load_custom_func("decode_rows", &module, &ptx)?;
        let xv = contiguous(x.as_cuda_slice::<T>()?, xl, "rows")?;
        let wv = contiguous(w.as_cuda_slice::<T>()?, wl, "weight")?;
        // without a bias the kernel never reads it: the weight stands in for the pointer
        let bv = match bias {
            Some((b, bl)) => contiguous(b.as_cuda_slice::<T>()?, bl, "bias")?,
            None => contiguous(w.as_cuda_slice::<T>()?, wl, "weight")?,
        };
        // SAFETY: every element is written by the kernel.
        let out = unsafe { dev.alloc::<T>(m * n)? };
        let (n32, k32, has_bias) = (n as i32, k as i32, bias.is_some() as i32);
        let cols = (WARPS / s) as u32;
        let cfg = LaunchConfig {
            grid_dim: ((n as u32).div_ceil(cols), 1, 1),
            block_dim: (WARPS as u32 * 32, 1, 1),
            shared_mem_bytes: 0,
        };
        let mut b = func.builder();
        b.arg(&xv).arg(&wv).arg(&bv).arg(&out).arg(&n32).arg(&k32).arg(&has_bias);
        // SAFETY: the arguments match rows.cu's entry point, in order and type; `takes`
        // checked the 16-byte alignment its loads need and `split` that each warp's share of
        // a row is whole loads.
        unsafe { b.launch(cfg) }.w()?;
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    /// The kernel compiles for both dtypes, one to eight rows and every split. NVRTC
    /// needs no GPU, so this runs wherever the `cuda` build does.
    #[test]
    fn the_kernel_compiles() {
        for ty in ["float", "unsigned short"] {
            for (m, s) in [(1, 1), (1, 4), (3, 2), (8, 8)] {
                let (ptx, _) = super::rows_ptx(ty, m, s).unwrap();
                assert!(ptx.contains("decode_rows"));
            }
        }
    }
}
