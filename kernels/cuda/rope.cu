// Rotary embedding, Hugging Face rotate_half. CPU reference: cpu::rope.
// One thread per (row, i < hd/2) computes the angle pos * theta^(-2i/hd) in double (positions
// reach 1e5, where a float angle is off by ~1e-2 rad; the CPU also uses double) and rotates the
// pair (i, i + hd/2) of every query and key head of that row. The position comes from a device
// scalar so that a decode step is capturable once and replayed at any position.
#include <cmath>

#include "kernels/cuda/common.cuh"

namespace latprof::cuda {

namespace {

__global__ void rope_kernel(__half* q, __half* k, int64_t rows, int64_t n_new, const int32_t* pos,
                            int n_heads, int n_kv_heads, int hd, double log_theta) {
  const int half = hd / 2;
  const int64_t idx = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (idx >= rows * half) return;
  const int64_t r = idx / half;
  const int i = int(idx % half);
  const double p = double(*pos + int32_t(r % n_new));
  const double inv_freq = exp(-2.0 * double(i) / double(hd) * log_theta);
  double s, c;
  sincos(p * inv_freq, &s, &c);
  const float cf = float(c), sf = float(s);
  auto rotate = [&](__half* v) {
    const float a = __half2float(v[i]), b = __half2float(v[i + half]);
    v[i] = __float2half_rn(a * cf - b * sf);
    v[i + half] = __float2half_rn(b * cf + a * sf);
  };
  for (int h = 0; h < n_heads; ++h) rotate(q + (r * n_heads + h) * int64_t(hd));
  for (int h = 0; h < n_kv_heads; ++h) rotate(k + (r * n_kv_heads + h) * int64_t(hd));
}

}  // namespace

void rope(__half* q, __half* k, int64_t rows, int64_t n_new, const int32_t* pos, int n_heads,
          int n_kv_heads, int hd, float theta, cudaStream_t stream) {
  if (rows <= 0 || hd < 2) return;
  const int64_t n = rows * (hd / 2);
  rope_kernel<<<detail::blocks_for(n, 128, int64_t(1) << 30), 128, 0, stream>>>(
      q, k, rows, n_new, pos, n_heads, n_kv_heads, hd, std::log(double(theta)));
  LP_CHECK_LAUNCH();
}

}  // namespace latprof::cuda
