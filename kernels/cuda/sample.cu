// Greedy sampling on the device. CPU reference: cpu::argmax (the first index wins ties; NaN
// logits never win). One block per sequence; each thread scans a strided slice, then the block
// reduces (value, index) pairs, keeping the smaller index on equal values.
#include "kernels/cuda/common.cuh"

namespace latprof::cuda {

namespace {

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
    if (v > best || (idx == INT32_MAX && v == best)) {  // the first index reaching -inf counts
      best = v;
      idx = int32_t(i);
    }
  }
#pragma unroll
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
  __syncthreads();
  if (warp == 0) {
    best = lane < int(blockDim.x >> 5) ? sv[lane] : -INFINITY;
    idx = lane < int(blockDim.x >> 5) ? si[lane] : INT32_MAX;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
      const float v2 = __shfl_xor_sync(0xffffffffu, best, o);
      const int32_t i2 = __shfl_xor_sync(0xffffffffu, idx, o);
      better(best, idx, v2, i2);
    }
    if (lane == 0) tokens[blockIdx.x] = idx == INT32_MAX ? 0 : idx;
  }
}

}  // namespace

void argmax(const __half* logits, int64_t n_seq, int64_t vocab, int32_t* tokens,
            cudaStream_t stream) {
  if (n_seq <= 0) return;
  argmax_kernel<<<unsigned(n_seq), kThreads, 0, stream>>>(logits, vocab, tokens);
  LP_CHECK_LAUNCH();
}

}  // namespace latprof::cuda
