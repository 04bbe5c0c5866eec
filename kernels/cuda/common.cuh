#pragma once
// Small device helpers shared by the kernels in kernels/cuda/.
#include <cuda_fp16.h>

#include <cstdint>

// Default visibility for the error types so that the host catches them across the module.
#pragma GCC visibility push(default)
#include "core/error.hpp"
#pragma GCC visibility pop
#include "kernels/cuda/check.hpp"
#include "kernels/cuda/kernels.hpp"

namespace latprof::cuda::detail {

inline unsigned blocks_for(int64_t n, int threads, int64_t max_blocks = 65535LL * 16) {
  int64_t b = (n + threads - 1) / threads;
  if (b < 1) b = 1;
  return unsigned(b < max_blocks ? b : max_blocks);
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Sum over the block (blockDim.x a multiple of 32, at most 1024); every thread gets the result.
__device__ __forceinline__ float block_sum(float v) {
  __shared__ float partial[32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  v = warp_sum(v);
  __syncthreads();  // partial[] may still be read by a previous call
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  const int n_warps = int(blockDim.x >> 5);
  v = lane < n_warps ? partial[lane] : 0.f;
  return warp_sum(v);
}

}  // namespace latprof::cuda::detail
