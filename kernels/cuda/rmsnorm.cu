// RMSNorm. CPU reference: cpu::rmsnorm. One block per row; the sum of squares is accumulated in
// fp32 per thread and tree-reduced (relative error ~1e-6 for dim <= 64k, far below fp16's 5e-4).
// out may alias x: each thread reads an element before it writes the same element.
#include "kernels/cuda/common.cuh"

namespace latprof::cuda {

namespace {

__global__ void rmsnorm_kernel(const __half* x, const float* w, int64_t dim, float eps,
                               __half* out) {
  const __half* xr = x + blockIdx.x * dim;
  __half* orow = out + blockIdx.x * dim;
  float ss = 0.f;
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) {
    const float v = __half2float(xr[i]);
    ss += v * v;
  }
  ss = detail::block_sum(ss);
  const float inv = rsqrtf(ss / float(dim) + eps);
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x)
    orow[i] = __float2half_rn(__half2float(xr[i]) * inv * w[i]);
}

// dim % 2 == 0: half2 loads.
__global__ void rmsnorm2_kernel(const __half2* x, const float2* w, int64_t dim2, float eps,
                                __half2* out) {
  const __half2* xr = x + blockIdx.x * dim2;
  __half2* orow = out + blockIdx.x * dim2;
  float ss = 0.f;
  for (int64_t i = threadIdx.x; i < dim2; i += blockDim.x) {
    const float2 v = __half22float2(xr[i]);
    ss += v.x * v.x + v.y * v.y;
  }
  ss = detail::block_sum(ss);
  const float inv = rsqrtf(ss / float(2 * dim2) + eps);
  for (int64_t i = threadIdx.x; i < dim2; i += blockDim.x) {
    const float2 v = __half22float2(xr[i]);
    const float2 g = w[i];
    orow[i] = __floats2half2_rn(v.x * inv * g.x, v.y * inv * g.y);
  }
}

}  // namespace

void rmsnorm(const __half* x, const float* w, int64_t rows, int64_t dim, float eps, __half* out,
             cudaStream_t stream) {
  if (rows <= 0 || dim <= 0) return;
  const int threads = dim >= 4096 ? 512 : 256;
  if (dim % 2 == 0) {
    rmsnorm2_kernel<<<unsigned(rows), threads, 0, stream>>>(
        reinterpret_cast<const __half2*>(x), reinterpret_cast<const float2*>(w), dim / 2, eps,
        reinterpret_cast<__half2*>(out));
  } else {
    rmsnorm_kernel<<<unsigned(rows), threads, 0, stream>>>(x, w, dim, eps, out);
  }
  LP_CHECK_LAUNCH();
}

}  // namespace latprof::cuda
