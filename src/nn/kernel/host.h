// CUDA's device-side vocabulary for the host (src/nn/kernel/host.rs, the tests only): a
// kernel's source compiles as C++20 and each CUDA thread runs as an OS thread. A block's
// threads run together, the blocks one after another, so a block's __shared__ variables
// are statics; __syncthreads and the warp shuffles are barriers. A thread that returns
// leaves its barriers (as on a card); a shuffle that reads a lane which has returned aborts.
#include <math.h>

#include <atomic>
#include <barrier>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

struct guirl_dim3 {
  unsigned x, y, z;
};
static thread_local guirl_dim3 threadIdx, blockIdx;
static guirl_dim3 blockDim, gridDim;

#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__ static

struct alignas(16) float4 {
  float x, y, z, w;
};
struct alignas(16) uint4 {
  unsigned x, y, z, w;
};

template <class T>
inline T __ldg(const T* p) { return *p; }
inline float __uint_as_float(unsigned u) { float f; memcpy(&f, &u, 4); return f; }
inline float __int_as_float(int u) { float f; memcpy(&f, &u, 4); return f; }
inline unsigned __float_as_uint(float f) { unsigned u; memcpy(&u, &f, 4); return u; }
inline int __float_as_int(float f) { int u; memcpy(&u, &f, 4); return u; }
inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
inline int min(int a, int b) { return a < b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }
inline long min(long a, long b) { return a < b ? a : b; }
inline long max(long a, long b) { return a > b ? a : b; }
inline unsigned min(unsigned a, unsigned b) { return a < b ? a : b; }
inline unsigned max(unsigned a, unsigned b) { return a > b ? a : b; }

// One warp's exchange: its barrier, a slot per lane, which lanes have returned.
struct guirl_warp {
  std::unique_ptr<std::barrier<>> bar;
  uint64_t slot[32];
  std::atomic<bool> gone[32];
};
static guirl_warp guirl_warps[32];
static std::unique_ptr<std::barrier<>> guirl_block;
// a block's dynamic shared memory (`extern __shared__ T name[];` becomes a pointer to it)
static unsigned char* guirl_dynamic_shared;

inline void __syncthreads() { guirl_block->arrive_and_wait(); }

template <class T>
T guirl_exchange(T v, int src) {
  static_assert(sizeof(T) <= 8, "a shuffle of more than 8 bytes");
  guirl_warp& w = guirl_warps[threadIdx.x / 32];
  const int lane = threadIdx.x % 32;
  memcpy(&w.slot[lane], &v, sizeof(T));
  w.bar->arrive_and_wait();
  if (w.gone[src]) {
    fprintf(stderr, "guirl host: thread %u (block %u, %u, %u) shuffles with lane %d of its warp, which has returned\n",
            threadIdx.x, blockIdx.x, blockIdx.y, blockIdx.z, src);
    abort();
  }
  T r;
  memcpy(&r, &w.slot[src], sizeof(T));
  w.bar->arrive_and_wait();
  return r;
}
template <class T>
T __shfl_xor_sync(unsigned, T v, int mask, int width = 32) {
  const int lane = threadIdx.x % 32, src = lane ^ mask;
  return guirl_exchange(v, src / width == lane / width ? src : lane);
}
template <class T>
T __shfl_up_sync(unsigned, T v, unsigned delta, int width = 32) {
  const int lane = threadIdx.x % 32, src = lane - (int)delta;
  return guirl_exchange(v, src >= lane / width * width ? src : lane);
}
template <class T>
T __shfl_down_sync(unsigned, T v, unsigned delta, int width = 32) {
  const int lane = threadIdx.x % 32, src = lane + (int)delta;
  return guirl_exchange(v, src < (lane / width + 1) * width ? src : lane);
}
template <class T>
T __shfl_sync(unsigned, T v, int src, int width = 32) {
  const int lane = threadIdx.x % 32;
  return guirl_exchange(v, lane / width * width + src % width);
}

// A block's fresh state: its barriers, which lanes exist, its dynamic shared memory.
static void guirl_start_block(unsigned block, size_t shared) {
  memset(guirl_dynamic_shared, 0xff, shared + 16);  // what was never written reads as NaN
  guirl_block = std::make_unique<std::barrier<>>(block);
  for (unsigned w = 0; w * 32 < block; w++) {
    const unsigned lanes = block - w * 32 < 32 ? block - w * 32 : 32;
    guirl_warps[w].bar = std::make_unique<std::barrier<>>(lanes);
    for (unsigned l = 0; l < 32; l++) guirl_warps[w].gone[l] = l >= lanes;
  }
}

// Runs `body` as every thread of a grid of `grid` blocks of `block` threads: one OS thread
// per thread of a block, kept from block to block (the next block starts once every
// thread has returned from this one).
template <class F>
void guirl_run(guirl_dim3 grid, unsigned block, size_t shared, F body) {
  gridDim = grid;
  blockDim = {block, 1, 1};
  void* dyn = nullptr;
  if (posix_memalign(&dyn, 16, shared + 16) != 0) abort();
  guirl_dynamic_shared = (unsigned char*)dyn;
  const unsigned long total = (unsigned long)grid.x * grid.y * grid.z;
  unsigned long at = 0;
  guirl_start_block(block, shared);
  auto next = [&]() noexcept {
    if (++at < total) guirl_start_block(block, shared);
  };
  std::barrier between(block, next);
  std::vector<std::thread> threads;
  for (unsigned t = 0; t < block; t++)
    threads.emplace_back([&, t] {
      threadIdx = {t, 0, 0};
      while (at < total) {
        blockIdx = {(unsigned)(at % grid.x), (unsigned)(at / grid.x % grid.y), (unsigned)(at / grid.x / grid.y)};
        body();
        guirl_warp& w = guirl_warps[t / 32];
        w.gone[t % 32] = true;
        w.bar->arrive_and_drop();
        guirl_block->arrive_and_drop();
        between.arrive_and_wait();
      }
    });
  for (auto& th : threads) th.join();
  free(dyn);
}

static void guirl_read(void* p, size_t n) {
  if (fread(p, 1, n, stdin) != n) {
    fprintf(stderr, "guirl host: the launch's input ended early\n");
    exit(3);
  }
}
static uint64_t guirl_u64() {
  uint64_t v;
  guirl_read(&v, 8);
  return v;
}
// An input of exactly the bytes sent, 16-byte aligned (AddressSanitizer knows its end).
template <class T>
T* guirl_input() {
  const size_t n = guirl_u64();
  void* p = nullptr;
  if (posix_memalign(&p, 16, n ? n : 1) != 0) abort();
  guirl_read(p, n);
  return (T*)p;
}
// The output, every byte 0xff: what the kernel leaves unwritten the test sees.
template <class T>
T* guirl_output(size_t n) {
  void* p = nullptr;
  if (posix_memalign(&p, 16, n ? n * sizeof(T) : 1) != 0) abort();
  memset(p, 0xff, n * sizeof(T));
  return (T*)p;
}
