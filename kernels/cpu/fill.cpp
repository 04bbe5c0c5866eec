// Deterministic synthetic weights: element i is a pure function of (key, i), so the result does
// not depend on the thread count (nor on the device).
#include <algorithm>
#include <cmath>

#include "core/half.hpp"
#include "core/rng.hpp"
#include "kernels/cpu/kernels.hpp"

namespace latprof::cpu {

void fill_f16(uint16_t* dst, int64_t n, uint64_t key, float amplitude) {
#pragma omp parallel for schedule(static) if (n > 65536)
  for (int64_t i = 0; i < n; ++i)
    dst[i] = float_to_half(amplitude * rng::uniform_pm1(key, uint64_t(i)));
}

void fill_i8(int8_t* dst, float* scales, int64_t n_out, int64_t n_in, uint64_t key,
             float amplitude) {
#pragma omp parallel for schedule(static) if (n_out * n_in > 65536)
  for (int64_t r = 0; r < n_out; ++r) {
    scales[r] = amplitude / 127.0f;
    int8_t* row = dst + r * n_in;
    for (int64_t i = 0; i < n_in; ++i) row[i] = rng::uniform_i8(key, uint64_t(r * n_in + i));
  }
}

void fill_f32(float* dst, int64_t n, uint64_t key, float center, float amplitude) {
#pragma omp parallel for schedule(static) if (n > 65536)
  for (int64_t i = 0; i < n; ++i) dst[i] = center + amplitude * rng::uniform_pm1(key, uint64_t(i));
}

void quantize_rows_f16(const uint16_t* src, int64_t n_out, int64_t n_in, int8_t* dst,
                       float* scales) {
#pragma omp parallel for schedule(static) if (n_out * n_in > 65536)
  for (int64_t r = 0; r < n_out; ++r) {
    const uint16_t* row = src + r * n_in;
    float amax = 0;
    for (int64_t i = 0; i < n_in; ++i) amax = std::max(amax, std::fabs(half_to_float(row[i])));
    const float scale = amax / 127.0f;
    scales[r] = scale;
    int8_t* q = dst + r * n_in;
    for (int64_t i = 0; i < n_in; ++i) {
      // Round half to even (the CUDA __float2int_rn convention); an all-zero row stays zero.
      const float v = scale > 0 ? std::nearbyint(half_to_float(row[i]) / scale) : 0.0f;
      q[i] = int8_t(std::clamp(v, -127.0f, 127.0f));
    }
  }
}

}  // namespace latprof::cpu
