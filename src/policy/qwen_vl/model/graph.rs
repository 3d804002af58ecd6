//! A window chunk's decoding step captured once as a CUDA graph and replayed at every later
//! step (`decode_graph`): the host then issues one launch a step instead of every layer's
//! kernels, which bound a step on a GPU (docs/gpu.md, rollout decoding).
//!
//! The step (its body) reads only what lives at fixed addresses for the chunk's life: the
//! weights, the chunk's key and value buffers and its step inputs, written before each step
//! (`slots::StepInputs`). Its first step runs uncaptured with candle's upload cache on, which
//! keeps the dims and strides its strided kernels upload on the device; the second is
//! captured into a graph, its output copied into a buffer of the chunk, and launched; every
//! later step launches the graph. Where capture fails (an operation a graph cannot hold),
//! the log says so once and the chunk's steps run uncaptured from then on: same results,
//! no speed-up. On a CPU, or in a build without CUDA, every step runs as it comes.

use anyhow::Result;
use candle_core::{Device, Tensor};

/// A chunk's steps: captured, or run as they come.
pub(crate) enum StepGraph {
    /// Every step runs uncaptured (`decode_graph` off, or its capture failed).
    Off,
    /// The next step runs uncaptured to fill candle's upload cache.
    First,
    /// The next step is captured; `out` holds the step's output `[R, H]`.
    #[cfg(feature = "cuda")]
    Warm { out: Tensor },
    /// Every step launches the graph, which writes `out`.
    #[cfg(feature = "cuda")]
    Captured { graph: cuda::Graph, out: Tensor },
}

impl StepGraph {
    /// `First` with `capture`, else `Off`.
    pub(crate) fn new(capture: bool) -> Self {
        if capture {
            StepGraph::First
        } else {
            StepGraph::Off
        }
    }

    /// Run one step, `body` (which reads only the chunk's fixed buffers and the weights), on
    /// `device`: as it comes, or captured, or by launching the captured graph. The output
    /// of a captured step is the chunk's buffer, valid until its next step.
    pub(crate) fn step(&mut self, device: &Device, body: impl Fn() -> Result<Tensor>) -> Result<Tensor> {
        match device {
            #[cfg(feature = "cuda")]
            Device::Cuda(dev) => self.step_cuda(dev, body),
            _ => body(),
        }
    }

    #[cfg(feature = "cuda")]
    fn step_cuda(
        &mut self,
        dev: &candle_core::CudaDevice,
        body: impl Fn() -> Result<Tensor>,
    ) -> Result<Tensor> {
        match std::mem::replace(self, StepGraph::Off) {
            StepGraph::Off => body(),
            StepGraph::First => {
                let _cache = dev.enable_cuda_graph_htod_cache();
                let out = body()?.copy()?;
                *self = StepGraph::Warm { out: out.clone() };
                Ok(out)
            }
            StepGraph::Warm { out } => match cuda::capture(dev, &out, &body) {
                Ok(graph) => {
                    graph.launch()?;
                    *self = StepGraph::Captured { graph, out: out.clone() };
                    Ok(out)
                }
                Err(e) => {
                    tracing::warn!(
                        "model.decode_graph: a decoding step could not be captured as a CUDA graph ({e:#}); \
                         this chunk's steps run uncaptured"
                    );
                    body()
                }
            },
            StepGraph::Captured { graph, out } => {
                graph.launch()?;
                *self = StepGraph::Captured { graph, out: out.clone() };
                Ok(out)
            }
        }
    }
}

#[cfg(feature = "cuda")]
mod cuda {
    use anyhow::{bail, Context, Result};
    use candle_core::cuda_backend::cudarc::driver::{sys, CudaGraph};
    use candle_core::Tensor;

    /// A captured step's graph.
    pub(crate) struct Graph(CudaGraph);

    // SAFETY: a graph is the driver's handles to an instantiated graph and the stream it
    // launches on; the driver allows them from any thread with the context bound, which
    // `CudaGraph::launch` does. A decoding session, which owns it, is used by one thread
    // at a time (`StepDecoder` takes `&mut self`).
    unsafe impl Send for Graph {}

    impl Graph {
        pub(crate) fn launch(&self) -> Result<()> {
            self.0.launch().context("launching a captured decoding step")
        }
    }

    /// Capture `body` on `dev`'s stream, its output copied into `out`, as a graph. Every
    /// temporary the body makes is freed before the capture ends, so the graph's
    /// allocations balance and it can be launched again and again. The capture always
    /// ends, also when the body fails, so the stream is left as it was.
    pub(crate) fn capture(
        dev: &candle_core::CudaDevice,
        out: &Tensor,
        body: &impl Fn() -> Result<Tensor>,
    ) -> Result<Graph> {
        let stream = dev.cuda_stream();
        let _cache = dev.enable_cuda_graph_htod_cache();
        // thread-local: another thread's work on the stream's context neither joins the
        // graph nor is refused while this thread captures
        stream
            .begin_capture(sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
            .context("beginning the capture")?;
        let ran = (|| -> Result<()> {
            let y = body()?;
            out.slice_set(&y, 0, 0)?;
            Ok(())
        })();
        let ended = stream.end_capture(sys::CUgraphInstantiate_flags(0));
        ran?;
        match ended.context("ending the capture")? {
            Some(graph) => Ok(Graph(graph)),
            None => bail!("the capture recorded nothing"),
        }
    }
}
