// Keyed dropout masks (src/nn/dropout.rs): element i is 0 where the i-th output of the
// SplitMix64 stream seeded `seed` has its top 32 bits below `cut`, else `keep`; the same
// integers the CPU computes, so both devices draw the same mask.

extern "C" __global__ void dropout_mask_f32(float* out, unsigned long long n, unsigned long long seed,
                                            unsigned long long cut, float keep) {
  const unsigned long long stride = (unsigned long long)blockDim.x * gridDim.x;
  for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
    unsigned long long z = seed + (i + 1ULL) * 0x9E3779B97F4A7C15ULL;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    z ^= z >> 31;
    out[i] = (z >> 32) < cut ? 0.0f : keep;
  }
}
