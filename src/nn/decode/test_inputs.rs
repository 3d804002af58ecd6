//! Inputs the decoding kernels' tests share: seeded uniform tensors on the CPU.

use candle_core::{Device, Tensor};
use rand::{Rng, SeedableRng};

/// `dims` of f32 drawn uniformly from [−half, half) by a generator seeded `seed`.
pub(crate) fn uniform(dims: &[usize], seed: u64, half: f32) -> Tensor {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let n = dims.iter().product();
    let data: Vec<f32> = (0..n).map(|_| rng.gen_range(-half..half)).collect();
    Tensor::from_vec(data, dims, &Device::Cpu).unwrap()
}

/// [`uniform`] over [−1, 1).
pub(crate) fn randn(dims: &[usize], seed: u64) -> Tensor {
    uniform(dims, seed, 1.0)
}
