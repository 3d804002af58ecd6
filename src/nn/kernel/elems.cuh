// Element access shared by the decoding kernels' sources (src/nn/kernel/ puts it in
// front of each before NVRTC compiles it). No headers: bf16 is handled as its bits
// (unsigned short), read and written through f32.

__device__ __forceinline__ float neg_inf() { return __int_as_float(0xff800000); }
__device__ __forceinline__ float ld(const float* p, long i) { return p[i]; }
__device__ __forceinline__ float ld(const unsigned short* p, long i) {
  return __uint_as_float(((unsigned int)p[i]) << 16);
}
// round to nearest even, NaN kept a NaN
__device__ __forceinline__ unsigned short to_bf16(float x) {
  unsigned int u = __float_as_uint(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (unsigned short)(u >> 16);
}
__device__ __forceinline__ void st(float* p, long i, float x) { p[i] = x; }
__device__ __forceinline__ void st(unsigned short* p, long i, float x) { p[i] = to_bf16(x); }
// x rounded to the element type and back
__device__ __forceinline__ float rnd(const float*, float x) { return x; }
__device__ __forceinline__ float rnd(const unsigned short*, float x) {
  return __uint_as_float(((unsigned int)to_bf16(x)) << 16);
}
