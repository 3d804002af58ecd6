//! Gradients summed on the GPUs with NCCL (the `nccl` feature), instead of through the host.
//!
//! The TCP group stays the control channel (rendezvous, episodes, statistics, decisions);
//! NCCL carries only the one large exchange of every minibatch, the flattened adapter
//! gradients. Its communicator runs on candle's own stream, so the sum is ordered after
//! the backward that made the gradients and before the optimizer step that reads them,
//! with no host synchronisation in between.

use anyhow::{bail, Context};
use candle_core::cuda_backend::cudarc::nccl::{Comm, Id, ReduceOp};
use candle_core::cuda_backend::CudaStorage;
use candle_core::{CustomOp1, Device, Layout, Shape, Tensor};
use std::sync::Mutex;

/// One rank's NCCL communicator, on the CUDA device its gradients live on.
pub struct Nccl {
    comm: Mutex<Comm>,
    ordinal: usize,
}

// SAFETY: a communicator may be used from any thread as long as its calls do not overlap;
// every call goes through the mutex.
unsafe impl Send for Nccl {}
unsafe impl Sync for Nccl {}

/// Draw a new NCCL id (rank 0 does, and sends it to the others), as bytes; an error is a
/// message every rank reports, so no rank blocks in an initialisation the others will never join.
pub fn draw_id() -> Result<Vec<u8>, String> {
    Id::new().map(|id| id.internal().map(|c| c as u8).to_vec()).map_err(|e| {
        format!("NCCL could not draw its id ({e:?}); set GUIRL_DIST_BACKEND=tcp to sum gradients through the host")
    })
}

impl Nccl {
    /// Join the communicator of `world` ranks named by `id` (rank 0's [`draw_id`]) as
    /// `rank`, on `device` (collective: every rank calls it at the same point).
    pub fn join(id: &[u8], rank: usize, world: usize, device: &Device) -> anyhow::Result<Nccl> {
        let Device::Cuda(dev) = device else { bail!("NCCL needs a CUDA device, not {device:?}") };
        let mut internal = [0 as std::ffi::c_char; 128];
        anyhow::ensure!(id.len() == internal.len(), "rank 0 sent a malformed NCCL id");
        for (c, &b) in internal.iter_mut().zip(id) {
            *c = b as std::ffi::c_char;
        }
        let ordinal = dev.cuda_stream().context().ordinal();
        let comm = Comm::from_rank(dev.cuda_stream(), rank, world, Id::uninit(internal)).map_err(|e| {
            anyhow::anyhow!(
                "NCCL could not join rank {rank} of {world} on cuda:{ordinal} ({e:?}); two ranks on one GPU \
                 is the usual cause (NCCL refuses it): give each rank its own GPU",
            )
        })?;
        Ok(Nccl { comm: Mutex::new(comm), ordinal })
    }

    /// The sum over the ranks of a contiguous f32 tensor on this communicator's device.
    pub fn sum_f32(&self, t: &Tensor) -> anyhow::Result<Tensor> {
        match t.device() {
            Device::Cuda(d) if d.cuda_stream().context().ordinal() == self.ordinal => {}
            other => bail!("NCCL's communicator is on cuda:{}, the tensor on {other:?}", self.ordinal),
        }
        let comm = self.comm.lock().expect("NCCL lock");
        t.contiguous()?.apply_op1_no_bwd(&Sum(&comm)).context("NCCL all-reduce")
    }
}

/// `ncclAllReduce(sum)` as a candle op: a new buffer with every rank's tensor added.
struct Sum<'a>(&'a Comm);

impl CustomOp1 for Sum<'_> {
    fn name(&self) -> &'static str {
        "nccl-all-reduce-sum"
    }

    fn cpu_fwd(
        &self,
        _: &candle_core::CpuStorage,
        _: &Layout,
    ) -> candle_core::Result<(candle_core::CpuStorage, Shape)> {
        candle_core::bail!("NCCL sums CUDA tensors only")
    }

    fn cuda_fwd(&self, s: &CudaStorage, l: &Layout) -> candle_core::Result<(CudaStorage, Shape)> {
        let Some((start, end)) = l.contiguous_offsets() else {
            candle_core::bail!("NCCL needs a contiguous tensor")
        };
        let src = s.as_cuda_slice::<f32>()?.slice(start..end);
        let dev = s.device.clone();
        // SAFETY: NCCL writes every element of `dst` before anything reads it.
        let mut dst = unsafe { dev.alloc::<f32>(end - start)? };
        self.0
            .all_reduce(&src, &mut dst, &ReduceOp::Sum)
            .map_err(|e| candle_core::Error::Msg(format!("{e:?}")))?;
        Ok((CudaStorage::wrap_cuda_slice(dst, dev), l.shape().clone()))
    }
}
