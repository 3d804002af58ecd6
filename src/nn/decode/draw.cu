// Decoding's draw (src/nn/decode/draw.rs): one block per row; warp w owns the contiguous
// range [w*R, (w+1)*R) of the vocabulary (R a multiple of 32) and reads it 32 consecutive
// tokens at a time, lane l the l-th (coalesced). The warps' sums are prefix-summed in warp
// order, and the warp whose range holds the draw walks it 32 tokens at a time, so a row's
// token and log-probability depend on its own logits and draw alone.
// Element access (ld, neg_inf): src/nn/kernel/elems.cuh, put in front.

// the block's largest (value, index) pair, the smallest index among equal values; every
// thread gets it
__device__ void block_argmax(float* m, int* a, float* sm, int* sa) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    float m2 = __shfl_xor_sync(0xffffffffu, *m, o);
    int a2 = __shfl_xor_sync(0xffffffffu, *a, o);
    if (m2 > *m || (m2 == *m && a2 < *a)) { *m = m2; *a = a2; }
  }
  if (lane == 0) { sm[warp] = *m; sa[warp] = *a; }
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < nw; w++)
      if (sm[w] > sm[0] || (sm[w] == sm[0] && sa[w] < sa[0])) { sm[0] = sm[w]; sa[0] = sa[w]; }
  }
  __syncthreads();
  *m = sm[0];
  *a = sa[0];
  __syncthreads();
}

__device__ int block_max_int(int x, int* s) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) x = max(x, __shfl_xor_sync(0xffffffffu, x, o));
  if (lane == 0) s[warp] = x;
  __syncthreads();
  if (threadIdx.x == 0)
    for (int w = 1; w < nw; w++) s[0] = max(s[0], s[w]);
  __syncthreads();
  x = s[0];
  __syncthreads();
  return x;
}

// the warp's sum of `x`, the same on every lane (a butterfly)
__device__ __forceinline__ float warp_sum(float x) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}

__device__ __forceinline__ int warp_max_int(int x) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) x = max(x, __shfl_xor_sync(0xffffffffu, x, o));
  return x;
}

__device__ __forceinline__ int warp_min_int(int x) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) x = min(x, __shfl_xor_sync(0xffffffffu, x, o));
  return x;
}

template <typename T>
__device__ void draw(const T* x, const float* banned, const float* u, float* out, int v, float temp,
                     int greedy) {
  __shared__ float sm[32];
  __shared__ int sa[32];
  __shared__ float sw[32];
  __shared__ int s_tok;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  const T* row = x + (long)blockIdx.x * v;
  const int per = ((v + nw - 1) / nw + 31) / 32 * 32;
  const int lo = min(warp * per, v), hi = min(lo + per, v);
  // the row's largest z and its first index
  float m = neg_inf();
  int arg = v;
  for (int i = lo + lane; i < hi; i += 32) {
    float z = ld(row, i) / temp + banned[i];
    if (z > m) { m = z; arg = i; }
  }
  block_argmax(&m, &arg, sm, sa);
  // the warp's sum of exp(z - max) (each lane's tokens in order, then the butterfly) and its
  // last token with mass
  float s = 0.f;
  int last = -1;
  for (int i = lo + lane; i < hi; i += 32) {
    float p = expf(ld(row, i) / temp + banned[i] - m);
    if (p > 0.f) last = i;
    s += p;
  }
  s = warp_sum(s);
  last = warp_max_int(last);
  if (lane == 0) sw[warp] = s;
  if (threadIdx.x == 0) s_tok = -1;
  __syncthreads();
  if (threadIdx.x == 0) {
    float acc = 0.f;
    for (int w = 0; w < nw; w++) {
      float t = sw[w];
      sw[w] = acc;  // the warps before w
      acc += t;
    }
    sm[0] = acc;  // the row's total
  }
  __syncthreads();
  const float excl = sw[warp], total = sm[0];
  const int last_row = block_max_int(last, sa);
  if (!greedy) {
    const float target = u[blockIdx.x] * total;
    // the same on every lane of the warp: its walk is the warp's alone
    if (excl <= target && target < excl + s) {
      const float rest = target - excl;
      float acc = 0.f;
      int tok = last;  // rounding carried the draw past the walk: the warp's last with mass
      for (int base = lo; base < hi; base += 32) {
        const int i = base + lane;
        const float p = i < hi ? expf(ld(row, i) / temp + banned[i] - m) : 0.f;
        float incl = p;
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
          float y = __shfl_up_sync(0xffffffffu, incl, o);
          if (lane >= o) incl += y;
        }
        const float step = __shfl_sync(0xffffffffu, incl, 31);
        if (acc + step > rest) {
          const int first = warp_min_int(acc + incl > rest ? lane : 32);
          if (first < 32) tok = base + first;
          break;
        }
        acc += step;
      }
      if (lane == 0) s_tok = tok;
    }
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    int tok = greedy ? arg : (s_tok >= 0 ? s_tok : last_row);
    if (tok < 0 || tok >= v) tok = 0;  // a row with no token of mass: nothing to draw
    float z = ld(row, tok) / temp + banned[tok];
    out[2 * (long)blockIdx.x] = (float)tok;
    out[2 * (long)blockIdx.x + 1] = z - m - logf(total);
  }
}

#define ENTRY(NAME, T)                                                                      \
  extern "C" __global__ void __launch_bounds__(1024)                                        \
      NAME(const T* x, const float* banned, const float* u, float* out, int v, float temp,  \
           int greedy) {                                                                    \
    draw<T>(x, banned, u, out, v, temp, greedy);                                            \
  }
ENTRY(decode_draw_f32, float)
ENTRY(decode_draw_bf16, unsigned short)
