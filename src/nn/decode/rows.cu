// A few rows by a weight stored in rows (src/nn/decode/rows.rs): y[r, j] = x[r, :] . w[j, :]
// (+ bias[j]) for the M rows of x [M, K] and the N rows of w [N, K], summed in f32 and
// rounded once. A decoding step's products read each weight once for a few rows: memory,
// not arithmetic, so every lane streams its share of C weight rows with 16-byte loads and
// dots them with all M rows while they are in the registers: each input row read serves C
// weight rows, so the input's reads (from L1) stay below the weight's (from memory).
//
// Defined by the host: T (float, or unsigned short for bf16's bits), VEC (elements in 16
// bytes), M (rows), C (weight rows a warp takes together), SPLIT (warps sharing them, each
// over K / SPLIT of them), WARPS (warps a block), UNROLL (iterations of a lane's loop in
// flight). A column's sum runs in an order fixed by K, SPLIT and the lane alone (each
// lane's elements in order, fmaf; the lanes by a butterfly; the SPLIT parts in order),
// never by M: a row's bits do not depend on the other rows nor on their count.
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
// `#pragma unroll` with a defined count (a pragma's own argument is not macro-expanded)
#define PRAGMA(x) _Pragma(#x)
#define UNROLLED(n) PRAGMA(unroll n)

#if VEC == 4
typedef float4 Pack;
#else
typedef uint4 Pack;
#endif

// Grid: one block per WARPS / SPLIT groups of C weight rows; `has_bias` selects the bias.
extern "C" __global__ void __launch_bounds__(WARPS * 32)
    decode_rows(const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ bias,
                T* __restrict__ y, int n, int k, int has_bias) {
  __shared__ float parts[WARPS][C][M];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int part = warp % SPLIT;
  const long j0 = ((long)blockIdx.x * (WARPS / SPLIT) + warp / SPLIT) * C;
  const int len = k / SPLIT;  // the host makes it a multiple of VEC
  float acc[C][M];
#pragma unroll
  for (int c = 0; c < C; c++)
#pragma unroll
    for (int r = 0; r < M; r++) acc[c][r] = 0.f;
  if (j0 < n) {
    const T* xr = x + (long)part * len;
    // a group's columns past the last weight row read that row again, never stored
    const T* wr[C];
#pragma unroll
    for (int c = 0; c < C; c++) wr[c] = w + (j0 + c < n ? j0 + c : n - 1) * k + (long)part * len;
    UNROLLED(UNROLL)
    for (int i = lane * VEC; i < len; i += 32 * VEC) {
      float wv[C][VEC];
#pragma unroll
      for (int c = 0; c < C; c++) unpack(__ldg(reinterpret_cast<const Pack*>(wr[c] + i)), wv[c]);
#pragma unroll
      for (int r = 0; r < M; r++) {
        float xv[VEC];
        unpack(__ldg(reinterpret_cast<const Pack*>(xr + (long)r * k + i)), xv);
#pragma unroll
        for (int c = 0; c < C; c++)
#pragma unroll
          for (int e = 0; e < VEC; e++) acc[c][r] = fmaf(wv[c][e], xv[e], acc[c][r]);
      }
    }
  }
#pragma unroll
  for (int c = 0; c < C; c++)
#pragma unroll
    for (int r = 0; r < M; r++) {
      float v = acc[c][r];
      for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
      acc[c][r] = v;
    }
  if (SPLIT > 1) {
    if (lane == 0) {
#pragma unroll
      for (int c = 0; c < C; c++)
#pragma unroll
        for (int r = 0; r < M; r++) parts[warp][c][r] = acc[c][r];
    }
    __syncthreads();
    if (lane == 0 && part == 0) {
#pragma unroll
      for (int c = 0; c < C; c++)
#pragma unroll
        for (int r = 0; r < M; r++) {
          float s = 0.f;
          for (int p = 0; p < SPLIT; p++) s += parts[warp + p][c][r];
          acc[c][r] = s;
        }
    }
  }
  if (lane == 0 && part == 0) {
#pragma unroll
    for (int c = 0; c < C; c++) {
      const long j = j0 + c;
      if (j < n) {
#pragma unroll
        for (int r = 0; r < M; r++) st(y, (long)r * n + j, has_bias ? acc[c][r] + ld(bias, j) : acc[c][r]);
      }
    }
  }
}
