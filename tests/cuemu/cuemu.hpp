#pragma once
// cuemu: the CUDA kernel language on the host, for tests only (never linked into latprof).
//
// The project's kernels (kernels/cuda/*.cu, unmodified) compile with g++ against this header and
// the stand-in CUDA headers of tests/cuemu/include/, after the source step of
// tests/cuemu/rewrite.cpp turns `k<<<...>>>(args)` launches and `__shared__` declarations into
// calls of this header. A launch runs synchronously: the blocks of the grid run on a few OS
// threads (one block at a time per thread), and every CUDA thread of a block is a fiber
// (ucontext stack, switched with _setjmp/_longjmp; swapcontext under ASan) that runs until it
// reaches __syncthreads(), __syncwarp(), a warp shuffle or vote, or its end; then the next fiber
// of the block runs. Warps are 32 consecutive threads; shuffles and votes exchange values through a
// per-warp buffer once every lane of the mask has arrived. The order in which runnable fibers are
// resumed is the schedule: ascending, descending or shuffled from a seed (cuemu::Options), so each
// test runs under several orders of the threads between barriers.
//
// Checks (a failed check is a fault: cuemu::take_faults() returns it, the test fails):
//  - shared memory (static `__shared__` and dynamic `extern __shared__`) lives in a per-block
//    arena poisoned with 0xff bytes (NaN as fp32 and fp16) and surrounded by guard zones; limits
//    as on sm_90: 48 KiB per block, up to 227 KiB after cudaFuncSetAttribute(
//    cudaFuncAttributeMaxDynamicSharedMemorySize);
//  - in the default build the kernel sources are compiled with GCC's ThreadSanitizer
//    instrumentation and cuemu.cpp supplies the __tsan_* callbacks itself (no TSan runtime):
//    every load and store of a kernel is seen. For each shared byte the last writer and the
//    barrier epoch are kept: a read of a byte another thread wrote since the last barrier (or
//    __syncwarp of the same warp), a write over such a byte or over a byte another thread read
//    since then, a read of a byte nobody wrote, and an access to a guard zone are faults. Device
//    memory (cudaMalloc) comes from one arena with guard zones between allocations and addresses
//    that are never reused: out-of-bounds and use-after-free accesses are faults;
//  - __syncthreads() reached by part of a block (the others exited or wait elsewhere), a shuffle
//    with an exited lane, and a deadlock are faults;
//  - with LATPROF_SANITIZE (ASan + UBSan, which GCC cannot combine with the TSan
//    instrumentation) the race and arena checks are off; ASan checks global accesses (malloc'd
//    device buffers) and the shared guard zones, and fiber switches are annotated with
//    __sanitizer_start_switch_fiber / __sanitizer_finish_switch_fiber.
//
// What the emulation cannot show:
//  - code that relies on warp lockstep without __syncwarp() (legal only before Volta): lanes run
//    one after another between collectives, so such code is reported as a race at best;
//  - GPU numerics: fast-math intrinsics (__expf, rsqrtf, exp2f, ...) are the exact libm
//    functions here, fp16 arithmetic is done in fp32; FMAs are real FMAs (fmaf), but the GPU
//    compiler may contract other expressions (the emulation compiles with -ffp-contract=off);
//  - anything about speed, occupancy, bank conflicts, coalescing, memory ordering between
//    blocks (blocks on different OS threads are not checked against each other), cuBLASLt;
//  - warp shuffles order nothing: shared memory written before a shuffle and read after it by
//    another lane is a race here, as it is on the GPU without __syncwarp().
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

// ---- qualifiers ----------------------------------------------------------------------------
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline __attribute__((always_inline))
#define __launch_bounds__(...)
#define __constant__ static
#define __align__(n) alignas(n)
#define __grid_constant__
// `__shared__` never survives the rewrite step; left over, it is a compile error.
#define __shared__ static_assert(false, "__shared__ must go through tests/cuemu/rewrite.cpp");

// ---- vector types --------------------------------------------------------------------------
struct alignas(8) float2 {
  float x, y;
};
struct float3 {
  float x, y, z;
};
struct alignas(16) float4 {
  float x, y, z, w;
};
struct alignas(8) int2 {
  int x, y;
};
struct alignas(16) int4 {
  int x, y, z, w;
};
struct alignas(8) uint2 {
  unsigned x, y;
};
struct uint3 {
  unsigned x, y, z;
};
struct alignas(16) uint4 {
  unsigned x, y, z, w;
};
struct dim3 {
  unsigned x = 1, y = 1, z = 1;
  constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
  constexpr dim3(uint3 u) : x(u.x), y(u.y), z(u.z) {}
};
inline float2 make_float2(float x, float y) {
  return {x, y};
}
inline float4 make_float4(float x, float y, float z, float w) {
  return {x, y, z, w};
}
inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) {
  return {x, y, z, w};
}
inline int2 make_int2(int x, int y) {
  return {x, y};
}
constexpr int warpSize = 32;

// ---- runtime API types ---------------------------------------------------------------------
enum cudaError_t {
  cudaSuccess = 0,
  cudaErrorInvalidValue = 1,
  cudaErrorMemoryAllocation = 2,
  cudaErrorInvalidConfiguration = 9,
  cudaErrorInsufficientDriver = 35,
  cudaErrorNoDevice = 100,
  cudaErrorInvalidResourceHandle = 400,
  cudaErrorStreamCaptureUnsupported = 900,
  cudaErrorInvalidDeviceFunction = 98,
  cudaErrorLaunchFailure = 719,
};
using cudaError = cudaError_t;
struct CUstream_st;
using cudaStream_t = CUstream_st*;
struct CUevent_st;
using cudaEvent_t = CUevent_st*;
struct CUgraph_st;
using cudaGraph_t = CUgraph_st*;
struct CUgraphExec_st;
using cudaGraphExec_t = CUgraphExec_st*;
inline constexpr unsigned cudaStreamDefault = 0, cudaStreamNonBlocking = 1;
enum cudaStreamCaptureMode {
  cudaStreamCaptureModeGlobal = 0,
  cudaStreamCaptureModeThreadLocal = 1,
  cudaStreamCaptureModeRelaxed = 2,
};
enum cudaDeviceAttr {
  cudaDevAttrMultiProcessorCount = 16,
  cudaDevAttrComputeCapabilityMajor = 75,
  cudaDevAttrComputeCapabilityMinor = 76,
};
// The emulated device: an sm_90 part (the limits of cuemu.hpp).
struct cudaDeviceProp {
  char name[256];
  size_t totalGlobalMem;
  size_t sharedMemPerBlock;
  size_t sharedMemPerBlockOptin;
  int warpSize;
  int maxThreadsPerBlock;
  int major, minor;
  int multiProcessorCount;
  int l2CacheSize;
};
enum cudaMemcpyKind {
  cudaMemcpyHostToHost = 0,
  cudaMemcpyHostToDevice = 1,
  cudaMemcpyDeviceToHost = 2,
  cudaMemcpyDeviceToDevice = 3,
  cudaMemcpyDefault = 4,
};
enum cudaFuncAttribute {
  cudaFuncAttributeMaxDynamicSharedMemorySize = 8,
  cudaFuncAttributePreferredSharedMemoryCarveout = 9,
};
enum cudaGetDriverEntryPointFlags { cudaEnableDefault = 0 };
enum cudaDriverEntryPointQueryResult { cudaDriverEntryPointSuccess = 0 };

namespace cuemu {

inline constexpr size_t kSharedDefault = 48 * 1024;  // per block without opt-in
inline constexpr size_t kSharedOptin = 227 * 1024;   // sm_90 sharedMemPerBlockOptin
inline constexpr int kMaxThreads = 1024;

// How launches run. Tests set it per case; the environment gives the defaults: CUEMU_SCHEDULE,
// CUEMU_WORKERS (overrides `workers`; 0: the hardware's threads, at most 8), and
// CUEMU_ABORT_ON_FAULT=1 (print the first fault and abort, for tests that do not call
// take_faults()).
struct Options {
  uint64_t schedule = 0;  // 0 ascending, 1 descending, >= 2 shuffled with this seed
  int workers = 0;        // OS threads running blocks
};
void set_options(const Options& o);
Options options();

// Faults found since the last call (one line each, at most ~20 per launch plus a count).
std::vector<std::string> take_faults();
// Launches since the start, and the names of the kernels launched (template arguments dropped).
uint64_t launch_count();
std::vector<std::string> launched_kernels();
// True when loads and stores are checked (the TSan-instrumented build); false under ASan.
bool access_checks();

// ---- device side: called by the kernel language below ----------------------------------------
uint3 thread_idx();
uint3 block_idx();
dim3 block_dim();
dim3 grid_dim();
void syncthreads(const char* file, int line);
void syncwarp(unsigned mask);
// A warp collective: deposits `bits` (up to 8 bytes) with a source lane; returns the bits of
// the source lane once every lane of `mask` has arrived. kind: 0 shuffle, 1 ballot.
uint64_t warp_exchange(unsigned mask, int kind, uint64_t bits, int src_lane);
unsigned warp_ballot(unsigned mask, bool pred);
void* shared_static(const void* tag, const char* name, size_t bytes, size_t align);
void* shared_dynamic(size_t align);
[[noreturn]] void trap(const char* what);

// ---- host side -------------------------------------------------------------------------------
using Entry = void (*)(void* ctx);
struct LaunchConfig {
  const char* name;
  const char* file;
  int line;
  dim3 grid, block;
  size_t smem;
  cudaStream_t stream;
};
void launch(const void* kernel, const LaunchConfig& cfg, Entry entry, void* ctx);
cudaError_t set_max_dynamic_shared(const void* kernel, int bytes);

struct LaunchConfigBuilder {
  const void* kernel;
  LaunchConfig cfg;
};

inline LaunchConfigBuilder launch_config(const char* name, const char* file, int line,
                                         const void* kernel, dim3 grid, dim3 block, size_t smem = 0,
                                         cudaStream_t stream = nullptr) {
  return {kernel, LaunchConfig{name, file, line, grid, block, smem, stream}};
}

// True while `stream` is being captured into a graph (launches are then recorded, not run).
bool capturing(cudaStream_t stream);
void capture_op(cudaStream_t stream, std::function<void()> op);

template <class L>
void call_body(void* c) {
  (*static_cast<L*>(c))();
}

// launch_config(...) % [=]() { kernel(args); }: every CUDA thread of the grid runs the lambda
// (which holds copies of the arguments, so a captured launch replays with them).
template <class F>
void operator%(const LaunchConfigBuilder& b, F&& body) {
  using L = std::decay_t<F>;
  if (capturing(b.cfg.stream)) {
    capture_op(b.cfg.stream,
               [b, body = L(body)]() mutable { launch(b.kernel, b.cfg, &call_body<L>, &body); });
    return;
  }
  L copy(body);
  launch(b.kernel, b.cfg, &call_body<L>, &copy);
}

template <class T>
T* dynamic_shared() {
  return static_cast<T*>(shared_dynamic(alignof(T) < 16 ? 16 : alignof(T)));
}

template <class T>
uint64_t to_bits(T v) {
  static_assert(sizeof(T) <= 8 && std::is_trivially_copyable_v<T>, "shuffle of up to 8 bytes");
  uint64_t b = 0;
  std::memcpy(&b, &v, sizeof(T));
  return b;
}
template <class T>
T from_bits(uint64_t b) {
  T v;
  std::memcpy(&v, &b, sizeof(T));
  return v;
}

}  // namespace cuemu

// The kernel's address for cudaFuncSetAttribute's limits, or nullptr for a template whose
// arguments the launch deduces.
#define CUEMU_KERNEL_ADDRESS(...)                         \
  ([&]<class cuemu_z = void>()->const void* {             \
    if constexpr (requires { &__VA_ARGS__; })             \
      return reinterpret_cast<const void*>(&__VA_ARGS__); \
    else                                                  \
      return nullptr;                                     \
  }())

// Static shared memory: one allocation per declaration and block (same address for all its
// threads), from the block's arena.
#define CUEMU_SHARED(T, name, dims)                                                  \
  static const char cuemu_tag_##name = 0;                                            \
  using cuemu_type_##name = T dims;                                                  \
  cuemu_type_##name& name = *static_cast<cuemu_type_##name*>(::cuemu::shared_static( \
      &cuemu_tag_##name, #name, sizeof(cuemu_type_##name), alignof(cuemu_type_##name)))

#define threadIdx (::cuemu::thread_idx())
#define blockIdx (::cuemu::block_idx())
#define blockDim (::cuemu::block_dim())
#define gridDim (::cuemu::grid_dim())
#define __syncthreads() ::cuemu::syncthreads(__FILE__, __LINE__)

inline void __syncwarp(unsigned mask = 0xffffffffu) {
  ::cuemu::syncwarp(mask);
}
inline unsigned __activemask() {
  return 0xffffffffu;
}

template <class T>
inline T __shfl_sync(unsigned mask, T v, int src, int width = 32) {
  const int lane = int(::cuemu::thread_idx().x & 31);  // 1-D blocks: lane = threadIdx.x % 32
  const int base = lane & ~(width - 1);
  return ::cuemu::from_bits<T>(
      ::cuemu::warp_exchange(mask, 0, ::cuemu::to_bits(v), base + (src & (width - 1))));
}
template <class T>
inline T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32) {
  const int lane = int(::cuemu::thread_idx().x & 31);
  int src = lane ^ lane_mask;
  if ((src & ~(width - 1)) != (lane & ~(width - 1))) src = lane;
  return ::cuemu::from_bits<T>(::cuemu::warp_exchange(mask, 0, ::cuemu::to_bits(v), src));
}
template <class T>
inline T __shfl_up_sync(unsigned mask, T v, unsigned delta, int width = 32) {
  const int lane = int(::cuemu::thread_idx().x & 31);
  const int src = (lane & (width - 1)) >= int(delta) ? lane - int(delta) : lane;
  return ::cuemu::from_bits<T>(::cuemu::warp_exchange(mask, 0, ::cuemu::to_bits(v), src));
}
template <class T>
inline T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = 32) {
  const int lane = int(::cuemu::thread_idx().x & 31);
  const int src = (lane & (width - 1)) + int(delta) < width ? lane + int(delta) : lane;
  return ::cuemu::from_bits<T>(::cuemu::warp_exchange(mask, 0, ::cuemu::to_bits(v), src));
}
inline unsigned __ballot_sync(unsigned mask, int pred) {
  return ::cuemu::warp_ballot(mask, pred != 0);
}
inline int __any_sync(unsigned mask, int pred) {
  return (::cuemu::warp_ballot(mask, pred != 0) & mask) != 0;
}
inline int __all_sync(unsigned mask, int pred) {
  return (::cuemu::warp_ballot(mask, pred != 0) & mask) == mask;
}
inline void __trap() {
  ::cuemu::trap("__trap()");
}

// ---- atomics (global and shared; blocks run in parallel, so these are real atomics) ---------
template <class T>
inline T atomicAdd(T* p, T v) {
  if constexpr (std::is_floating_point_v<T>) {
    T old;
    __atomic_load(p, &old, __ATOMIC_RELAXED);
    for (T sum = old + v;
         !__atomic_compare_exchange(p, &old, &sum, true, __ATOMIC_SEQ_CST, __ATOMIC_RELAXED);
         sum = old + v) {
    }
    return old;
  } else {
    return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST);
  }
}
template <class T>
inline T atomicSub(T* p, T v) {
  return __atomic_fetch_sub(p, v, __ATOMIC_SEQ_CST);
}
template <class T>
inline T atomicExch(T* p, T v) {
  return __atomic_exchange_n(p, v, __ATOMIC_SEQ_CST);
}
template <class T>
inline T atomicCAS(T* p, T cmp, T v) {
  __atomic_compare_exchange_n(p, &cmp, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
  return cmp;
}
template <class T>
inline T atomicMax(T* p, T v) {
  T old;
  __atomic_load(p, &old, __ATOMIC_RELAXED);
  while (old < v &&
         !__atomic_compare_exchange(p, &old, &v, true, __ATOMIC_SEQ_CST, __ATOMIC_RELAXED)) {
  }
  return old;
}
template <class T>
inline T atomicMin(T* p, T v) {
  T old;
  __atomic_load(p, &old, __ATOMIC_RELAXED);
  while (old > v &&
         !__atomic_compare_exchange(p, &old, &v, true, __ATOMIC_SEQ_CST, __ATOMIC_RELAXED)) {
  }
  return old;
}
inline void __threadfence() {
  __atomic_thread_fence(__ATOMIC_SEQ_CST);
}
inline void __threadfence_block() {
  __atomic_thread_fence(__ATOMIC_SEQ_CST);
}

// ---- math and bit intrinsics: exact libm versions (fast-math numerics are out of scope) ------
inline float __fmul_rn(float a, float b) {
  return a * b;
}
inline float __fadd_rn(float a, float b) {
  return a + b;
}
inline float __fsub_rn(float a, float b) {
  return a - b;
}
inline float __fdiv_rn(float a, float b) {
  return a / b;
}
inline float __fmaf_rn(float a, float b, float c) {
  return std::fma(a, b, c);
}
inline float __frcp_rn(float a) {
  return 1.0f / a;
}
inline float __fsqrt_rn(float a) {
  return std::sqrt(a);
}
inline float __expf(float x) {
  return std::exp(x);
}
inline float __logf(float x) {
  return std::log(x);
}
inline float __sinf(float x) {
  return std::sin(x);
}
inline float __cosf(float x) {
  return std::cos(x);
}
inline float __powf(float a, float b) {
  return std::pow(a, b);
}
inline float __fdividef(float a, float b) {
  return a / b;
}
inline float __saturatef(float x) {
  return x < 0.f ? 0.f : (x > 1.f ? 1.f : x);
}
inline float rsqrtf(float x) {
  return 1.0f / std::sqrt(x);
}
inline double rsqrt(double x) {
  return 1.0 / std::sqrt(x);
}
inline float exp10f(float x) {
  return std::pow(10.0f, x);
}
inline float __uint_as_float(unsigned u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline unsigned __float_as_uint(float f) {
  unsigned u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float __int_as_float(int i) {
  float f;
  std::memcpy(&f, &i, 4);
  return f;
}
inline int __float_as_int(float f) {
  int i;
  std::memcpy(&i, &f, 4);
  return i;
}
inline unsigned __byte_perm(unsigned x, unsigned y, unsigned s) {
  const uint64_t v = (uint64_t(y) << 32) | x;
  unsigned r = 0;
  for (int i = 0; i < 4; ++i) r |= unsigned((v >> (8 * ((s >> (4 * i)) & 7))) & 0xff) << (8 * i);
  return r;
}
inline int __popc(unsigned x) {
  return __builtin_popcount(x);
}
inline int __popcll(unsigned long long x) {
  return __builtin_popcountll(x);
}
inline int __clz(int x) {
  return x == 0 ? 32 : __builtin_clz(unsigned(x));
}
inline int __ffs(int x) {
  return __builtin_ffs(x);
}
inline unsigned __brev(unsigned x) {
  unsigned r = 0;
  for (int i = 0; i < 32; ++i) r |= ((x >> i) & 1u) << (31 - i);
  return r;
}
inline int __mul24(int a, int b) {
  return a * b;
}
inline int __umulhi(unsigned a, unsigned b) {
  return int((uint64_t(a) * b) >> 32);
}
inline int __float2int_rn(float x) {
  return int(std::nearbyint(x));
}
inline int __float2int_rz(float x) {
  return int(x);
}
inline unsigned __float2uint_rn(float x) {
  return unsigned(std::nearbyint(x));
}
inline float __int2float_rn(int x) {
  return float(x);
}

// Cache-hinted loads and stores: plain accesses.
template <class T>
inline T __ldg(const T* p) {
  return *p;
}
template <class T>
inline T __ldcs(const T* p) {
  return *p;
}
template <class T>
inline T __ldcg(const T* p) {
  return *p;
}
template <class T>
inline T __ldca(const T* p) {
  return *p;
}
template <class T>
inline T __ldlu(const T* p) {
  return *p;
}
template <class T>
inline void __stcs(T* p, T v) {
  *p = v;
}
template <class T>
inline void __stcg(T* p, T v) {
  *p = v;
}
template <class T>
inline void __stwt(T* p, T v) {
  *p = v;
}

// ---- runtime API (synchronous: streams are accepted and ignored) ---------------------------
cudaError_t cudaGetLastError();
cudaError_t cudaPeekAtLastError();
const char* cudaGetErrorName(cudaError_t e);
const char* cudaGetErrorString(cudaError_t e);
cudaError_t cudaMalloc(void** p, size_t bytes);
cudaError_t cudaFree(void* p);
cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind);
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind,
                            cudaStream_t stream = nullptr);
cudaError_t cudaMemset(void* p, int value, size_t bytes);
cudaError_t cudaMemsetAsync(void* p, int value, size_t bytes, cudaStream_t stream = nullptr);
cudaError_t cudaDeviceSynchronize();
cudaError_t cudaStreamSynchronize(cudaStream_t stream);
cudaError_t cudaGetDeviceCount(int* n);
cudaError_t cudaSetDevice(int dev);
cudaError_t cudaGetDevice(int* dev);
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* p, int dev);
cudaError_t cudaDeviceGetAttribute(int* v, cudaDeviceAttr attr, int dev);
cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes);
cudaError_t cudaDriverGetVersion(int* v);
cudaError_t cudaRuntimeGetVersion(int* v);
cudaError_t cudaStreamCreate(cudaStream_t* s);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned flags);
cudaError_t cudaStreamDestroy(cudaStream_t s);
cudaError_t cudaEventCreate(cudaEvent_t* e);
cudaError_t cudaEventDestroy(cudaEvent_t e);
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s = nullptr);
cudaError_t cudaEventSynchronize(cudaEvent_t e);
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t from, cudaEvent_t to);
// Graphs: a capture records the stream's launches and async memsets/copies; a launch replays them.
cudaError_t cudaStreamBeginCapture(cudaStream_t s, cudaStreamCaptureMode mode);
cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t* g);
cudaError_t cudaGraphInstantiate(cudaGraphExec_t* e, cudaGraph_t g, unsigned long long flags = 0);
cudaError_t cudaGraphLaunch(cudaGraphExec_t e, cudaStream_t s);
cudaError_t cudaGraphDestroy(cudaGraph_t g);
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t e);
cudaError_t cudaGetDriverEntryPointByVersion(const char* symbol, void** fn, unsigned version,
                                             unsigned long long flags,
                                             cudaDriverEntryPointQueryResult* status = nullptr);
template <class T>
cudaError_t cudaMalloc(T** p, size_t bytes) {
  return cudaMalloc(reinterpret_cast<void**>(p), bytes);
}
template <class T>
cudaError_t cudaFuncSetAttribute(T* kernel, cudaFuncAttribute attr, int value) {
  if (attr == cudaFuncAttributeMaxDynamicSharedMemorySize)
    return ::cuemu::set_max_dynamic_shared(reinterpret_cast<const void*>(kernel), value);
  return cudaSuccess;
}
