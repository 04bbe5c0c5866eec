// Rotary embedding, Hugging Face rotate_half. CPU reference: cpu::rope.
// One thread per (row, i < hd/2) computes the angle pos * inv_freq[i] in double (positions
// reach 1e5, where a float angle is off by ~1e-2 rad; the CPU also uses double) and rotates the
// pair (i, i + hd/2) of every query and key head of that row. Row r's position is positions[r]
// in device memory, so a captured step replays at any positions.
#include <cmath>

#include "kernels/cuda/common.cuh"

namespace latprof::cuda {

namespace {

// The frequency table travels by value (1 KiB of kernel parameters): no device copy to manage,
// and a captured decode graph keeps it.
struct InvFreq {
  double f[kAttnMaxHeadDim / 2];
};

__global__ void rope_kernel(__half* q, __half* k, const int32_t* positions, int64_t rows,
                            int n_heads, int n_kv_heads, int hd, InvFreq inv) {
  const int half = hd / 2;
  const int64_t idx = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (idx >= rows * half) return;
  const int64_t r = idx / half;
  const int i = int(idx % half);
  const double p = double(positions[r]);
  double s, c;
  sincos(p * inv.f[i], &s, &c);
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

void rope(__half* q, __half* k, const int32_t* positions, int64_t rows, int n_heads, int n_kv_heads,
          int hd, const double* inv_freq, cudaStream_t stream) {
  if (rows <= 0 || hd < 2) return;
  LATPROF_ASSERT(hd <= kAttnMaxHeadDim, "head_dim must be <= 256");
  InvFreq inv{};
  for (int i = 0; i < hd / 2; ++i) inv.f[i] = inv_freq[i];
  const int64_t n = rows * (hd / 2);
  rope_kernel<<<detail::blocks_for(n, 128, int64_t(1) << 30), 128, 0, stream>>>(
      q, k, positions, rows, n_heads, n_kv_heads, hd, inv);
  LP_CHECK_LAUNCH();
}

}  // namespace latprof::cuda
