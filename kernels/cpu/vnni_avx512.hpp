#pragma once
// AVX512-VNNI helpers for the *_avx512.cpp files (compiled with -mavx512vnni).
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace latprof::cpu::detail {

// acc + u · w (vpdpbusd: 64 unsigned x signed byte products summed in fours into 16 int32 lanes),
// as inline assembly. With the intrinsic, GCC 12 copied each accumulator of a loop to another
// register and back around every vpdpbusd and spilled some to the stack: the W8A8 GEMV at 8
// activation rows and the INT8 peak probe ran at about half the instruction's throughput.
inline __m512i dpbusd(__m512i acc, __m512i u, __m512i w) {
  asm("vpdpbusd %[w], %[u], %[acc]" : [acc] "+v"(acc) : [u] "v"(u), [w] "v"(w));
  return acc;
}

// acc + a · b (vpdpwssd: 32 signed x signed int16 products summed in pairs into 16 int32 lanes),
// as inline assembly for the same reason: the intrinsic made GCC 12 copy every accumulator to
// another register after each vpdpwssd of the W8A16 GEMV's loops.
inline __m512i dpwssd(__m512i acc, __m512i a, __m512i b) {
  asm("vpdpwssd %[b], %[a], %[acc]" : [acc] "+v"(acc) : [a] "v"(a), [b] "v"(b));
  return acc;
}

// max |x[k]| over a row of n floats: the activation quantisers' scale.
inline float row_max_abs(const float* x, int64_t n) {
  const __m512 sign = _mm512_set1_ps(-0.0f);
  __m512 vmax = _mm512_setzero_ps();
  int64_t k = 0;
  for (; k + 16 <= n; k += 16)
    vmax = _mm512_max_ps(vmax, _mm512_andnot_ps(sign, _mm512_loadu_ps(x + k)));
  float mx = _mm512_reduce_max_ps(vmax);
  for (; k < n; ++k) mx = std::max(mx, std::fabs(x[k]));
  return mx;
}

}  // namespace latprof::cpu::detail
