// CUDA's device-side vocabulary for the host (src/nn/kernel/host.rs, the tests only): a
// kernel's source compiles as C++20 and each CUDA thread runs as an OS thread. A block's
// threads run together, the blocks one after another, so a block's __shared__ variables
// are statics, in a section of their own refilled with 0xff bytes before each block (what a
// block reads before it writes is NaN, as in the dynamic shared memory). __syncthreads,
// __syncwarp and the warp shuffles are barriers; under ThreadSanitizer a shuffle's orders
// no memory (see guirl_shuffle_barrier). A thread that returns leaves its barriers (as on
// a card); a shuffle with a lane which has returned aborts.
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
#define __shared__ static __attribute__((section("guirl_shared")))

// The linker's bounds of the statics' section (absent where a kernel has none).
extern "C" unsigned char __start_guirl_shared[] __attribute__((weak));
extern "C" unsigned char __stop_guirl_shared[] __attribute__((weak));

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

#if defined(__SANITIZE_THREAD__)
// A warp's shuffle on a card exchanges registers and promises nothing of memory: shared
// memory one lane writes and another reads needs __syncwarp (or __syncthreads) between.
// So under ThreadSanitizer a shuffle's barrier is made of relaxed atomics, which it sees as
// no synchronisation, and such a read is a race there. Lanes wait by yielding: a warp is
// 32 threads.
struct guirl_shuffle_barrier {
  // low 32 bits: lanes arrived in this phase; high 32: lanes expected
  std::atomic<uint64_t> state;
  std::atomic<unsigned> phase{0};
  explicit guirl_shuffle_barrier(unsigned lanes) : state((uint64_t)lanes << 32) {}
  // `leave`: as std::barrier's arrive_and_drop, one lane fewer expected from now on
  void step(bool leave) {
    const unsigned p = phase.load(std::memory_order_relaxed);
    uint64_t s = state.load(std::memory_order_relaxed), next;
    bool last;
    do {
      const unsigned arrived = (unsigned)s + (leave ? 0 : 1), expected = (unsigned)(s >> 32) - leave;
      last = arrived == expected;
      next = ((uint64_t)expected << 32) | (last ? 0 : arrived);
    } while (!state.compare_exchange_weak(s, next, std::memory_order_relaxed));
    if (last)
      phase.fetch_add(1, std::memory_order_relaxed);
    else if (!leave)
      while (phase.load(std::memory_order_relaxed) == p) std::this_thread::yield();
    std::atomic_signal_fence(std::memory_order_seq_cst);  // the compiler's order only
  }
  void arrive_and_wait() { step(false); }
  void arrive_and_drop() { step(true); }
};
#else
using guirl_shuffle_barrier = std::barrier<>;
#endif

// One warp's exchange: its barriers and two slots per lane, each a value and the shuffle
// it belongs to (a shuffle writes one set while a lane still reading the last one reads
// the other). Relaxed atomics: the shuffle's barrier orders them.
struct guirl_slot {
  std::atomic<uint64_t> value;
  std::atomic<unsigned> shuffle;
};
struct guirl_warp {
  std::unique_ptr<guirl_shuffle_barrier> bar;
  std::unique_ptr<std::barrier<>> sync;  // __syncwarp's
  guirl_slot slot[2][32];
};
static guirl_warp guirl_warps[32];
static thread_local unsigned guirl_shuffles;  // this thread's shuffles so far in the block
static std::unique_ptr<std::barrier<>> guirl_block;
// a block's dynamic shared memory (`extern __shared__ T name[];` becomes a pointer to it)
static unsigned char* guirl_dynamic_shared;

inline void __syncthreads() { guirl_block->arrive_and_wait(); }
// every lane of the warp (guirl's kernels pass the full mask)
inline void __syncwarp(unsigned = 0xffffffffu) { guirl_warps[threadIdx.x / 32].sync->arrive_and_wait(); }

template <class T>
T guirl_exchange(T v, int src) {
  static_assert(sizeof(T) <= 8, "a shuffle of more than 8 bytes");
  guirl_warp& w = guirl_warps[threadIdx.x / 32];
  const int lane = threadIdx.x % 32;
  const unsigned n = guirl_shuffles++;
  guirl_slot* slot = w.slot[n & 1];
  uint64_t bits = 0;
  memcpy(&bits, &v, sizeof(T));
  slot[lane].value.store(bits, std::memory_order_relaxed);
  slot[lane].shuffle.store(n, std::memory_order_relaxed);
  // One barrier: no lane writes this set again before every lane has passed the next
  // shuffle's barrier, so after reading this one. A lane that has returned has left the
  // barrier and never wrote this shuffle's slot.
  w.bar->arrive_and_wait();
  if (slot[src].shuffle.load(std::memory_order_relaxed) != n) {
    fprintf(stderr, "guirl host: thread %u (block %u, %u, %u) shuffles with lane %d of its warp, which has returned\n",
            threadIdx.x, blockIdx.x, blockIdx.y, blockIdx.z, src);
    abort();
  }
  T r;
  bits = slot[src].value.load(std::memory_order_relaxed);
  memcpy(&r, &bits, sizeof(T));
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

// Byte by byte and uninstrumented: the section holds AddressSanitizer's redzones too.
__attribute__((no_sanitize_address)) static void guirl_fill(unsigned char* from, unsigned char* to) {
  for (volatile unsigned char* p = from; p < to; p++) *p = 0xff;
}

// A block's fresh state: its barriers, which lanes exist, its shared memory.
static void guirl_start_block(unsigned block, size_t shared) {
  memset(guirl_dynamic_shared, 0xff, shared + 16);  // what was never written reads as NaN
  if (__start_guirl_shared) guirl_fill(__start_guirl_shared, __stop_guirl_shared);
  guirl_block = std::make_unique<std::barrier<>>(block);
  for (unsigned w = 0; w * 32 < block; w++) {
    const unsigned lanes = block - w * 32 < 32 ? block - w * 32 : 32;
    guirl_warps[w].bar = std::make_unique<guirl_shuffle_barrier>(lanes);
    guirl_warps[w].sync = std::make_unique<std::barrier<>>(lanes);
    for (auto& set : guirl_warps[w].slot)
      for (auto& s : set) s.shuffle.store(~0u, std::memory_order_relaxed);
  }
}

// Runs `body` as every thread of a grid of `grid` blocks of `block` threads: one OS thread
// per thread of a block, kept from block to block (the next block starts once every
// thread has returned from this one), the blocks in order or, `reversed`, last first.
template <class F>
void guirl_run(guirl_dim3 grid, unsigned block, size_t shared, bool reversed, F body) {
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
        const unsigned long b = reversed ? total - 1 - at : at;
        blockIdx = {(unsigned)(b % grid.x), (unsigned)(b / grid.x % grid.y), (unsigned)(b / grid.x / grid.y)};
        guirl_shuffles = 0;
        body();
        guirl_warps[t / 32].bar->arrive_and_drop();
        guirl_warps[t / 32].sync->arrive_and_drop();
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
