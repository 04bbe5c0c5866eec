// Deliberately broken kernels for tests/cuemu/checks_test.cpp (see broken.hpp). Each one is a
// correct kernel of kernels/cuda (or a minimal one) with exactly one defect.
#include "broken/broken.hpp"
#include "kernels/cuda/common.cuh"

namespace latprof::cuemutest::broken {

namespace {

// detail::block_sum without the __syncthreads() between writing and reading partial[].
__device__ float block_sum_no_sync(float v) {
  __shared__ float partial[32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  v = cuda::detail::warp_sum(v);
  __syncthreads();
  if (lane == 0) partial[warp] = v;
  const int n_warps = int(blockDim.x >> 5);
  v = lane < n_warps ? partial[lane] : 0.f;
  return cuda::detail::warp_sum(v);
}

__global__ void rmsnorm_kernel(const __half* x, const float* w, int64_t dim, float eps,
                               __half* out) {
  const __half* xr = x + blockIdx.x * dim;
  __half* orow = out + blockIdx.x * dim;
  float ss = 0.f;
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) {
    const float v = __half2float(xr[i]);
    ss += v * v;
  }
  ss = block_sum_no_sync(ss);
  const float inv = rsqrtf(ss / float(dim) + eps);
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x)
    orow[i] = __float2half_rn(__half2float(xr[i]) * inv * w[i]);
}

constexpr int kThreads = 1024;

__device__ __forceinline__ void better(float& v, int32_t& i, float v2, int32_t i2) {
  if (v2 > v || (v2 == v && i2 < i)) {
    v = v2;
    i = i2;
  }
}

__global__ void argmax_kernel(const __half* logits, int64_t vocab, int32_t* tokens) {
  const __half* row = logits + blockIdx.x * vocab;
  float best = -INFINITY;
  int32_t idx = INT32_MAX;
  for (int64_t i = threadIdx.x; i < vocab; i += blockDim.x) {
    const float v = __half2float(row[i]);
    if (v > best || (idx == INT32_MAX && v == best)) {
      best = v;
      idx = int32_t(i);
    }
  }
  for (int o = 16; o > 0; o >>= 1) {
    const float v2 = __shfl_xor_sync(0xffffffffu, best, o);
    const int32_t i2 = __shfl_xor_sync(0xffffffffu, idx, o);
    better(best, idx, v2, i2);
  }
  __shared__ float sv[kThreads / 32];
  __shared__ int32_t si[kThreads / 32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) {
    sv[warp] = best;
    si[warp] = idx;
  }
  // (missing: __syncthreads();)
  if (warp == 0) {
    best = lane < int(blockDim.x >> 5) ? sv[lane] : -INFINITY;
    idx = lane < int(blockDim.x >> 5) ? si[lane] : INT32_MAX;
    for (int o = 16; o > 0; o >>= 1) {
      const float v2 = __shfl_xor_sync(0xffffffffu, best, o);
      const int32_t i2 = __shfl_xor_sync(0xffffffffu, idx, o);
      better(best, idx, v2, i2);
    }
    if (lane == 0) tokens[blockIdx.x] = idx == INT32_MAX ? 0 : idx;
  }
}

constexpr int kT = 16;

__global__ void gemm_tile_kernel(const __half* w, const __half* x, int64_t m, int64_t n_out,
                                 int64_t n_in, __half* y) {
  __shared__ float xs[kT][kT + 1];
  __shared__ float ws[kT][kT + 1];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int64_t row = blockIdx.y * int64_t(kT) + ty;
  const int64_t col = blockIdx.x * int64_t(kT) + tx;
  float acc = 0.f;
  for (int64_t k0 = 0; k0 < n_in; k0 += kT) {
    const int64_t kx = k0 + tx;
    xs[ty][tx] = (row < m && kx < n_in) ? __half2float(x[row * n_in + kx]) : 0.f;
    const int64_t wr = blockIdx.x * int64_t(kT) + ty;
    ws[ty][tx] = (wr < n_out && kx < n_in) ? __half2float(w[wr * n_in + kx]) : 0.f;
    __syncthreads();
    for (int k = 0; k < kT; ++k) acc = fmaf(xs[ty][k], ws[tx][k], acc);
    // (missing: __syncthreads();)
  }
  if (row < m && col < n_out) y[row * n_out + col] = __float2half_rn(acc);
}

__global__ void warp_tile_kernel(float* out) {
  __shared__ float p[4][32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  p[warp][lane] = float(lane);
  // (missing: __syncwarp();)
  float s = 0.f;
  for (int j = 0; j < 32; j += 4) {
    const float4 v = *reinterpret_cast<const float4*>(&p[warp][j]);
    s += v.x + v.y + v.z + v.w;
  }
  out[threadIdx.x] = s;
}

__global__ void shared_off_by_one_kernel(float* out) {
  __shared__ float a[32];
  a[threadIdx.x] = float(threadIdx.x);
  __syncthreads();
  out[threadIdx.x] = a[threadIdx.x + 1];  // lane 31 reads a[32]
}

__global__ void shared_unwritten_kernel(int* out) {
  __shared__ int a[64];
  a[threadIdx.x] = int(threadIdx.x);  // 32 threads write a[0..31] only
  __syncthreads();
  out[threadIdx.x] = a[threadIdx.x + 32];
}

__global__ void partial_barrier_kernel(int* out) {
  if (threadIdx.x >= 64) return;
  __syncthreads();
  out[threadIdx.x] = 1;
}

__global__ void shuffle_exited_kernel(float* out) {
  if ((threadIdx.x & 31) >= 16) return;
  out[threadIdx.x] = cuda::detail::warp_sum(1.f);
}

__global__ void deadlock_kernel(float* out) {
  if ((threadIdx.x & 31) < 16) {
    __syncthreads();
    out[threadIdx.x] = 0.f;
  } else {
    out[threadIdx.x] = cuda::detail::warp_sum(1.f);
  }
}

__global__ void global_off_by_one_kernel(float* out, int n) {
  for (int i = threadIdx.x; i <= n; i += blockDim.x) out[i] = 1.f;
}

__global__ void too_much_shared_kernel(float* out) {
  extern __shared__ float dyn[];
  __shared__ float big[10 * 1024];
  big[threadIdx.x] = 1.f;
  dyn[threadIdx.x] = 2.f;
  __syncthreads();
  out[threadIdx.x] = big[threadIdx.x] + dyn[threadIdx.x];
}

__global__ void dynamic_shared_kernel(float* out) {
  extern __shared__ float dyn[];
  dyn[threadIdx.x] = 1.f;
  __syncthreads();
  out[threadIdx.x] = dyn[31 - threadIdx.x];
}

__global__ void record_order_kernel(int* counter, int* order) {
  __syncthreads();
  order[atomicAdd(counter, 1)] = int(threadIdx.x);
  __syncthreads();
}

__global__ void empty_kernel() {}

}  // namespace

void rmsnorm_no_sync(const __half* x, const float* w, int64_t rows, int64_t dim, float eps,
                     __half* out) {
  rmsnorm_kernel<<<unsigned(rows), 256>>>(x, w, dim, eps, out);
}
void argmax_no_sync(const __half* logits, int64_t n_seq, int64_t vocab, int32_t* tokens) {
  argmax_kernel<<<unsigned(n_seq), kThreads>>>(logits, vocab, tokens);
}
void gemm_no_trailing_sync(const __half* w, const __half* x, int64_t m, int64_t n_out, int64_t n_in,
                           __half* y) {
  const dim3 grid(unsigned((n_out + kT - 1) / kT), unsigned((m + kT - 1) / kT));
  gemm_tile_kernel<<<grid, dim3(kT, kT)>>>(w, x, m, n_out, n_in, y);
}
void warp_tile_no_syncwarp(float* out) {
  warp_tile_kernel<<<1, 128>>>(out);
}
void shared_off_by_one(float* out) {
  shared_off_by_one_kernel<<<1, 32>>>(out);
}
void shared_unwritten(int* out) {
  shared_unwritten_kernel<<<1, 32>>>(out);
}
void partial_barrier(int* out) {
  partial_barrier_kernel<<<1, 128>>>(out);
}
void shuffle_with_exited_lanes(float* out) {
  shuffle_exited_kernel<<<2, 64>>>(out);
}
void deadlock(float* out) {
  deadlock_kernel<<<1, 32>>>(out);
}
void global_off_by_one(float* out, int n) {
  global_off_by_one_kernel<<<1, 64>>>(out, n);
}
void too_much_shared(float* out) {
  too_much_shared_kernel<<<1, 32, 16 * 1024>>>(out);
}
cudaError_t dynamic_shared_64k(float* out, bool opt_in) {
  if (opt_in)
    LP_CHECK(cudaFuncSetAttribute(dynamic_shared_kernel,
                                  cudaFuncAttributeMaxDynamicSharedMemorySize, 64 * 1024));
  dynamic_shared_kernel<<<1, 32, 64 * 1024>>>(out);
  return cudaGetLastError();
}
void record_order(int* counter, int* order) {
  record_order_kernel<<<1, 256>>>(counter, order);
}
cudaError_t too_many_threads() {
  empty_kernel<<<1, 2048>>>();
  return cudaGetLastError();
}

}  // namespace latprof::cuemutest::broken
