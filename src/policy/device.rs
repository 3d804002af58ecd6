//! The CUDA device every guirl model runs on, opened on one stream of its own.
//!
//! candle's `Device::new_cuda` queues work on CUDA's per-thread default stream: each host
//! thread that issues work gets its own stream, and nothing orders one thread's kernels
//! after another's. guirl issues from several threads (the tokio workers a training run's
//! task moves between, an overlapped collection, the policy server's blocking pool), so
//! an optimizer step queued on one thread could still be writing the adapters when a
//! collection on another starts reading them. The device is opened on one explicit
//! stream instead (`Device::new_cuda_with_stream`): every thread's work is ordered on it,
//! and a synchronisation waits for all of it.
//!
//! cudarc, under candle, also starts in its multi-stream mode: every buffer gets two CUDA
//! events, and every kernel argument waits on one and records the other, so each op costs
//! several driver calls on the host. And the driver's memory pool gives freed memory back
//! at every synchronisation, so the next pass maps it again. A training pass is thousands
//! of small ops: measured on an H100 (docs/gpu.md), the host issuing them was the whole
//! Qwen-VL update's time, the GPU waiting. guirl keeps each tensor on its device's one
//! stream, so it turns the events off and keeps freed memory in the pool (as PyTorch's
//! caching allocator does).

use anyhow::{Context, Result};
use candle_core::Device;

/// Where a model runs, as a config (`device = "cuda:1"`) or `--device` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DeviceName {
    /// The host's CPU.
    #[default]
    Cpu,
    /// The GPU with this index, opened by [`cuda`].
    Cuda(usize),
}

impl std::str::FromStr for DeviceName {
    type Err = anyhow::Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "cpu" => Ok(DeviceName::Cpu),
            "cuda" => Ok(DeviceName::Cuda(0)),
            _ => match s.strip_prefix("cuda:").map(str::parse::<usize>) {
                Some(Ok(n)) => Ok(DeviceName::Cuda(n)),
                _ => {
                    anyhow::bail!("device must be \"cpu\", \"cuda\" or \"cuda:N\" (N a GPU index), got {s:?}")
                }
            },
        }
    }
}

impl std::fmt::Display for DeviceName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DeviceName::Cpu => write!(f, "cpu"),
            DeviceName::Cuda(n) => write!(f, "cuda:{n}"),
        }
    }
}

impl DeviceName {
    /// The device it names; a GPU without a `--features cuda` build, or that is not there,
    /// is an error that says so.
    pub fn open(self) -> Result<Device> {
        match self {
            DeviceName::Cpu => Ok(Device::Cpu),
            DeviceName::Cuda(n) => cuda(n).with_context(|| {
                format!("{self}: no such CUDA device (a GPU needs a `--features cuda` build of guirl, docs/cuda.md)")
            }),
        }
    }
}

/// An open device as a config names it (`cpu`, `cuda:N`), for what a report records.
pub fn name_of(dev: &Device) -> String {
    match dev.location() {
        candle_core::DeviceLocation::Cpu => "cpu".into(),
        candle_core::DeviceLocation::Cuda { gpu_id } => format!("cuda:{gpu_id}"),
        candle_core::DeviceLocation::Metal { gpu_id } => format!("metal:{gpu_id}"),
    }
}

/// A Qwen-VL policy's weight dtype named on a command line (`--dtype f32|bf16`, the
/// benches' flag): the two it loads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum DtypeFlag {
    /// 32-bit floats.
    F32,
    /// bfloat16.
    Bf16,
}

impl DtypeFlag {
    /// As the policy's settings write it (`[model] dtype`).
    pub fn name(self) -> &'static str {
        match self {
            DtypeFlag::F32 => "f32",
            DtypeFlag::Bf16 => "bf16",
        }
    }
}

/// CUDA device `ordinal` on a stream of its own, set up as above; `GUIRL_CUDA_DEFAULTS=1`
/// keeps cudarc's events and the driver's pool setting (to measure the difference).
pub fn cuda(ordinal: usize) -> Result<Device> {
    let dev = Device::new_cuda_with_stream(ordinal)?;
    if std::env::var_os("GUIRL_CUDA_DEFAULTS").is_none_or(|v| v == "0") {
        one_stream(&dev)?;
    }
    Ok(dev)
}

/// Another handle on `dev`'s GPU, on a stream of its own and set up as [`cuda`]: work queued
/// through it runs beside `dev`'s, unordered with it (a collection beside the update).
/// Tensors do not move between the two but by `to_device`, after the source's
/// `synchronize`. `None` on a CPU.
pub fn second_stream(dev: &Device) -> Result<Option<Device>> {
    second_stream_of(dev)
}

#[cfg(feature = "cuda")]
fn second_stream_of(dev: &Device) -> Result<Option<Device>> {
    let Device::Cuda(c) = dev else { return Ok(None) };
    Ok(Some(cuda(c.cuda_stream().context().ordinal())?))
}

#[cfg(not(feature = "cuda"))]
fn second_stream_of(_dev: &Device) -> Result<Option<Device>> {
    Ok(None)
}

#[cfg(feature = "cuda")]
fn one_stream(dev: &Device) -> Result<()> {
    use candle_core::cuda_backend::cudarc::driver::{result, sys};
    let Device::Cuda(cuda) = dev else { return Ok(()) };
    // SAFETY: guirl never hands a tensor to another stream but through `to_device` after a
    // synchronisation (`second_stream`): all of a device's work is queued on its one stream,
    // whatever thread issues it, so the per-buffer events order nothing that the stream does
    // not already order. Buffers made before this call keep their events, harmlessly.
    unsafe { cuda.disable_event_tracking() };
    let ctx = cuda.cuda_stream().context().clone();
    ctx.bind_to_thread()?;
    // SAFETY: the device comes from a live context; the attribute is a u64, as the driver
    // documents for the release threshold.
    unsafe {
        let pool = result::device::get_default_mem_pool(ctx.cu_device())?;
        let mut keep = u64::MAX;
        result::mem_pool::set_attribute(
            pool,
            sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
            (&mut keep as *mut u64).cast(),
        )?;
    }
    Ok(())
}

#[cfg(not(feature = "cuda"))]
fn one_stream(_dev: &Device) -> Result<()> {
    Ok(())
}

/// Bytes `dev` can still allocate: the memory free on the card plus what the memory pool
/// keeps unused (guirl keeps freed memory there, see above, so the card's free memory alone
/// would miss it). `None` on a CPU.
pub fn allocatable(dev: &Device) -> Result<Option<u64>> {
    allocatable_on(dev)
}

#[cfg(feature = "cuda")]
fn allocatable_on(dev: &Device) -> Result<Option<u64>> {
    use candle_core::cuda_backend::cudarc::driver::{result, sys};
    let Device::Cuda(cuda) = dev else { return Ok(None) };
    let ctx = cuda.cuda_stream().context().clone();
    let (free, _) = ctx.mem_get_info()?;
    let (mut reserved, mut used) = (0u64, 0u64);
    // SAFETY: the device comes from a live, bound context; both attributes are u64s, as the
    // driver documents them.
    unsafe {
        let pool = result::device::get_default_mem_pool(ctx.cu_device())?;
        for (attr, out) in [
            (sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &mut reserved),
            (sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &mut used),
        ] {
            result::mem_pool::get_attribute(pool, attr, (out as *mut u64).cast())?;
        }
    }
    Ok(Some(free as u64 + reserved.saturating_sub(used)))
}

#[cfg(not(feature = "cuda"))]
fn allocatable_on(_dev: &Device) -> Result<Option<u64>> {
    Ok(None)
}

/// Start (`true`) or stop (`false`) the range a profiler started with
/// `ncu --profile-from-start off` records (the driver's `cuProfilerStart`/`Stop`), so that
/// it records a few decoding steps rather than a whole run; without a profiler attached, or
/// on a CPU, nothing happens.
pub fn profiler_range(dev: &Device, on: bool) -> Result<()> {
    dev.synchronize()?;
    profiler_call(dev, on)
}

#[cfg(feature = "cuda")]
fn profiler_call(dev: &Device, on: bool) -> Result<()> {
    use candle_core::cuda_backend::cudarc::driver::sys;
    let Device::Cuda(cuda) = dev else { return Ok(()) };
    cuda.cuda_stream().context().bind_to_thread()?;
    // SAFETY: a plain driver call on the bound context; it takes no arguments.
    let r = unsafe {
        if on {
            sys::cuProfilerStart()
        } else {
            sys::cuProfilerStop()
        }
    };
    anyhow::ensure!(
        r == sys::CUresult::CUDA_SUCCESS,
        "cuProfiler{}: {r:?}",
        if on { "Start" } else { "Stop" }
    );
    Ok(())
}

#[cfg(not(feature = "cuda"))]
fn profiler_call(_dev: &Device, _on: bool) -> Result<()> {
    Ok(())
}
