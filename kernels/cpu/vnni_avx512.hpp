#pragma once
// AVX512-VNNI helpers for the *_avx512.cpp files (compiled with -mavx512vnni).
#include <immintrin.h>

namespace latprof::cpu::detail {

// acc + u · w (vpdpbusd: 64 unsigned x signed byte products summed in fours into 16 int32 lanes),
// as inline assembly. With the intrinsic, GCC 12 copied each accumulator of a loop to another
// register and back around every vpdpbusd and spilled some to the stack: the W8A8 GEMV at 8
// activation rows and the INT8 peak probe ran at about half the instruction's throughput.
inline __m512i dpbusd(__m512i acc, __m512i u, __m512i w) {
  asm("vpdpbusd %[w], %[u], %[acc]" : [acc] "+v"(acc) : [u] "v"(u), [w] "v"(w));
  return acc;
}

}  // namespace latprof::cpu::detail
