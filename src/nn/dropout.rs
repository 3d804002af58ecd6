//! Inverted-dropout masks drawn on the tensor's own device from a key, never from a global
//! generator: element `i` of the mask keyed `(key, id)` is the `i`-th output of a
//! SplitMix64 stream seeded by both, so the same key gives the same mask on every call (a
//! checkpointed layer's recomputation draws what its forward drew) and on every device
//! (the CPU and `dropout.cu` compute the same integers).
//!
//! A mask is as large as the activations it drops (LoRA dropout: every adapter's input,
//! about 1.4 G values for a minibatch of 8 prompts of a 2B model): drawn on the host it
//! would cost seconds and a copy to the GPU per minibatch, where the update's passes take a
//! fraction of one. On a GPU one kernel writes it; on the CPU the threads share it.

use candle_core::{CpuStorage, CustomOp1, DType, Device, Layout, Result, Shape, Tensor};
use rayon::prelude::*;

/// The golden-ratio increment of SplitMix64's state.
const GOLDEN: u64 = 0x9E37_79B9_7F4A_7C15;

/// SplitMix64's output function.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The seed of the stream keyed `(key, id)`.
fn seed(key: u64, id: u64) -> u64 {
    mix(key ^ mix(id.wrapping_add(GOLDEN)))
}

/// Element `i` of the stream seeded `seed`: 32 uniform bits.
fn bits(seed: u64, i: u64) -> u32 {
    (mix(seed.wrapping_add(i.wrapping_add(1).wrapping_mul(GOLDEN))) >> 32) as u32
}

/// An f32 inverted-dropout mask of `shape` on `device`: each element 0 with probability
/// `p`, else `1 / (1 − p)`, a function of `(key, id)` and its index alone.
pub fn keyed_mask(key: u64, id: u64, p: f64, shape: &Shape, device: &Device) -> Result<Tensor> {
    if !(0.0..1.0).contains(&p) {
        candle_core::bail!("dropout probability {p}: want 0 ≤ p < 1");
    }
    let op = MaskOp {
        seed: seed(key, id),
        // u < p ⇔ bits < p·2³² (bits uniform on 0..2³²)
        cut: (p * 4_294_967_296.0) as u64,
        keep: (1.0 / (1.0 - p)) as f32,
        shape: shape.clone(),
    };
    Tensor::zeros(1, DType::F32, device)?.apply_op1_no_bwd(&op)
}

/// The mask's op: its stream, threshold, kept value and shape (its input only says where).
pub(crate) struct MaskOp {
    pub(crate) seed: u64,
    pub(crate) cut: u64,
    pub(crate) keep: f32,
    pub(crate) shape: Shape,
}

impl CustomOp1 for MaskOp {
    fn name(&self) -> &'static str {
        "keyed-dropout-mask"
    }

    fn cpu_fwd(&self, _: &CpuStorage, _: &Layout) -> Result<(CpuStorage, Shape)> {
        let mut out = vec![0f32; self.shape.elem_count()];
        const CHUNK: usize = 1 << 16;
        out.par_chunks_mut(CHUNK).enumerate().for_each(|(c, chunk)| {
            for (j, v) in chunk.iter_mut().enumerate() {
                let i = (c * CHUNK + j) as u64;
                *v = if (bits(self.seed, i) as u64) < self.cut { 0.0 } else { self.keep };
            }
        });
        Ok((CpuStorage::F32(out), self.shape.clone()))
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(
        &self,
        s: &candle_core::CudaStorage,
        l: &Layout,
    ) -> Result<(candle_core::CudaStorage, Shape)> {
        super::kernel::cuda::run(self, &[(s, l)])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn values(t: &Tensor) -> Vec<f32> {
        t.flatten_all().unwrap().to_vec1().unwrap()
    }

    #[test]
    fn masks_are_keyed_scaled_and_drop_about_p() {
        let shape = Shape::from((3, 70_000));
        let m = values(&keyed_mask(7, 2, 0.25, &shape, &Device::Cpu).unwrap());
        assert_eq!(m.len(), 210_000);
        let keep = 1.0 / 0.75;
        assert!(m.iter().all(|&v| v == 0.0 || v == keep as f32));
        let dropped = m.iter().filter(|&&v| v == 0.0).count() as f64 / m.len() as f64;
        assert!((dropped - 0.25).abs() < 0.005, "dropped {dropped}");
        // element i is the stream's i-th value, across the threads' chunks
        let s = seed(7, 2);
        for i in [0usize, 1, 65_535, 65_536, 131_073, 209_999] {
            let want =
                if (bits(s, i as u64) as u64) < (0.25 * 4_294_967_296.0) as u64 { 0.0 } else { keep as f32 };
            assert_eq!(m[i], want, "element {i}");
        }
        assert_eq!(m, values(&keyed_mask(7, 2, 0.25, &shape, &Device::Cpu).unwrap()), "same key, same mask");
        assert_ne!(m, values(&keyed_mask(8, 2, 0.25, &shape, &Device::Cpu).unwrap()), "another key");
        assert_ne!(m, values(&keyed_mask(7, 3, 0.25, &shape, &Device::Cpu).unwrap()), "another id");
        assert!(values(&keyed_mask(7, 2, 0.0, &shape, &Device::Cpu).unwrap()).iter().all(|&v| v == 1.0));
        assert!(keyed_mask(7, 2, 1.0, &shape, &Device::Cpu).is_err());
    }

    /// `dropout.cu` run on the host (`nn::kernel::host`, CUDA's threads emulated) draws the
    /// CPU's mask bit for bit, across blocks and a last block partly past the end.
    #[test]
    fn the_cuda_kernel_on_the_host_draws_the_cpus_mask() {
        for (key, p, shape) in [(7, 0.25, Shape::from((3, 700))), (9, 0.1, Shape::from(5))] {
            let cpu = keyed_mask(key, 2, p, &shape, &Device::Cpu).unwrap();
            let op = MaskOp {
                seed: seed(key, 2),
                cut: (p * 4_294_967_296.0) as u64,
                keep: (1.0 / (1.0 - p)) as f32,
                shape,
            };
            let on = Tensor::zeros(1, DType::F32, &Device::Cpu).unwrap();
            let host = crate::nn::kernel::host::run(&op, &[&on]).unwrap();
            assert_eq!(values(&host), values(&cpu));
        }
    }

    #[test]
    fn neighbouring_elements_and_keys_are_uncorrelated() {
        // the fraction of equal decisions between streams or neighbours is what chance gives
        let n = 100_000u64;
        let drop = |s: u64, i: u64| bits(s, i) < (1u32 << 31);
        let (a, b) = (seed(1, 0), seed(1, 1));
        let same_keys = (0..n).filter(|&i| drop(a, i) == drop(b, i)).count() as f64 / n as f64;
        let neighbours = (0..n).filter(|&i| drop(a, i) == drop(a, i + 1)).count() as f64 / n as f64;
        assert!((same_keys - 0.5).abs() < 0.01, "{same_keys}");
        assert!((neighbours - 0.5).abs() < 0.01, "{neighbours}");
    }
}
