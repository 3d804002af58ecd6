//! The CUDA side of the decoding kernels: their `.cu` sources compiled by NVRTC at first
//! use, and their launches. [`attention`](super::attention::attention): `attention.cu`,
//! compiled for each (query heads per key/value head, head size) the model has, one block
//! per row and key/value head. [`draw`](super::draw::draw): `draw.cu`, one block per row.

use super::attention::AttentionOp;
use super::draw::DrawOp;
use candle_core::cuda_backend::cudarc::driver::{
    CudaSlice, CudaView, DeviceRepr, LaunchConfig, PushKernelArg,
};
use candle_core::cuda_backend::cudarc::nvrtc::{compile_ptx_with_opts, CompileOptions};
use candle_core::cuda_backend::{CudaStorageSlice, WrapErr};
use candle_core::{CudaDevice, CudaStorage, Layout, Result, Shape, Storage};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

const ATTENTION: &str = include_str!("attention.cu");
const DRAW: &str = include_str!("draw.cu");

/// Most query heads per key/value head, and head elements, the kernel takes (its shared
/// memory holds a group's queries and every warp's partial sums).
const MAX_GROUP: usize = 8;
const MAX_HEAD: usize = 256;
const MAX_GROUP_ELEMS: usize = 1024;

/// The attention kernel's PTX for `g` query heads per key/value head and `epl` head
/// elements per lane, compiled once per process, and its module's name.
fn attention_ptx(g: usize, epl: usize) -> Result<(Arc<String>, String)> {
    let key = format!("attention_g{g}_e{epl}");
    let ptx = compiled(&key, || format!("#define G {g}\n#define EPL {epl}\n{ATTENTION}"))?;
    Ok((ptx, format!("guirl_decode_{key}")))
}

/// The element access every kernel source shares (bf16 as its bits, read and written
/// through f32), put in front of each.
const ELEMS: &str = include_str!("elems.cuh");

/// The PTX of the source `src()` names `key`, with [`ELEMS`] in front, compiled by NVRTC
/// once per process.
pub(crate) fn compiled(key: &str, src: impl FnOnce() -> String) -> Result<Arc<String>> {
    static CACHE: OnceLock<Mutex<HashMap<String, Arc<String>>>> = OnceLock::new();
    let mut cache = CACHE.get_or_init(Default::default).lock().expect("ptx cache");
    if let Some(p) = cache.get(key) {
        return Ok(p.clone());
    }
    let opts = CompileOptions { options: vec!["--std=c++14".into()], ..Default::default() };
    let ptx = compile_ptx_with_opts(format!("{ELEMS}\n{}", src()), opts).map_err(|e| {
        candle_core::Error::Msg(format!("decoding kernel {key}: NVRTC could not compile it: {e}"))
    })?;
    let p = Arc::new(ptx.to_src());
    cache.insert(key.to_string(), p.clone());
    Ok(p)
}

/// `t`'s contiguous data, from its layout's offset.
pub(super) fn contiguous<'a, T>(t: &'a CudaSlice<T>, l: &Layout, what: &str) -> Result<CudaView<'a, T>> {
    match l.contiguous_offsets() {
        Some((a, b)) => Ok(t.slice(a..b)),
        None => candle_core::bail!("decoding kernel: {what} must be contiguous"),
    }
}

impl DrawOp {
    /// `CustomOp3::cuda_fwd`: one block of 1 024 threads per row.
    pub(super) fn forward_cuda(
        &self,
        x: &CudaStorage,
        xl: &Layout,
        banned: &CudaStorage,
        bl: &Layout,
        u: &CudaStorage,
        ul: &Layout,
    ) -> Result<(CudaStorage, Shape)> {
        let dev = x.device.clone();
        let (n, v) = xl.shape().dims2()?;
        let ptx = compiled("draw", || DRAW.to_string())?;
        let banned = contiguous(banned.as_cuda_slice::<f32>()?, bl, "banned tokens")?;
        let u = contiguous(u.as_cuda_slice::<f32>()?, ul, "draws")?;
        // SAFETY: every element is written by the kernel.
        let out = unsafe { dev.alloc::<f32>(n * 2)? };
        let args = DrawArgs {
            banned: &banned,
            u: &u,
            out: &out,
            v: v as i32,
            temp: self.temperature,
            greedy: self.greedy as i32,
        };
        let cfg = LaunchConfig { grid_dim: (n as u32, 1, 1), block_dim: (1024, 1, 1), shared_mem_bytes: 0 };
        match &x.slice {
            CudaStorageSlice::F32(s) => {
                args.launch(&dev, &ptx, "decode_draw_f32", &contiguous(s, xl, "logits")?, cfg)?
            }
            CudaStorageSlice::BF16(s) => {
                args.launch(&dev, &ptx, "decode_draw_bf16", &contiguous(s, xl, "logits")?, cfg)?
            }
            _ => candle_core::bail!(
                "decode draw on CUDA: logits in f32 or bf16: set model.decode_kernels = \"eager\""
            ),
        }
        Ok((CudaStorage { slice: CudaStorageSlice::F32(out), device: dev }, Shape::from((n, 2))))
    }
}

/// The draw kernel's arguments besides the logits.
struct DrawArgs<'a> {
    banned: &'a CudaView<'a, f32>,
    u: &'a CudaView<'a, f32>,
    out: &'a CudaSlice<f32>,
    v: i32,
    temp: f32,
    greedy: i32,
}

impl DrawArgs<'_> {
    fn launch<T: DeviceRepr>(
        &self,
        dev: &CudaDevice,
        ptx: &str,
        name: &str,
        x: &CudaView<T>,
        cfg: LaunchConfig,
    ) -> Result<()> {
        let func = dev.get_or_load_custom_func(name, "guirl_decode_draw", ptx)?;
        let mut b = func.builder();
        b.arg(x).arg(self.banned).arg(self.u).arg(self.out).arg(&self.v).arg(&self.temp).arg(&self.greedy);
        // SAFETY: the arguments match draw.cu's entry points, in order and type.
        unsafe { b.launch(cfg) }.w()?;
        Ok(())
    }
}

/// The leading strides of a layout, as the kernel's `long`s.
fn strides(l: &Layout) -> Vec<i64> {
    super::attention::strides(l).into_iter().map(|s| s as i64).collect()
}

impl AttentionOp {
    /// `CustomOp3::cuda_fwd`: one launch over every row and key/value head.
    pub(super) fn forward_cuda(
        &self,
        q: &CudaStorage,
        ql: &Layout,
        k: &CudaStorage,
        kl: &Layout,
        v: &CudaStorage,
        vl: &Layout,
    ) -> Result<(CudaStorage, Shape)> {
        let dev = q.device.clone();
        let (r, h, d) = ql.shape().dims3()?;
        let hkv = kl.dims()[1];
        let g = h / hkv;
        if g > MAX_GROUP || d > MAX_HEAD || g * d > MAX_GROUP_ELEMS {
            candle_core::bail!(
            "decode attention on CUDA takes at most {MAX_GROUP} query heads per key/value head, heads of \
             {MAX_HEAD} and {MAX_GROUP_ELEMS} elements a group; this model has {g} of {d}: set \
             model.decode_kernels = \"eager\""
        );
        }
        let (lens, ll) = self.lens.storage_and_layout();
        let Storage::Cuda(lens) = &*lens else {
            candle_core::bail!("decode attention: lengths not on the GPU")
        };
        let lens = lens.as_cuda_slice::<u32>()?.slice(ll.start_offset()..);
        let epl = d.div_ceil(32);
        let (ptx, module) = attention_ptx(g, epl)?;
        let warps: usize = if g * d <= 512 { 16 } else { 8 };
        let cfg = LaunchConfig {
            grid_dim: (r as u32, hkv as u32, 1),
            block_dim: ((warps * 32) as u32, 1, 1),
            shared_mem_bytes: ((g * d + 2 * warps * g + warps * g * d) * 4) as u32,
        };
        let shape =
            Launch { dev: &dev, cfg, h, hkv, d, w: self.w, scale: self.scale, ql, kl, vl, lens: &lens };
        let slice = match (&q.slice, &k.slice, &v.slice) {
            (CudaStorageSlice::F32(q), CudaStorageSlice::F32(k), CudaStorageSlice::F32(v)) => {
                CudaStorageSlice::F32(shape.run(&module, "decode_attention_f32", &ptx, q, k, v)?)
            }
            (CudaStorageSlice::BF16(q), CudaStorageSlice::BF16(k), CudaStorageSlice::BF16(v)) => {
                CudaStorageSlice::BF16(shape.run(&module, "decode_attention_bf16", &ptx, q, k, v)?)
            }
            _ => candle_core::bail!(
                "decode attention on CUDA: f32 or bf16 only: set model.decode_kernels = \"eager\""
            ),
        };
        Ok((CudaStorage { slice, device: dev }, ql.shape().clone()))
    }
}

/// One launch's shape and arguments other than the tensors.
struct Launch<'a> {
    dev: &'a CudaDevice,
    cfg: LaunchConfig,
    h: usize,
    hkv: usize,
    d: usize,
    w: usize,
    scale: f32,
    ql: &'a Layout,
    kl: &'a Layout,
    vl: &'a Layout,
    lens: &'a CudaView<'a, u32>,
}

impl Launch<'_> {
    fn run<T: DeviceRepr>(
        &self,
        module: &str,
        name: &str,
        ptx: &str,
        q: &CudaSlice<T>,
        k: &CudaSlice<T>,
        v: &CudaSlice<T>,
    ) -> Result<CudaSlice<T>> {
        let func = self.dev.get_or_load_custom_func(name, module, ptx)?;
        let (q, k, v) = (
            q.slice(self.ql.start_offset()..),
            k.slice(self.kl.start_offset()..),
            v.slice(self.vl.start_offset()..),
        );
        let (qs, ks, vs) = (strides(self.ql), strides(self.kl), strides(self.vl));
        let r = self.ql.dims()[0];
        // SAFETY: every element is written by the kernel.
        let out = unsafe { self.dev.alloc::<T>(r * self.h * self.d)? };
        let (h, hkv, d, w) = (self.h as i32, self.hkv as i32, self.d as i32, self.w as i32);
        let mut b = func.builder();
        b.arg(&q).arg(&k).arg(&v).arg(self.lens).arg(&out);
        b.arg(&h).arg(&hkv).arg(&d).arg(&w);
        b.arg(&qs[0]).arg(&qs[1]).arg(&ks[0]).arg(&ks[1]).arg(&ks[2]).arg(&vs[0]).arg(&vs[1]).arg(&vs[2]);
        b.arg(&self.scale);
        // SAFETY: the arguments match attention.cu's entry points, in order and type.
        unsafe { b.launch(self.cfg) }.w()?;
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    /// The kernels compile: the attention for the shapes of Qwen3-VL 2B (2 query heads a key/value head,
    /// heads of 128), the test fixture's and the largest the kernel takes. NVRTC needs no
    /// GPU, so this runs wherever the `cuda` build does.
    #[test]
    fn the_kernel_compiles() {
        for (g, epl) in [(2, 4), (1, 1), (4, 4), (8, 4), (1, 8)] {
            let (ptx, _) = super::attention_ptx(g, epl).unwrap();
            assert!(ptx.contains("decode_attention_bf16") && ptx.contains("decode_attention_f32"));
        }
        let ptx = super::compiled("draw", || super::DRAW.to_string()).unwrap();
        assert!(ptx.contains("decode_draw_bf16") && ptx.contains("decode_draw_f32"));
    }
}
