// Portable GEMM on CUDA cores for shapes cuBLASLt has no algorithm for (odd leading dimensions in
// tests, unusual models): y[m, n_out] = x[m, n_in] · Wᵀ, fp32 accumulation, 16x16 output tiles
// with both operands staged through shared memory. CPU reference: cpu::gemm. Not a fast path.
#include "kernels/cuda/common.cuh"

namespace latprof::cuda {

namespace {

constexpr int kT = 16;

template <bool kInt8>
__global__ void gemm_tile_kernel(const void* w, const float* scales, const __half* x, int64_t m,
                                 int64_t n_out, int64_t n_in, __half* y) {
  __shared__ float xs[kT][kT + 1];
  __shared__ float ws[kT][kT + 1];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int64_t row = blockIdx.y * int64_t(kT) + ty;  // token
  const int64_t col = blockIdx.x * int64_t(kT) + tx;  // output channel
  float acc = 0.f;
  for (int64_t k0 = 0; k0 < n_in; k0 += kT) {
    const int64_t kx = k0 + tx;
    xs[ty][tx] = (row < m && kx < n_in) ? __half2float(x[row * n_in + kx]) : 0.f;
    const int64_t wr = blockIdx.x * int64_t(kT) + ty;
    float wv = 0.f;
    if (wr < n_out && kx < n_in)
      wv = kInt8 ? float(static_cast<const int8_t*>(w)[wr * n_in + kx])
                 : __half2float(static_cast<const __half*>(w)[wr * n_in + kx]);
    ws[ty][tx] = wv;
    __syncthreads();
#pragma unroll
    for (int k = 0; k < kT; ++k) acc = fmaf(xs[ty][k], ws[tx][k], acc);
    __syncthreads();
  }
  if (row < m && col < n_out)
    y[row * n_out + col] = __float2half_rn(kInt8 ? acc * scales[col] : acc);
}

}  // namespace

void gemm_fallback(const void* w, const float* scales, bool int8, const __half* x, int64_t m,
                   int64_t n_out, int64_t n_in, __half* y, cudaStream_t stream) {
  if (m <= 0 || n_out <= 0) return;
  const dim3 grid(unsigned((n_out + kT - 1) / kT), unsigned((m + kT - 1) / kT));
  const dim3 block(kT, kT);
  if (int8)
    gemm_tile_kernel<true><<<grid, block, 0, stream>>>(w, scales, x, m, n_out, n_in, y);
  else
    gemm_tile_kernel<false><<<grid, block, 0, stream>>>(w, scales, x, m, n_out, n_in, y);
  LP_CHECK_LAUNCH();
}

}  // namespace latprof::cuda
