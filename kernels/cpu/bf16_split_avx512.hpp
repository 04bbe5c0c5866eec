#pragma once
// Exact splits of fp32 values into sums of bf16 for the AMX-BF16 kernels
// (gemm_f16_amx_bf16_avx512.cpp, attention_amx_bf16_avx512.cpp): the tiles multiply bf16 (8
// significant bits) exactly and sum in fp32, so a value split into bf16 parts multiplies as the
// sum of the parts' products. An fp16 value (11 bits) is the sum of two bf16, an fp32 value (24
// bits) of three: each part is the remainder so far rounded to nearest even (vcvtne2ps2bf16),
// whose error is the next, shorter remainder. Include only from files compiled with AVX512-BF16;
// everything here has internal linkage (each file keeps its own copy, built with its own flags).
#include <immintrin.h>

namespace latprof::cpu::detail {
namespace {

// 16 bf16 (the low halves of a 512-bit vector of 32) widened back to fp32: a shift.
inline __m512 bf16_lo16(__m512i v) {
  return _mm512_castsi512_ps(
      _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm512_castsi512_si256(v)), 16));
}
inline __m512 bf16_hi16(__m512i v) {
  return _mm512_castsi512_ps(
      _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm512_extracti64x4_epi64(v, 1)), 16));
}

// f0 (elements 0-15) and f1 (16-31) as 32 bf16 in order, hi + lo. kCheck: returns the lanes where
// hi + lo is not exactly the input (a value that is not fp16, or not finite); fp16 values always
// split exactly.
template <bool kCheck>
inline __mmask16 split(__m512 f0, __m512 f1, __m512i& hi, __m512i& lo) {
  hi = __m512i(_mm512_cvtne2ps_pbh(f1, f0));
  const __m512 h0 = bf16_lo16(hi), h1 = bf16_hi16(hi);
  const __m512 r0 = _mm512_sub_ps(f0, h0), r1 = _mm512_sub_ps(f1, h1);
  lo = __m512i(_mm512_cvtne2ps_pbh(r1, r0));
  if constexpr (!kCheck) return 0;
  const __m512 l0 = bf16_lo16(lo), l1 = bf16_hi16(lo);
  return _mm512_cmp_ps_mask(_mm512_add_ps(h0, l0), f0, _CMP_NEQ_UQ) |
         _mm512_cmp_ps_mask(_mm512_add_ps(h1, l1), f1, _CMP_NEQ_UQ);
}

// f0, f1 as 32 bf16 in order, hi + mid + lo: exact for normal fp32 values (each remainder is
// exact in fp32 and has at most 16, then 8 significant bits).
inline void split3(__m512 f0, __m512 f1, __m512i& hi, __m512i& mid, __m512i& lo) {
  hi = __m512i(_mm512_cvtne2ps_pbh(f1, f0));
  __m512 r0 = _mm512_sub_ps(f0, bf16_lo16(hi)), r1 = _mm512_sub_ps(f1, bf16_hi16(hi));
  mid = __m512i(_mm512_cvtne2ps_pbh(r1, r0));
  r0 = _mm512_sub_ps(r0, bf16_lo16(mid));
  r1 = _mm512_sub_ps(r1, bf16_hi16(mid));
  lo = __m512i(_mm512_cvtne2ps_pbh(r1, r0));
}

}  // namespace
}  // namespace latprof::cpu::detail
