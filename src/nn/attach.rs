//! Outputs computed outside candle's graph, hung back on it with a backward of our own.
//!
//! A fused kernel (candle's, or one of ours) computes a layer's output with no graph;
//! [`attach`] (one input), [`attach2`] and [`attach3`] make that output a node of the
//! inputs' graph whose backward is a given closure. The kernels in this folder, the
//! Qwen-VL layers and gradient checkpointing all build on them.

use candle_core::{CpuStorage, CustomOp1, CustomOp2, CustomOp3, Layout, Result, Shape, Storage, Tensor};
use std::sync::{Arc, Mutex};

/// A backward: `(input, output, ∂L/∂output) → ∂L/∂input`.
type Backward = dyn Fn(&Tensor, &Tensor, &Tensor) -> Result<Option<Tensor>> + Send + Sync;

/// `y` (computed from `x` outside the graph) as a node of `x`'s graph whose backward is
/// `bwd`. Without a graph behind `x`, `y` itself.
pub fn attach(
    x: &Tensor,
    y: Tensor,
    name: &'static str,
    bwd: impl Fn(&Tensor, &Tensor, &Tensor) -> Result<Option<Tensor>> + Send + Sync + 'static,
) -> Result<Tensor> {
    if !x.track_op() {
        return Ok(y);
    }
    let op = Attached { out: Handover::new(name, y), bwd: Box::new(bwd) };
    x.apply_op1_arc(Arc::new(Box::new(op)))
}

/// The op [`attach`] applies.
struct Attached {
    out: Handover,
    bwd: Box<Backward>,
}

/// An output computed outside the graph, handed to the op's forward once: the op lives as
/// long as the graph, the output should not be kept twice. Shared by every op here (the
/// checkpointed decoder layer attaches through [`attach2`]).
struct Handover {
    name: &'static str,
    out: Mutex<Option<Tensor>>,
}

impl Handover {
    fn new(name: &'static str, y: Tensor) -> Self {
        Handover { name, out: Mutex::new(Some(y)) }
    }

    /// The output's storage (a copy; `y` is dropped) and shape, on the CPU.
    fn cpu(&self) -> Result<(CpuStorage, Shape)> {
        match self.owned()? {
            (Storage::Cpu(c), shape) => Ok((c, shape)),
            _ => candle_core::bail!("{}: the output is not on the CPU", self.name),
        }
    }

    /// The same on the GPU.
    #[cfg(feature = "cuda")]
    fn cuda(&self) -> Result<(candle_core::CudaStorage, Shape)> {
        match self.owned()? {
            (Storage::Cuda(c), shape) => Ok((c, shape)),
            _ => candle_core::bail!("{}: the output is not on the GPU", self.name),
        }
    }

    fn owned(&self) -> Result<(Storage, Shape)> {
        let y = self
            .out
            .lock()
            .map_err(|_| candle_core::Error::Msg(format!("{}: lock poisoned", self.name)))?
            .take();
        let y = y.ok_or_else(|| candle_core::Error::Msg(format!("{}: forward ran twice", self.name)))?;
        let y = if y.layout().start_offset() == 0 && y.is_contiguous() { y } else { y.copy()? };
        let (storage, layout) = y.storage_and_layout();
        Ok((storage.try_clone(layout)?, layout.shape().clone()))
    }
}

impl CustomOp1 for Attached {
    fn name(&self) -> &'static str {
        self.out.name
    }

    fn cpu_fwd(&self, _: &CpuStorage, _: &Layout) -> Result<(CpuStorage, Shape)> {
        self.out.cpu()
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(
        &self,
        _: &candle_core::CudaStorage,
        _: &Layout,
    ) -> Result<(candle_core::CudaStorage, Shape)> {
        self.out.cuda()
    }

    fn bwd(&self, arg: &Tensor, res: &Tensor, grad: &Tensor) -> Result<Option<Tensor>> {
        (self.bwd)(arg, res, grad)
    }
}

/// Gradients of a two-input node, one per input (`None`: not needed).
pub type Grads2 = (Option<Tensor>, Option<Tensor>);

/// A two-input backward: `(inputs, ∂L/∂output) → ∂L/∂inputs`.
type Backward2 = dyn Fn([&Tensor; 2], &Tensor) -> Result<Grads2> + Send + Sync;

/// [`attach`] for an output of two inputs, either of which may be in the graph (a norm's
/// input and its weight, SwiGLU's gate and up projections).
pub fn attach2(
    [t1, t2]: [&Tensor; 2],
    y: Tensor,
    name: &'static str,
    bwd: impl Fn([&Tensor; 2], &Tensor) -> Result<Grads2> + Send + Sync + 'static,
) -> Result<Tensor> {
    let op = Attached2 { out: Handover::new(name, y), bwd: Box::new(bwd) };
    t1.apply_op2_arc(t2, Arc::new(Box::new(op)))
}

/// The op [`attach2`] applies.
struct Attached2 {
    out: Handover,
    bwd: Box<Backward2>,
}

impl CustomOp2 for Attached2 {
    fn name(&self) -> &'static str {
        self.out.name
    }

    fn cpu_fwd(&self, _: &CpuStorage, _: &Layout, _: &CpuStorage, _: &Layout) -> Result<(CpuStorage, Shape)> {
        self.out.cpu()
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(
        &self,
        _: &candle_core::CudaStorage,
        _: &Layout,
        _: &candle_core::CudaStorage,
        _: &Layout,
    ) -> Result<(candle_core::CudaStorage, Shape)> {
        self.out.cuda()
    }

    fn bwd(&self, t1: &Tensor, t2: &Tensor, _: &Tensor, g: &Tensor) -> Result<Grads2> {
        (self.bwd)([t1, t2], g)
    }
}

/// Gradients of a three-input node, one per input (`None`: not needed).
pub type Grads3 = (Option<Tensor>, Option<Tensor>, Option<Tensor>);

/// A three-input backward: `(inputs, ∂L/∂output) → ∂L/∂inputs`.
type Backward3 = dyn Fn([&Tensor; 3], &Tensor) -> Result<Grads3> + Send + Sync;

/// [`attach`] for an output of three inputs, any of which may be in the graph (a layer's
/// input and its trained adapter matrices, attention's q, k and v).
pub fn attach3(
    [t1, t2, t3]: [&Tensor; 3],
    y: Tensor,
    name: &'static str,
    bwd: impl Fn([&Tensor; 3], &Tensor) -> Result<Grads3> + Send + Sync + 'static,
) -> Result<Tensor> {
    let op = Attached3 { out: Handover::new(name, y), bwd: Box::new(bwd) };
    t1.apply_op3_arc(t2, t3, Arc::new(Box::new(op)))
}

/// The op [`attach3`] applies.
struct Attached3 {
    out: Handover,
    bwd: Box<Backward3>,
}

impl CustomOp3 for Attached3 {
    fn name(&self) -> &'static str {
        self.out.name
    }

    fn cpu_fwd(
        &self,
        _: &CpuStorage,
        _: &Layout,
        _: &CpuStorage,
        _: &Layout,
        _: &CpuStorage,
        _: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        self.out.cpu()
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(
        &self,
        _: &candle_core::CudaStorage,
        _: &Layout,
        _: &candle_core::CudaStorage,
        _: &Layout,
        _: &candle_core::CudaStorage,
        _: &Layout,
    ) -> Result<(candle_core::CudaStorage, Shape)> {
        self.out.cuda()
    }

    fn bwd(&self, t1: &Tensor, t2: &Tensor, t3: &Tensor, _: &Tensor, g: &Tensor) -> Result<Grads3> {
        (self.bwd)([t1, t2, t3], g)
    }
}
