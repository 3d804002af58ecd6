// A few rows by a weight stored in rows (src/nn/decode/rows.rs): y[r, j] = x[r, :] . w[j, :]
// (+ bias[j]) for the M rows of x [M, K] and the N rows of w [N, K], summed in f32 and
// rounded once. A decoding step's products read each weight once for a few rows: memory,
// not arithmetic, so every lane streams its share of a weight row with 16-byte loads and
// dots it with all M rows while it is in the registers.
//
// Defined by the host: T (float, or unsigned short for bf16's bits), VEC (elements in 16
// bytes), M (rows), SPLIT (warps sharing one weight row, each over K / SPLIT of it), WARPS
// (warps a block). A column's sum runs in an order fixed by K, SPLIT and the lane alone
// (each lane's elements in order, fmaf; the lanes by a butterfly; the SPLIT parts in
// order), never by M: a row's bits do not depend on the other rows nor on their count.
// Element access (ld, st): src/nn/kernel/elems.cuh, put in front.

__device__ __forceinline__ void unpack(const float4& v, float* f) {
  f[0] = v.x; f[1] = v.y; f[2] = v.z; f[3] = v.w;
}
__device__ __forceinline__ void unpack(const uint4& v, float* f) {
  const unsigned int u[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; i++) {
    f[2 * i] = __uint_as_float(u[i] << 16);
    f[2 * i + 1] = __uint_as_float(u[i] & 0xffff0000u);
  }
}
#if VEC == 4
typedef float4 Pack;
#else
typedef uint4 Pack;
#endif

// Grid: one block per WARPS / SPLIT weight rows; `has_bias` selects the bias.
extern "C" __global__ void __launch_bounds__(WARPS * 32)
    decode_rows(const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ bias,
                T* __restrict__ y, int n, int k, int has_bias) {
  __shared__ float parts[WARPS][M];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int part = warp % SPLIT;
  const long j = (long)blockIdx.x * (WARPS / SPLIT) + warp / SPLIT;
  const int len = k / SPLIT;  // the host makes it a multiple of VEC
  float acc[M];
#pragma unroll
  for (int r = 0; r < M; r++) acc[r] = 0.f;
  if (j < n) {
    const T* wr = w + j * k + (long)part * len;
    const T* xr = x + (long)part * len;
#pragma unroll 4
    for (int i = lane * VEC; i < len; i += 32 * VEC) {
      float wv[VEC];
      unpack(__ldg(reinterpret_cast<const Pack*>(wr + i)), wv);
#pragma unroll
      for (int r = 0; r < M; r++) {
        float xv[VEC];
        unpack(__ldg(reinterpret_cast<const Pack*>(xr + (long)r * k + i)), xv);
#pragma unroll
        for (int e = 0; e < VEC; e++) acc[r] = fmaf(wv[e], xv[e], acc[r]);
      }
    }
  }
#pragma unroll
  for (int r = 0; r < M; r++) {
    float v = acc[r];
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    acc[r] = v;
  }
  if (SPLIT > 1) {
    if (lane == 0) {
#pragma unroll
      for (int r = 0; r < M; r++) parts[warp][r] = acc[r];
    }
    __syncthreads();
    if (lane == 0 && part == 0) {
#pragma unroll
      for (int r = 0; r < M; r++) {
        float s = 0.f;
        for (int p = 0; p < SPLIT; p++) s += parts[warp + p][r];
        acc[r] = s;
      }
    }
  }
  if (lane == 0 && part == 0 && j < n) {
#pragma unroll
    for (int r = 0; r < M; r++) st(y, (long)r * n + j, has_bias ? acc[r] + ld(bias, j) : acc[r]);
  }
}
