// Synthetic weights on the device. CPU reference: cpu::fill_f16 / fill_i8 / fill_f32. Each element
// is a pure function of (key, index) through src/core/rng.hpp (compiled __host__ __device__), and
// the arithmetic is spelled with explicit rounding (__fmul_rn, __fadd_rn) so that nvcc cannot
// contract it into an FMA: the values are bit-identical to the CPU's.
#include "core/rng.hpp"
#include "kernels/cuda/common.cuh"

namespace latprof::cuda {

namespace {

__global__ void fill_f16_kernel(__half* dst, int64_t n, uint64_t key, float amplitude) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    dst[i] = __float2half_rn(__fmul_rn(amplitude, rng::uniform_pm1(key, uint64_t(i))));
}

__global__ void fill_i8_kernel(int8_t* dst, float* scales, int64_t n_out, int64_t n_in,
                               uint64_t key, float amplitude) {
  const int64_t n = n_out * n_in;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    dst[i] = rng::uniform_i8(key, uint64_t(i));  // i == row * n_in + column
    if (i % n_in == 0) scales[i / n_in] = __fdiv_rn(amplitude, 127.0f);
  }
}

__global__ void fill_f32_kernel(float* dst, int64_t n, uint64_t key, float center,
                                float amplitude) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    dst[i] = __fadd_rn(center, __fmul_rn(amplitude, rng::uniform_pm1(key, uint64_t(i))));
}

}  // namespace

void fill_f16(__half* dst, int64_t n, uint64_t key, float amplitude, cudaStream_t stream) {
  if (n <= 0) return;
  fill_f16_kernel<<<detail::blocks_for(n, 256), 256, 0, stream>>>(dst, n, key, amplitude);
  LP_CHECK_LAUNCH();
}

void fill_i8(int8_t* dst, float* scales, int64_t n_out, int64_t n_in, uint64_t key, float amplitude,
             cudaStream_t stream) {
  if (n_out <= 0 || n_in <= 0) return;
  fill_i8_kernel<<<detail::blocks_for(n_out * n_in, 256), 256, 0, stream>>>(dst, scales, n_out,
                                                                            n_in, key, amplitude);
  LP_CHECK_LAUNCH();
}

void fill_f32(float* dst, int64_t n, uint64_t key, float center, float amplitude,
              cudaStream_t stream) {
  if (n <= 0) return;
  fill_f32_kernel<<<detail::blocks_for(n, 256), 256, 0, stream>>>(dst, n, key, center, amplitude);
  LP_CHECK_LAUNCH();
}

}  // namespace latprof::cuda
