// Decoding's draw (src/nn/decode/draw.rs): one block per row; thread t owns the contiguous
// run [t*c, (t+1)*c) of the vocabulary. The runs' sums are prefix-summed in a fixed order
// (a warp scan, then the warps'), so a row's token and log-probability depend on its own
// logits and draw alone. Element access (ld, neg_inf): src/nn/kernel/elems.cuh, put in front.

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

template <typename T>
__device__ void draw(const T* x, const float* banned, const float* u, float* out, int v, float temp,
                     int greedy) {
  __shared__ float sm[32];
  __shared__ int sa[32];
  __shared__ float sw[32];
  __shared__ int s_tok;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  const T* row = x + (long)blockIdx.x * v;
  const int c = (v + blockDim.x - 1) / blockDim.x;
  const int lo = min((int)threadIdx.x * c, v), hi = min(lo + c, v);
  // the row's largest z and its first index
  float m = neg_inf();
  int arg = v;
  for (int i = lo; i < hi; i++) {
    float z = ld(row, i) / temp + banned[i];
    if (z > m) { m = z; arg = i; }
  }
  block_argmax(&m, &arg, sm, sa);
  // the run's sum of exp(z - max), in index order, and its last token with mass
  float s = 0.f;
  int last = -1;
  for (int i = lo; i < hi; i++) {
    float p = expf(ld(row, i) / temp + banned[i] - m);
    if (p > 0.f) last = i;
    s += p;
  }
  // inclusive prefix of the runs' sums: within the warp, then the warps' totals before it
  float incl = s;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    float y = __shfl_up_sync(0xffffffffu, incl, o);
    if (lane >= o) incl += y;
  }
  float excl_lane = __shfl_up_sync(0xffffffffu, incl, 1);
  if (lane == 0) excl_lane = 0.f;
  if (lane == 31) sw[warp] = incl;
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
  const float off = sw[warp], total = sm[0];
  const float excl = off + excl_lane;
  incl = off + incl;
  const int last_row = block_max_int(last, sa);
  if (!greedy) {
    const float target = u[blockIdx.x] * total;
    if (excl <= target && target < incl) {
      const float rest = target - excl;
      float acc = 0.f;
      int tok = last;
      for (int i = lo; i < hi; i++) {
        acc += expf(ld(row, i) / temp + banned[i] - m);
        if (acc > rest) { tok = i; break; }
      }
      s_tok = tok;
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
