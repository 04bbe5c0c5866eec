// Elementwise ops of the block. CPU references: cpu::swiglu, cpu::add; gather_rows is the CPU
// backend's row copy (CpuBackend::gather_rows). half2 loads when n is even; fp32 arithmetic.
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

// out[i, :] = x[rows[i], :]; one thread per element (half2 when dim is even).
__global__ void gather_rows_kernel(const __half* x, const int32_t* rows, int64_t n, int64_t dim,
                                   __half* out) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n * dim;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / dim, c = i % dim;
    out[i] = x[int64_t(rows[r]) * dim + c];
  }
}

__global__ void gather_rows2_kernel(const __half2* x, const int32_t* rows, int64_t n, int64_t dim2,
                                    __half2* out) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n * dim2;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / dim2, c = i % dim2;
    out[i] = x[int64_t(rows[r]) * dim2 + c];
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

void gather_rows(const __half* x, const int32_t* rows, int64_t n, int64_t dim, __half* out,
                 cudaStream_t stream) {
  if (n <= 0 || dim <= 0) return;
  if (dim % 2 == 0) {
    gather_rows2_kernel<<<detail::blocks_for(n * dim / 2, 256), 256, 0, stream>>>(
        reinterpret_cast<const __half2*>(x), rows, n, dim / 2, reinterpret_cast<__half2*>(out));
  } else {
    gather_rows_kernel<<<detail::blocks_for(n * dim, 256), 256, 0, stream>>>(x, rows, n, dim, out);
  }
  LP_CHECK_LAUNCH();
}

}  // namespace latprof::cuda
