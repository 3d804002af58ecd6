//! Seeds of the trainer's random draws.

use rand::SeedableRng;

/// The first seed of the test split: task seeds from here on are what published figures
/// are measured on, so no config may train or validate on them.
pub const TEST_SEEDS: u64 = 2_000_000;
use rand_chacha::ChaCha8Rng;

/// Deterministic per-(seed, iteration, purpose) generator, so a resumed run draws exactly
/// what an uninterrupted one would without saving generator state.
pub fn rng_for(seed: u64, iteration: u64, purpose: u64) -> ChaCha8Rng {
    ChaCha8Rng::seed_from_u64(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ (iteration << 8) ^ purpose)
}

/// The key of one training pass's randomness (LoRA dropout): the run's seed, the iteration,
/// a purpose (which loop), the epoch and the minibatch. Independent of how many draws other
/// passes made, so a resumed run gets the same keys.
pub fn pass_key(seed: u64, iteration: u64, purpose: u64, epoch: u64, minibatch: u64) -> u64 {
    use rand::RngCore;
    let mut rng = rng_for(seed, iteration, purpose);
    rng.set_stream((epoch << 32) ^ minibatch);
    rng.next_u64()
}
