//! A [`Launch`] on a card: its source compiled by NVRTC once per process, the inputs'
//! buffers from their layouts' offsets, a new output buffer.

use super::{Arg, Elem, Kernel, Launch, ELEMS};
use candle_core::cuda_backend::cudarc::driver::{
    CudaSlice, CudaView, LaunchArgs, LaunchConfig, PushKernelArg,
};
use candle_core::cuda_backend::{CudaStorageSlice, WrapErr};
use candle_core::{CudaDevice, CudaStorage, Layout, Result, Shape, Storage};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

/// The PTX of `source()` ([`ELEMS`] in front), compiled by NVRTC once per process under the
/// name `module` (`source` runs only then).
pub(crate) fn compiled(module: &str, source: impl FnOnce() -> String) -> Result<Arc<String>> {
    use candle_core::cuda_backend::cudarc::nvrtc::{compile_ptx_with_opts, CompileOptions};
    static CACHE: OnceLock<Mutex<HashMap<String, Arc<String>>>> = OnceLock::new();
    let mut cache = CACHE.get_or_init(Default::default).lock().expect("ptx cache");
    if let Some(p) = cache.get(module) {
        return Ok(p.clone());
    }
    let opts = CompileOptions { options: vec!["--std=c++14".into()], ..Default::default() };
    let ptx = compile_ptx_with_opts(format!("{ELEMS}\n{}", source()), opts)
        .map_err(|e| candle_core::Error::Msg(format!("kernel {module}: NVRTC could not compile it: {e}")))?;
    let p = Arc::new(ptx.to_src());
    cache.insert(module.to_string(), p.clone());
    Ok(p)
}

/// An input's data on the card, from its layout's start offset.
enum View<'a> {
    F32(CudaView<'a, f32>),
    BF16(CudaView<'a, half::bf16>),
    U32(CudaView<'a, u32>),
}

impl<'a> View<'a> {
    fn of(s: &'a CudaStorage, l: &Layout) -> Result<(View<'a>, Elem)> {
        let at = l.start_offset();
        Ok(match &s.slice {
            CudaStorageSlice::F32(v) => (View::F32(v.slice(at..)), Elem::F32),
            CudaStorageSlice::BF16(v) => (View::BF16(v.slice(at..)), Elem::BF16),
            CudaStorageSlice::U32(v) => (View::U32(v.slice(at..)), Elem::U32),
            _ => candle_core::bail!(
                "guirl's kernels take f32, bf16 or u32 tensors: set model.decode_kernels = \"eager\""
            ),
        })
    }

    fn push<'b>(&'b self, b: &mut LaunchArgs<'b>) {
        match self {
            View::F32(v) => b.arg(v),
            View::BF16(v) => b.arg(v),
            View::U32(v) => b.arg(v),
        };
    }
}

/// The output buffer.
enum Out {
    F32(CudaSlice<f32>),
    BF16(CudaSlice<half::bf16>),
    U32(CudaSlice<u32>),
}

impl Out {
    fn push<'b>(&'b self, b: &mut LaunchArgs<'b>) {
        match self {
            Out::F32(v) => b.arg(v),
            Out::BF16(v) => b.arg(v),
            Out::U32(v) => b.arg(v),
        };
    }
}

/// `op`'s launch over `args` (its custom op's arguments) and what it holds, on their card.
pub(crate) fn run<K: Kernel>(op: &K, args: &[(&CudaStorage, &Layout)]) -> Result<(CudaStorage, Shape)> {
    let held = op.held();
    let guards: Vec<_> = held.iter().map(|t| t.storage_and_layout()).collect();
    let mut inputs = args.to_vec();
    for (s, l) in &guards {
        match &**s {
            Storage::Cuda(c) => inputs.push((c, *l)),
            _ => candle_core::bail!("guirl's kernel: a tensor the op holds is not on the GPU"),
        }
    }
    let views = inputs.iter().map(|(s, l)| View::of(s, l)).collect::<Result<Vec<_>>>()?;
    let described: Vec<(Elem, &Layout)> =
        views.iter().zip(&inputs).map(|((_, e), (_, l))| (*e, *l)).collect();
    let launch = op.launch(&described)?;
    let dev = &args[0].0.device;
    let out = execute(dev, &launch, &views.iter().map(|(v, _)| v).collect::<Vec<_>>())?;
    let slice = match out {
        Out::F32(s) => CudaStorageSlice::F32(s),
        Out::BF16(s) => CudaStorageSlice::BF16(s),
        Out::U32(s) => CudaStorageSlice::U32(s),
    };
    Ok((CudaStorage { slice, device: dev.clone() }, launch.out.2))
}

fn execute(dev: &CudaDevice, launch: &Launch, views: &[&View]) -> Result<Out> {
    let (elem, len, _) = &launch.out;
    let n = (*len).max(1);
    // SAFETY: the kernel writes every element of the output (each op's launch says so;
    // the host emulation's tests check it).
    let out = unsafe {
        match elem {
            Elem::F32 => Out::F32(dev.alloc::<f32>(n)?),
            Elem::BF16 => Out::BF16(dev.alloc::<half::bf16>(n)?),
            Elem::U32 => Out::U32(dev.alloc::<u32>(n)?),
        }
    };
    let ptx = compiled(&launch.module, || launch.text())?;
    let func = dev.get_or_load_custom_func(&launch.entry, &launch.module, &ptx)?;
    let mut b = func.builder();
    for a in &launch.args {
        match a {
            Arg::Input(i) => views[*i].push(&mut b),
            Arg::Out => out.push(&mut b),
            Arg::I32(v) => {
                b.arg(v);
            }
            Arg::I64(v) => {
                b.arg(v);
            }
            Arg::U64(v) => {
                b.arg(v);
            }
            Arg::F32(v) => {
                b.arg(v);
            }
        }
    }
    let cfg = LaunchConfig {
        grid_dim: launch.grid,
        block_dim: (launch.block, 1, 1),
        shared_mem_bytes: launch.shared,
    };
    // SAFETY: each op's launch lists its entry point's arguments in order and type (the
    // host emulation compiles the same source against the same list, and a type that
    // differs does not compile there).
    unsafe { b.launch(cfg) }.w()?;
    Ok(out)
}
