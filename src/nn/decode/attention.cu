// Decoding attention (src/nn/decode/attention.rs): one block per (row, key/value head).
// Compiled by NVRTC with G (query heads per key/value head) and EPL (head elements per
// lane, ceil(D / 32)) defined in front, so the per-lane arrays are registers.
// Element access (ld, st, neg_inf): src/nn/kernel/elems.cuh, put in front.
#ifndef G
#error "G undefined"
#endif
#ifndef EPL
#error "EPL undefined"
#endif

// One position's score for each of the G query heads (the whole warp ends with the same
// bits: each butterfly step adds the same two values on both lanes), then the online
// softmax's update of the lane's share of the weighted sum.
__device__ __forceinline__ void visit(const float* qs, const float kx[EPL], const float vx[EPL],
                                      int d, int lane, float scale, float m[G], float l[G],
                                      float acc[G][EPL]) {
#pragma unroll
  for (int g = 0; g < G; g++) {
    float s = 0.f;
#pragma unroll
    for (int i = 0; i < EPL; i++) {
      int e = lane + 32 * i;
      if (e < d) s += qs[g * d + e] * kx[i];
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    s *= scale;
    float mn = fmaxf(m[g], s);
    float c = expf(m[g] - mn);  // 0 at the first position (m = -inf)
    float p = expf(s - mn);
    l[g] = l[g] * c + p;
#pragma unroll
    for (int i = 0; i < EPL; i++) acc[g][i] = acc[g][i] * c + p * vx[i];
    m[g] = mn;
  }
}

template <typename T>
__device__ void decode_attention(const T* q, const T* k, const T* v, const unsigned int* lens,
                                 T* out, int h, int hkv, int d, int w, long q_r, long q_h,
                                 long k_r, long k_h, long k_w, long v_r, long v_h, long v_w,
                                 float scale) {
  const int r = blockIdx.x, kh = blockIdx.y;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  const int n = min((int)lens[r], w);
  extern __shared__ float sh[];
  float* qs = sh;              // [G, D]: this group's queries
  float* wm = qs + G * d;      // [NW, G]: each warp's running maximum
  float* wl = wm + nw * G;     // [NW, G]: each warp's sum of exponentials
  float* wa = wl + nw * G;     // [NW, G, D]: each warp's weighted sum
  for (int i = threadIdx.x; i < G * d; i += blockDim.x) {
    int g = i / d, e = i - g * d;
    qs[i] = ld(q, r * q_r + (long)(kh * G + g) * q_h + e);
  }
  __syncthreads();
  float m[G], l[G], acc[G][EPL];
#pragma unroll
  for (int g = 0; g < G; g++) {
    m[g] = neg_inf();
    l[g] = 0.f;
#pragma unroll
    for (int i = 0; i < EPL; i++) acc[g][i] = 0.f;
  }
  const T* kb = k + r * k_r + kh * k_h;
  const T* vb = v + r * v_r + kh * v_h;
  // warp `warp` takes positions warp, warp + nw, ...; two at a time, so that the second
  // one's loads are in flight while the first is reduced
  for (int j = warp; j < n; j += 2 * nw) {
    const int j2 = j + nw;
    float k1[EPL], v1[EPL], k2[EPL], v2[EPL];
#pragma unroll
    for (int i = 0; i < EPL; i++) {
      int e = lane + 32 * i;
      bool in = e < d;
      k1[i] = in ? ld(kb, j * k_w + e) : 0.f;
      v1[i] = in ? ld(vb, j * v_w + e) : 0.f;
      k2[i] = in && j2 < n ? ld(kb, j2 * k_w + e) : 0.f;
      v2[i] = in && j2 < n ? ld(vb, j2 * v_w + e) : 0.f;
    }
    visit(qs, k1, v1, d, lane, scale, m, l, acc);
    if (j2 < n) visit(qs, k2, v2, d, lane, scale, m, l, acc);
  }
  if (lane == 0) {
#pragma unroll
    for (int g = 0; g < G; g++) {
      wm[warp * G + g] = m[g];
      wl[warp * G + g] = l[g];
    }
  }
#pragma unroll
  for (int g = 0; g < G; g++) {
#pragma unroll
    for (int i = 0; i < EPL; i++) {
      int e = lane + 32 * i;
      if (e < d) wa[(warp * G + g) * d + e] = acc[g][i];
    }
  }
  __syncthreads();
  // the warps' parts combined in warp order: the same order whatever the other rows hold
  for (int t = threadIdx.x; t < G * d; t += blockDim.x) {
    int g = t / d, e = t - g * d;
    float y = 0.f;
    if (n > 0) {
      float mx = neg_inf();
      for (int u = 0; u < nw; u++) mx = fmaxf(mx, wm[u * G + g]);
      float tot = 0.f, a = 0.f;
      for (int u = 0; u < nw; u++) {
        float c = expf(wm[u * G + g] - mx);  // 0 for a warp that saw no position
        tot += wl[u * G + g] * c;
        a += wa[(u * G + g) * d + e] * c;
      }
      y = a / tot;
    }
    st(out, ((long)r * h + kh * G + g) * d + e, y);
  }
}

#define ENTRY(NAME, T)                                                                       \
  extern "C" __global__ void __launch_bounds__(512)                                          \
      NAME(const T* q, const T* k, const T* v, const unsigned int* lens, T* out, int h,      \
           int hkv, int d, int w, long q_r, long q_h, long k_r, long k_h, long k_w, long v_r, \
           long v_h, long v_w, float scale) {                                                \
    decode_attention<T>(q, k, v, lens, out, h, hkv, d, w, q_r, q_h, k_r, k_h, k_w, v_r, v_h, \
                        v_w, scale);                                                         \
  }
ENTRY(decode_attention_f32, float)
ENTRY(decode_attention_bf16, unsigned short)
