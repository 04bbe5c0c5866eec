// Synthetic weights 16 elements at a time: fill.cpp's generator (rng::splitmix64 over the element
// index) in 64-bit lanes with vpmullq, then the same conversions, so every value is bit for bit
// the scalar one (tests/kernels: Fill.VectorisedMatchesScalar compares every element).
#include <immintrin.h>

#include "core/half.hpp"
#include "core/rng.hpp"
#include "kernels/cpu/internal.hpp"

// GCC 12 reports _mm512_undefined_*() inside the narrowing intrinsics as uninitialised (a known
// false positive once they are inlined).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace latprof::cpu::detail {
namespace {

inline __m512i splitmix8(__m512i x) {
  x = _mm512_add_epi64(x, _mm512_set1_epi64(int64_t(rng::kGolden)));
  x = _mm512_mullo_epi64(_mm512_xor_si512(x, _mm512_srli_epi64(x, 30)),
                         _mm512_set1_epi64(int64_t(rng::kMix1)));
  x = _mm512_mullo_epi64(_mm512_xor_si512(x, _mm512_srli_epi64(x, 27)),
                         _mm512_set1_epi64(int64_t(rng::kMix2)));
  return _mm512_xor_si512(x, _mm512_srli_epi64(x, 31));
}

// The generator's outputs for indices i0 .. i0 + 8 (lo) and i0 + 8 .. i0 + 16 (hi).
inline void draw16(uint64_t key, uint64_t i0, __m512i& lo, __m512i& hi) {
  const __m512i lane = _mm512_set_epi64(7, 6, 5, 4, 3, 2, 1, 0);
  const __m512i mul = _mm512_set1_epi64(int64_t(rng::kIndexMul));
  const __m512i k = _mm512_set1_epi64(int64_t(key));
  const __m512i base = _mm512_add_epi64(_mm512_set1_epi64(int64_t(i0)), lane);
  lo = splitmix8(_mm512_add_epi64(k, _mm512_mullo_epi64(base, mul)));
  hi = splitmix8(
      _mm512_add_epi64(k, _mm512_mullo_epi64(_mm512_add_epi64(base, _mm512_set1_epi64(8)), mul)));
}

// rng::uniform_i8 of 8 outputs: (r >> 32) % 255 - 127, the remainder by the multiply-shift that
// divides a 32-bit value by 255 exactly (q = v * 0x80808081 >> 39).
inline __m128i i8_of(__m512i r) {
  const __m512i v = _mm512_srli_epi64(r, 32);
  const __m512i q = _mm512_srli_epi64(_mm512_mul_epu32(v, _mm512_set1_epi64(0x80808081)), 39);
  const __m512i rem = _mm512_sub_epi64(v, _mm512_mul_epu32(q, _mm512_set1_epi64(255)));
  return _mm512_cvtepi64_epi8(_mm512_sub_epi64(rem, _mm512_set1_epi64(127)));
}

}  // namespace

void fill_f16_avx512(uint16_t* dst, int64_t n, uint64_t key, uint64_t i0, float amplitude) {
  const __m512 unit = _mm512_set1_ps(1.0f / float(1 << 23)), amp = _mm512_set1_ps(amplitude);
  int64_t j = 0;
  for (; j + 16 <= n; j += 16) {
    __m512i lo, hi;
    draw16(key, i0 + uint64_t(j), lo, hi);
    // rng::uniform_pm1: the top 24 bits, less 2^23, times 2^-23 (all exact), then the amplitude.
    const __m512i bits =
        _mm512_inserti64x4(_mm512_castsi256_si512(_mm512_cvtepi64_epi32(_mm512_srli_epi64(lo, 40))),
                           _mm512_cvtepi64_epi32(_mm512_srli_epi64(hi, 40)), 1);
    const __m512 u =
        _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(bits, _mm512_set1_epi32(1 << 23))), unit);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + j),
                        _mm512_cvtps_ph(_mm512_mul_ps(amp, u), _MM_FROUND_TO_NEAREST_INT));
  }
  for (; j < n; ++j) dst[j] = float_to_half(amplitude * rng::uniform_pm1(key, i0 + uint64_t(j)));
}

void fill_i8_avx512(int8_t* dst, int64_t n, uint64_t key, uint64_t i0) {
  int64_t j = 0;
  for (; j + 16 <= n; j += 16) {
    __m512i lo, hi;
    draw16(key, i0 + uint64_t(j), lo, hi);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + j), _mm_unpacklo_epi64(i8_of(lo), i8_of(hi)));
  }
  for (; j < n; ++j) dst[j] = rng::uniform_i8(key, i0 + uint64_t(j));
}

}  // namespace latprof::cpu::detail
