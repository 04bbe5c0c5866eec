// fp32 <-> fp16 array conversion with F16C (compiled for AVX2 + F16C; used by the AVX2 and AVX-512
// paths). Round to nearest even, bit-identical to latprof::float_to_half.
#include <immintrin.h>

#include <cmath>
#include <cstring>

#include "core/half.hpp"
#include "kernels/cpu/internal.hpp"
#include "kernels/cpu/math_avx2.hpp"

namespace latprof::cpu::detail {

void f32_to_f16_f16c(const float* src, uint16_t* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), h);
  }
  for (; i < n; ++i) dst[i] = float_to_half(src[i]);
}

void f16_to_f32_f16c(const uint16_t* src, float* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, load8(src + i));
  for (; i < n; ++i) dst[i] = half_to_float(src[i]);
}

namespace {

// src rounded to fp16 into dst, as fp16 (uint16_t) or back in fp32 (float); whether every element
// was within fp16's range (|x| <= kF16Max, not NaN). One pass: rounding a row into fp32 through an
// fp16 copy took twice as long (a 500 x 11,008 GEMM's rounding 1.9 -> 3.9 ms).
template <class Out>
bool round_row(const float* src, Out* dst, int64_t n) {
  const __m256 lim = _mm256_set1_ps(kF16Max);
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  __m256 over = _mm256_setzero_ps();  // lanes beyond fp16's range, or NaN ("not <=" holds)
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(src + i);
    over = _mm256_or_ps(over, _mm256_cmp_ps(_mm256_and_ps(v, abs_mask), lim, _CMP_NLE_UQ));
    const __m128i h = _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT);
    if constexpr (sizeof(Out) == 2)
      _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), h);
    else
      _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(h));
  }
  bool in_range = _mm256_movemask_ps(over) == 0;
  for (; i < n; ++i) {
    in_range &= std::fabs(src[i]) <= kF16Max;
    const uint16_t h = float_to_half(src[i]);
    if constexpr (sizeof(Out) == 2)
      dst[i] = h;
    else
      dst[i] = half_to_float(h);
  }
  return in_range;
}

}  // namespace

bool f32_to_f16_in_range_f16c(const float* src, uint16_t* dst, int64_t n) {
  return round_row(src, dst, n);
}

void round_rows_f16_f16c(const float* x, int64_t m, int64_t n, float* out) {
  for (int64_t j = 0; j < m; ++j)
    if (!round_row(x + j * n, out + j * n, n))  // the row stays fp32
      std::memcpy(out + j * n, x + j * n, size_t(n) * sizeof(float));
}

}  // namespace latprof::cpu::detail
