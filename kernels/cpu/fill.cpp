// Deterministic synthetic weights: element i is a pure function of (key, i), so the result does
// not depend on the thread count (nor on the device).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/half.hpp"
#include "core/rng.hpp"
#include "kernels/cpu/internal.hpp"
#include "kernels/cpu/kernels.hpp"

namespace latprof::cpu {

void fill_f16(uint16_t* dst, int64_t n, uint64_t key, float amplitude) {
  if (active_isa() != Isa::scalar) {
    constexpr int64_t kBlock = 16384;
    const int64_t blocks = (n + kBlock - 1) / kBlock;
    auto* f = active_isa() == Isa::avx512 ? detail::fill_f16_avx512 : detail::fill_f16_avx2;
#pragma omp parallel for schedule(static) if (n > 65536)
    for (int64_t b = 0; b < blocks; ++b)
      f(dst + b * kBlock, std::min(kBlock, n - b * kBlock), key, uint64_t(b * kBlock), amplitude);
    return;
  }
#pragma omp parallel for schedule(static) if (n > 65536)
  for (int64_t i = 0; i < n; ++i)
    dst[i] = float_to_half_branch_free(amplitude * rng::uniform_pm1(key, uint64_t(i)));
}

namespace {

// Elements i0 .. i0 + n of an int8 tensor into dst[0 .. n) (vec: 16 at a time on AVX-512, 8 on
// AVX2).
void fill_i8_run(int8_t* dst, int64_t n, uint64_t key, uint64_t i0, bool vec) {
  if (vec)
    return active_isa() == Isa::avx512 ? detail::fill_i8_avx512(dst, n, key, i0)
                                       : detail::fill_i8_avx2(dst, n, key, i0);
  for (int64_t i = 0; i < n; ++i) dst[i] = rng::uniform_i8(key, i0 + uint64_t(i));
}

}  // namespace

void fill_i8(int8_t* dst, float* scales, int64_t n_out, int64_t n_in, uint64_t key, float amplitude,
             bool rows4) {
  const bool vec = active_isa() != Isa::scalar;
  if (rows4) {
    // Each group of 4 rows, 64 columns at a time, at its place in the interleaved layout.
    const int64_t groups = n_out / 4, chunks = n_in / 64;
#pragma omp parallel for schedule(static) if (n_out * n_in > 65536)
    for (int64_t g = 0; g < groups; ++g)
      for (int64_t i = 0; i < 4; ++i) {
        const int64_t r = 4 * g + i;
        scales[r] = amplitude / 127.0f;
        for (int64_t c = 0; c < chunks; ++c)
          fill_i8_run(dst + i8_offset(true, n_out, n_in, r, 64 * c), 64, key,
                      uint64_t(r * n_in + 64 * c), vec);
      }
    return;
  }
#pragma omp parallel for schedule(static) if (n_out * n_in > 65536)
  for (int64_t r = 0; r < n_out; ++r) {
    scales[r] = amplitude / 127.0f;
    fill_i8_run(dst + r * n_in, n_in, key, uint64_t(r * n_in), vec);
  }
}

void pack_rows4(const int8_t* src, int8_t* dst, int64_t n_out, int64_t n_in) {
  const int64_t groups = n_out / 4, chunks = n_in / 64;
#pragma omp parallel for schedule(static) if (n_out * n_in > 65536)
  for (int64_t g = 0; g < groups; ++g)
    for (int64_t c = 0; c < chunks; ++c)
      for (int64_t i = 0; i < 4; ++i)
        std::memcpy(dst + i8_offset(true, n_out, n_in, 4 * g + i, 64 * c),
                    src + (4 * g + i) * n_in + 64 * c, 64);
}

void interleave_rows4(int8_t* w, int64_t n_out, int64_t n_in) {
  // Through a row-major copy of the whole matrix. (The backend writes the layout directly,
  // fill_i8's rows4 and pack_rows4; this in-place form serves the tests and benchmarks.)
  const std::vector<int8_t> src(w, w + n_out * n_in);
  pack_rows4(src.data(), w, n_out, n_in);
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
