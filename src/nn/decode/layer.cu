// A decoding layer's small fused steps (src/nn/decode/layer.rs): the residual sum with the
// next RMSNorm, a head's RMSNorm with its rotary embedding, SwiGLU, and the split of one
// q/k/v product into heads. f32 inside, rounded
// where the unfused ops round. Sums of squares are reduced in a fixed order (butterflies
// within a warp, then the warps in order), so a row's bits never depend on other rows.
// Element access (ld, st, rnd): src/nn/kernel/elems.cuh, put in front.

// The block's sum of `v` (blockDim.x a multiple of 32, at most 1024), the same on every
// thread, in a fixed order. `red` holds 33 floats.
__device__ float block_sum(float v, float* red) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  int warps = blockDim.x / 32;
  if (warps == 1) return v;
  if ((threadIdx.x & 31) == 0) red[threadIdx.x / 32] = v;
  __syncthreads();
  if (threadIdx.x == 0) {
    float t = 0.f;
    for (int i = 0; i < warps; i++) t += red[i];
    red[32] = t;
  }
  __syncthreads();
  return red[32];
}

// One block per row of [M, H]: out[0] = round(x + d), out[1] = round(s * w / rms(s)).
template <typename T>
__device__ void add_rms_norm(const T* x, const T* d, const T* w, T* out, int m, int h, float eps) {
  __shared__ float red[33];
  long row = blockIdx.x;
  const T* xr = x + row * h;
  const T* dr = d + row * h;
  T* sr = out + row * h;
  T* yr = out + ((long)m + row) * h;
  float sq = 0.f;
  for (int i = threadIdx.x; i < h; i += blockDim.x) {
    float s = rnd(x, ld(xr, i) + ld(dr, i));
    st(sr, i, s);
    sq += s * s;
  }
  float scale = rsqrtf(block_sum(sq, red) / h + eps);
  for (int i = threadIdx.x; i < h; i += blockDim.x) {
    // the thread reads back what it wrote
    st(yr, i, ld(sr, i) * scale * ld(w, i));
  }
}

// Element-wise: round(round(silu(g)) * u).
template <typename T>
__device__ void swiglu(const T* g, const T* u, T* out, long len) {
  for (long i = (long)blockIdx.x * blockDim.x + threadIdx.x; i < len; i += (long)gridDim.x * blockDim.x) {
    float x = ld(g, i);
    float si = rnd(g, x / (1.f + expf(-x)));
    st(out, i, si * ld(u, i));
  }
}

// silu over the first half of each row of gu [M, 2I] times the second half: [M, I].
template <typename T>
__device__ void swiglu_halves(const T* gu, T* out, int inter, long len) {
  for (long i = (long)blockIdx.x * blockDim.x + threadIdx.x; i < len; i += (long)gridDim.x * blockDim.x) {
    long row = i / inter, col = i % inter;
    float x = ld(gu, row * 2 * inter + col);
    float si = rnd(gu, x / (1.f + expf(-x)));
    st(out, i, si * ld(gu, row * 2 * inter + inter + col));
  }
}

// One block per (row, head) of the first b rows of x [M, width] (queries, keys, values side
// by side), D/2 threads rounded up to a warp, thread t owning the pair (t, t + D/2). Out is
// flat: b x H queries, b x Hkv keys, b x Hkv values. The bias is added (and rounded) first;
// queries and keys are then normed (rounded) if has_norm, and rotated.
template <typename T>
__device__ void split_heads(const T* x, const T* bias, const T* wq, const T* wk, const T* c,
                            const T* s, T* out, int b, int h, int hkv, int d, int has_bias,
                            int has_norm, long width, float eps) {
  __shared__ float red[33];
  int heads = h + 2 * hkv;
  long row = blockIdx.x / heads;
  int j = blockIdx.x % heads, half = d / 2, t = threadIdx.x;
  const T* src = x + row * width + (long)j * d;
  float a = 0.f, e = 0.f;
  if (t < half) {
    a = ld(src, t);
    e = ld(src, t + half);
    if (has_bias) {
      a = rnd(x, a + ld(bias, (long)j * d + t));
      e = rnd(x, e + ld(bias, (long)j * d + t + half));
    }
  }
  long o;
  if (j < h) o = (row * h + j) * d;
  else if (j < h + hkv) o = (long)b * h * d + (row * hkv + j - h) * d;
  else o = (long)b * (h + hkv) * d + (row * hkv + j - h - hkv) * d;
  if (j >= h + hkv) {  // a value head: the whole block takes this branch
    if (t < half) {
      st(out, o + t, a);
      st(out, o + t + half, e);
    }
    return;
  }
  if (has_norm) {
    const T* w = j < h ? wq : wk;
    float scale = rsqrtf(block_sum(a * a + e * e, red) / d + eps);
    if (t < half) {
      a = rnd(x, a * scale * ld(w, t));
      e = rnd(x, e * scale * ld(w, t + half));
    }
  }
  if (t < half) {
    float ct = ld(c, row * half + t), stt = ld(s, row * half + t);
    st(out, o + t, a * ct - e * stt);
    st(out, o + t + half, e * ct + a * stt);
  }
}

#define ENTRIES(SUFFIX, T)                                                                       \
  extern "C" __global__ void decode_add_rms_norm_##SUFFIX(const T* x, const T* d, const T* w,    \
                                                          T* out, int m, int h, float eps) {     \
    add_rms_norm<T>(x, d, w, out, m, h, eps);                                                    \
  }                                                                                              \
  extern "C" __global__ void decode_swiglu_##SUFFIX(const T* g, const T* u, T* out, long len) {  \
    swiglu<T>(g, u, out, len);                                                                   \
  }                                                                                              \
  extern "C" __global__ void decode_swiglu_halves_##SUFFIX(const T* gu, T* out, int inter,       \
                                                           long len) {                           \
    swiglu_halves<T>(gu, out, inter, len);                                                       \
  }                                                                                              \
  extern "C" __global__ void decode_split_heads_##SUFFIX(                                        \
      const T* x, const T* bias, const T* wq, const T* wk, const T* c, const T* s, T* out,       \
      int b, int h, int hkv, int d, int has_bias, int has_norm, long width, float eps) {         \
    split_heads<T>(x, bias, wq, wk, c, s, out, b, h, hkv, d, has_bias, has_norm, width, eps);   \
  }
ENTRIES(f32, float)
ENTRIES(bf16, unsigned short)
