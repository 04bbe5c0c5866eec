// The AVX512-BF16 inner loop of the machine probes (see probe.cpp): the only probe file compiled
// with -mavx512bf16 (CMakeLists.txt), called only where the CPU has it.
#include <immintrin.h>

#include "kernels/cpu/internal.hpp"

#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace latprof::cpu::detail {

double dpbf16_chains_avx512(int64_t iters) {
  // vdpbf16ps zmm: 32 bf16 multiply-adds into 16 fp32 lanes = 64 FLOP per instruction; 24
  // independent chains, as the FMA probe.
  __m512 a[24];
  for (int j = 0; j < 24; ++j) a[j] = _mm512_set1_ps(0.5f + 0.01f * float(j));
  __m512i bi = _mm512_set1_epi16(0x3f80), ci = _mm512_set1_epi16(0x3380);  // 1.0, ~6e-8
  const __m512bh b = reinterpret_cast<__m512bh&>(bi), c = reinterpret_cast<__m512bh&>(ci);
  for (int64_t i = 0; i < iters; ++i) {
#pragma GCC unroll 24
    for (int j = 0; j < 24; ++j) a[j] = _mm512_dpbf16_ps(a[j], b, c);
  }
  for (int j = 1; j < 24; ++j) a[0] = _mm512_add_ps(a[0], a[j]);
  return double(_mm512_reduce_add_ps(a[0]));
}

}  // namespace latprof::cpu::detail
