// Synthetic weights 8 elements at a time on AVX2: fill_avx512.cpp's generator (rng::splitmix64
// over the element index) in 64-bit lanes, the 64-bit multiplies built from three vpmuludq (AVX2
// has no vpmullq), then the same conversions, so every value is bit for bit the scalar one
// (tests/kernels: Fill.VectorisedMatchesScalar compares every element).
#include <immintrin.h>

#include "core/half.hpp"
#include "core/rng.hpp"
#include "kernels/cpu/internal.hpp"

namespace latprof::cpu::detail {
namespace {

// a * b mod 2^64 in each 64-bit lane, b a constant.
inline __m256i mullo64(__m256i a, uint64_t b) {
  const __m256i b_lo = _mm256_set1_epi64x(int64_t(b & 0xffffffffu));
  const __m256i b_hi = _mm256_set1_epi64x(int64_t(b >> 32));
  const __m256i cross =
      _mm256_add_epi64(_mm256_mul_epu32(_mm256_srli_epi64(a, 32), b_lo), _mm256_mul_epu32(a, b_hi));
  return _mm256_add_epi64(_mm256_mul_epu32(a, b_lo), _mm256_slli_epi64(cross, 32));
}

inline __m256i splitmix4(__m256i x) {
  x = _mm256_add_epi64(x, _mm256_set1_epi64x(int64_t(rng::kGolden)));
  x = mullo64(_mm256_xor_si256(x, _mm256_srli_epi64(x, 30)), rng::kMix1);
  x = mullo64(_mm256_xor_si256(x, _mm256_srli_epi64(x, 27)), rng::kMix2);
  return _mm256_xor_si256(x, _mm256_srli_epi64(x, 31));
}

// The generator's outputs for indices i0 .. i0 + 4 (lo) and i0 + 4 .. i0 + 8 (hi).
inline void draw8(uint64_t key, uint64_t i0, __m256i& lo, __m256i& hi) {
  const __m256i k = _mm256_set1_epi64x(int64_t(key));
  const __m256i base =
      _mm256_add_epi64(_mm256_set1_epi64x(int64_t(i0)), _mm256_setr_epi64x(0, 1, 2, 3));
  lo = splitmix4(_mm256_add_epi64(k, mullo64(base, rng::kIndexMul)));
  hi = splitmix4(
      _mm256_add_epi64(k, mullo64(_mm256_add_epi64(base, _mm256_set1_epi64x(4)), rng::kIndexMul)));
}

// The low 32 bits of each 64-bit lane of lo, then of hi: 8 int32 in order.
inline __m256i low_dwords(__m256i lo, __m256i hi) {
  const __m256i idx = _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7);
  return _mm256_permute2x128_si256(_mm256_permutevar8x32_epi32(lo, idx),
                                   _mm256_permutevar8x32_epi32(hi, idx), 0x20);
}

// rng::uniform_i8 of 4 outputs, in 64-bit lanes: (r >> 32) % 255 - 127, the remainder by the
// multiply-shift that divides a 32-bit value by 255 exactly (q = v * 0x80808081 >> 39).
inline __m256i i8_of(__m256i r) {
  const __m256i v = _mm256_srli_epi64(r, 32);
  const __m256i q = _mm256_srli_epi64(_mm256_mul_epu32(v, _mm256_set1_epi64x(0x80808081)), 39);
  const __m256i rem = _mm256_sub_epi64(v, _mm256_mul_epu32(q, _mm256_set1_epi64x(255)));
  return _mm256_sub_epi64(rem, _mm256_set1_epi64x(127));
}

}  // namespace

void fill_f16_avx2(uint16_t* dst, int64_t n, uint64_t key, uint64_t i0, float amplitude) {
  const __m256 unit = _mm256_set1_ps(1.0f / float(1 << 23)), amp = _mm256_set1_ps(amplitude);
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    __m256i lo, hi;
    draw8(key, i0 + uint64_t(j), lo, hi);
    // rng::uniform_pm1: the top 24 bits, less 2^23, times 2^-23 (all exact), then the amplitude.
    const __m256i bits = low_dwords(_mm256_srli_epi64(lo, 40), _mm256_srli_epi64(hi, 40));
    const __m256 u =
        _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(bits, _mm256_set1_epi32(1 << 23))), unit);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + j),
                     _mm256_cvtps_ph(_mm256_mul_ps(amp, u), _MM_FROUND_TO_NEAREST_INT));
  }
  for (; j < n; ++j) dst[j] = float_to_half(amplitude * rng::uniform_pm1(key, i0 + uint64_t(j)));
}

void fill_i8_avx2(int8_t* dst, int64_t n, uint64_t key, uint64_t i0) {
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    __m256i lo, hi;
    draw8(key, i0 + uint64_t(j), lo, hi);
    const __m256i v = low_dwords(i8_of(lo), i8_of(hi));  // 8 int32 in [-127, 127]
    const __m128i w16 = _mm_packs_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    _mm_storel_epi64(reinterpret_cast<__m128i*>(dst + j), _mm_packs_epi16(w16, w16));
  }
  for (; j < n; ++j) dst[j] = rng::uniform_i8(key, i0 + uint64_t(j));
}

}  // namespace latprof::cpu::detail
