// Elementwise ops of the block. CPU references: cpu::swiglu, cpu::add; gather_last mirrors the CPU
// backend's row copy. half2 loads when n is even; fp32 arithmetic.
#include "kernels/cuda/common.cuh"

namespace latprof::cuda {

namespace {

__device__ __forceinline__ float silu_mul(float g, float u) {
  return g / (1.0f + __expf(-g)) * u;
}

__global__ void swiglu2_kernel(const __half2* gate, const __half2* up, int64_t n2, __half2* out) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n2;
       i += int64_t(gridDim.x) * blockDim.x) {
    const float2 g = __half22float2(gate[i]), u = __half22float2(up[i]);
    out[i] = __floats2half2_rn(silu_mul(g.x, u.x), silu_mul(g.y, u.y));
  }
}

__global__ void swiglu_kernel(const __half* gate, const __half* up, int64_t n, __half* out) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    out[i] = __float2half_rn(silu_mul(__half2float(gate[i]), __half2float(up[i])));
}

__global__ void add2_kernel(__half2* x, const __half2* y, int64_t n2) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n2;
       i += int64_t(gridDim.x) * blockDim.x) {
    const float2 a = __half22float2(x[i]), b = __half22float2(y[i]);
    x[i] = __floats2half2_rn(a.x + b.x, a.y + b.y);
  }
}

__global__ void add_kernel(__half* x, const __half* y, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    x[i] = __float2half_rn(__half2float(x[i]) + __half2float(y[i]));
}

// One block walks the sequences in order: row s reads source row (s + 1) * n_new - 1 >= s, which
// no earlier iteration has overwritten, so out may alias x.
__global__ void gather_last_kernel(const __half* x, int64_t n_seq, int64_t n_new, int64_t dim,
                                   __half* out) {
  for (int64_t s = 0; s < n_seq; ++s) {
    const __half* src = x + ((s + 1) * n_new - 1) * dim;
    __half* dst = out + s * dim;
    __half buf[8];
    for (int64_t i0 = 0; i0 < dim; i0 += int64_t(blockDim.x) * 8) {
      // Read this stripe fully before writing it, as source and destination rows may overlap.
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const int64_t i = i0 + j * int64_t(blockDim.x) + threadIdx.x;
        if (i < dim) buf[j] = src[i];
      }
      __syncthreads();
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const int64_t i = i0 + j * int64_t(blockDim.x) + threadIdx.x;
        if (i < dim) dst[i] = buf[j];
      }
      __syncthreads();
    }
  }
}

}  // namespace

void swiglu(const __half* gate, const __half* up, int64_t n, __half* out, cudaStream_t stream) {
  if (n <= 0) return;
  if (n % 2 == 0) {
    swiglu2_kernel<<<detail::blocks_for(n / 2, 256), 256, 0, stream>>>(
        reinterpret_cast<const __half2*>(gate), reinterpret_cast<const __half2*>(up), n / 2,
        reinterpret_cast<__half2*>(out));
  } else {
    swiglu_kernel<<<detail::blocks_for(n, 256), 256, 0, stream>>>(gate, up, n, out);
  }
  LP_CHECK_LAUNCH();
}

void add(__half* x, const __half* y, int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  if (n % 2 == 0) {
    add2_kernel<<<detail::blocks_for(n / 2, 256), 256, 0, stream>>>(
        reinterpret_cast<__half2*>(x), reinterpret_cast<const __half2*>(y), n / 2);
  } else {
    add_kernel<<<detail::blocks_for(n, 256), 256, 0, stream>>>(x, y, n);
  }
  LP_CHECK_LAUNCH();
}

void gather_last(const __half* x, int64_t n_seq, int64_t n_new, int64_t dim, __half* out,
                 cudaStream_t stream) {
  if (n_seq <= 0 || dim <= 0) return;
  if (n_new == 1 && x == out) return;
  gather_last_kernel<<<1, 512, 0, stream>>>(x, n_seq, n_new, dim, out);
  LP_CHECK_LAUNCH();
}

}  // namespace latprof::cuda
