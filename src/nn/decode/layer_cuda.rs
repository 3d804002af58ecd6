//! The CUDA side of [`super::layer`]'s fused steps: `layer.cu`, compiled by NVRTC once per
//! process, and its launches.

use super::cuda::{compiled, contiguous};
use super::layer::{AddRmsNorm, SplitHeads, Swiglu, SwigluHalves};
use candle_core::cuda_backend::cudarc::driver::{CudaSlice, DeviceRepr, LaunchConfig, PushKernelArg};
use candle_core::cuda_backend::{CudaStorageSlice, WrapErr};
use candle_core::{CudaDevice, CudaStorage, Layout, Result, Shape, Storage, StorageRef};

const LAYER: &str = include_str!("layer.cu");
const MODULE: &str = "guirl_decode_layer";

/// The PTX of `layer.cu`.
pub(super) fn layer_ptx() -> Result<std::sync::Arc<String>> {
    compiled("layer", || LAYER.to_string())
}

/// Launches `name`'s f32 or bf16 entry over `inputs` (all of one dtype, contiguous), the
/// scalars `push` adds after them, into a new buffer of `len` elements.
fn launch(
    dev: &CudaDevice,
    name: &str,
    inputs: &[(&CudaStorage, &Layout)],
    len: usize,
    cfg: LaunchConfig,
    push: &dyn Fn(&mut Args),
) -> Result<CudaStorage> {
    let ptx = layer_ptx()?;
    let slice = match &inputs[0].0.slice {
        CudaStorageSlice::F32(_) => {
            CudaStorageSlice::F32(run::<f32>(dev, &ptx, name, "f32", inputs, len, cfg, push)?)
        }
        CudaStorageSlice::BF16(_) => {
            CudaStorageSlice::BF16(run::<half::bf16>(dev, &ptx, name, "bf16", inputs, len, cfg, push)?)
        }
        _ => candle_core::bail!(
            "decode {name} on CUDA: f32 or bf16 only: set model.decode_kernels = \"eager\""
        ),
    };
    Ok(CudaStorage { slice, device: dev.clone() })
}

/// The scalar arguments after the tensors, in the kernel's order.
pub(super) struct Args {
    ints: Vec<i32>,
    long: Option<i64>,
    float: Option<f32>,
}

#[allow(clippy::too_many_arguments)]
fn run<T: DeviceRepr + candle_core::cuda_backend::CudaDType>(
    dev: &CudaDevice,
    ptx: &str,
    name: &str,
    suffix: &str,
    inputs: &[(&CudaStorage, &Layout)],
    len: usize,
    cfg: LaunchConfig,
    push: &dyn Fn(&mut Args),
) -> Result<CudaSlice<T>> {
    let func = dev.get_or_load_custom_func(&format!("decode_{name}_{suffix}"), MODULE, ptx)?;
    let views = inputs
        .iter()
        .map(|(s, l)| contiguous(s.as_cuda_slice::<T>()?, l, name))
        .collect::<Result<Vec<_>>>()?;
    // SAFETY: every element is written by the kernel.
    let out = unsafe { dev.alloc::<T>(len)? };
    let mut args = Args { ints: Vec::new(), long: None, float: None };
    push(&mut args);
    let mut b = func.builder();
    for v in &views {
        b.arg(v);
    }
    b.arg(&out);
    for i in &args.ints {
        b.arg(i);
    }
    if let Some(l) = &args.long {
        b.arg(l);
    }
    if let Some(f) = &args.float {
        b.arg(f);
    }
    // SAFETY: the arguments match layer.cu's entry points, in order and type.
    unsafe { b.launch(cfg) }.w()?;
    Ok(out)
}

/// Threads for one row of `n` elements: a warp multiple, at most 1 024.
fn threads(n: usize) -> u32 {
    (n.div_ceil(32) * 32).clamp(32, 1024) as u32
}

impl AddRmsNorm {
    /// `CustomOp3::cuda_fwd`: one block per row.
    pub(super) fn forward_cuda(
        &self,
        x: &CudaStorage,
        xl: &Layout,
        d: &CudaStorage,
        dl: &Layout,
        w: &CudaStorage,
        wl: &Layout,
    ) -> Result<(CudaStorage, Shape)> {
        let (m, h) = xl.shape().dims2()?;
        let cfg = LaunchConfig {
            grid_dim: (m as u32, 1, 1),
            block_dim: (threads(h).min(256), 1, 1),
            shared_mem_bytes: 0,
        };
        let eps = self.eps;
        let out = launch(&x.device, "add_rms_norm", &[(x, xl), (d, dl), (w, wl)], 2 * m * h, cfg, &|a| {
            a.ints = vec![m as i32, h as i32];
            a.float = Some(eps);
        })?;
        Ok((out, Shape::from((2, m, h))))
    }
}

impl Swiglu {
    /// `CustomOp2::cuda_fwd`: element-wise over a grid of 256-thread blocks.
    pub(super) fn forward_cuda(
        &self,
        g: &CudaStorage,
        gl: &Layout,
        u: &CudaStorage,
        ul: &Layout,
    ) -> Result<(CudaStorage, Shape)> {
        let len = gl.shape().elem_count();
        let blocks = len.div_ceil(256).clamp(1, 65_535) as u32;
        let cfg = LaunchConfig { grid_dim: (blocks, 1, 1), block_dim: (256, 1, 1), shared_mem_bytes: 0 };
        let out = launch(&g.device, "swiglu", &[(g, gl), (u, ul)], len, cfg, &|a| a.long = Some(len as i64))?;
        Ok((out, gl.shape().clone()))
    }
}

impl SwigluHalves {
    /// `CustomOp1::cuda_fwd`: element-wise over the output, 256-thread blocks.
    pub(super) fn forward_cuda(&self, gu: &CudaStorage, l: &Layout) -> Result<(CudaStorage, Shape)> {
        let (m, two) = l.shape().dims2()?;
        let (inter, len) = (two / 2, m * two / 2);
        let blocks = len.div_ceil(256).clamp(1, 65_535) as u32;
        let cfg = LaunchConfig { grid_dim: (blocks, 1, 1), block_dim: (256, 1, 1), shared_mem_bytes: 0 };
        let out = launch(&gu.device, "swiglu_halves", &[(gu, l)], len, cfg, &|a| {
            a.ints = vec![inter as i32];
            a.long = Some(len as i64);
        })?;
        Ok((out, Shape::from((m, inter))))
    }
}

/// A tensor an op holds beside its inputs (`g`, its storage held), on the GPU; `or` where
/// the op holds none (the kernel then never reads it).
fn held<'a, 'b: 'a>(
    g: &'a Option<(StorageRef<'b>, &'b Layout)>,
    or: (&'a CudaStorage, &'a Layout),
) -> Result<(&'a CudaStorage, &'a Layout)> {
    match g {
        None => Ok(or),
        Some((st, l)) => match &**st {
            Storage::Cuda(c) => Ok((c, *l)),
            _ => candle_core::bail!("decode split_heads: a bias or norm weight not on the GPU"),
        },
    }
}

impl SplitHeads {
    /// `CustomOp3::cuda_fwd`: one block per row and head, a thread per pair of elements.
    pub(super) fn forward_cuda(
        &self,
        x: &CudaStorage,
        xl: &Layout,
        c: &CudaStorage,
        cl: &Layout,
        s: &CudaStorage,
        sl: &Layout,
    ) -> Result<(CudaStorage, Shape)> {
        let (b, h, hkv, d) = (self.b, self.h, self.hkv, self.d);
        if d > 2048 {
            candle_core::bail!(
                "decode split_heads on CUDA: heads of {d} elements, at most 2048: set model.decode_kernels = \"eager\""
            );
        }
        let bias = self.bias.as_ref().map(|t| t.storage_and_layout());
        let wq = self.norms.as_ref().map(|(q, _, _)| q.storage_and_layout());
        let wk = self.norms.as_ref().map(|(_, k, _)| k.storage_and_layout());
        let inputs =
            [(x, xl), held(&bias, (x, xl))?, held(&wq, (x, xl))?, held(&wk, (x, xl))?, (c, cl), (s, sl)];
        let width = (h + 2 * hkv) * d;
        let (has_bias, has_norm) = (self.bias.is_some() as i32, self.norms.is_some() as i32);
        let eps = self.norms.as_ref().map_or(0.0, |n| n.2);
        let blocks = (b * (h + 2 * hkv)) as u32;
        let cfg =
            LaunchConfig { grid_dim: (blocks, 1, 1), block_dim: (threads(d / 2), 1, 1), shared_mem_bytes: 0 };
        let out = launch(&x.device, "split_heads", &inputs, b * width, cfg, &|a| {
            a.ints = vec![b as i32, h as i32, hkv as i32, d as i32, has_bias, has_norm];
            a.long = Some(width as i64);
            a.float = Some(eps);
        })?;
        Ok((out, Shape::from(b * width)))
    }
}

#[cfg(test)]
mod tests {
    /// `layer.cu` compiles (NVRTC needs no GPU) and has its eight entry points.
    #[test]
    fn the_layer_kernels_compile() {
        let ptx = super::layer_ptx().unwrap();
        for name in ["add_rms_norm", "swiglu", "swiglu_halves", "split_heads"] {
            for t in ["f32", "bf16"] {
                assert!(ptx.contains(&format!("decode_{name}_{t}")), "{name} {t}");
            }
        }
    }
}
