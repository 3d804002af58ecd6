//! The CUDA side of [`super::dropout`]: `dropout.cu`, compiled by NVRTC at first use, a
//! grid-stride loop over the mask.

use super::decode::cuda::compiled;
use super::dropout::MaskOp;
use candle_core::cuda_backend::cudarc::driver::{LaunchConfig, PushKernelArg};
use candle_core::cuda_backend::{CudaStorageSlice, WrapErr};
use candle_core::{CudaStorage, Result, Shape};

const SOURCE: &str = include_str!("dropout.cu");

impl MaskOp {
    /// `CustomOp1::cuda_fwd`: the mask on the input's device.
    pub(crate) fn forward_cuda(&self, on: &CudaStorage) -> Result<(CudaStorage, Shape)> {
        let dev = on.device.clone();
        let n = self.shape.elem_count();
        // SAFETY: the kernel writes every element.
        let out = unsafe { dev.alloc::<f32>(n.max(1))? };
        if n > 0 {
            let ptx = compiled("dropout", || SOURCE.to_string())?;
            let func = dev.get_or_load_custom_func("dropout_mask_f32", "guirl_dropout", &ptx)?;
            let blocks = n.div_ceil(256).min(65_535) as u32;
            let cfg = LaunchConfig { grid_dim: (blocks, 1, 1), block_dim: (256, 1, 1), shared_mem_bytes: 0 };
            let (n, seed, cut) = (n as u64, self.seed, self.cut);
            let mut b = func.builder();
            b.arg(&out).arg(&n).arg(&seed).arg(&cut).arg(&self.keep);
            // SAFETY: the arguments match dropout.cu's entry point, in order and type.
            unsafe { b.launch(cfg) }.w()?;
        }
        Ok((CudaStorage { slice: CudaStorageSlice::F32(out), device: dev }, self.shape.clone()))
    }
}
