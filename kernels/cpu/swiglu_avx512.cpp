// AVX-512 SwiGLU: out = g / (1 + exp(-g)) * up, 16 lanes at a time with the vector exp of
// exp_avx512.hpp (the scalar path calls expf per element: ~17 us per tinyllama decode layer,
// 0.3 s of a 500-token llama-2-7b prefill).
#include <immintrin.h>

#include "kernels/cpu/exp_avx512.hpp"
#include "kernels/cpu/internal.hpp"

// GCC 12 reports _mm512_undefined_*() inside the intrinsics headers as uninitialised (a known
// false positive once the intrinsics are inlined).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace latprof::cpu::detail {

void swiglu_avx512(const float* gate, const float* up, int64_t n, float* out) {
  const __m512 one = _mm512_set1_ps(1.0f);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 k = n - i >= 16 ? __mmask16(0xffff) : __mmask16((1u << (n - i)) - 1);
    const __m512 g = _mm512_maskz_loadu_ps(k, gate + i);
    const __m512 e = exp512(_mm512_sub_ps(_mm512_setzero_ps(), g));
    const __m512 y =
        _mm512_mul_ps(_mm512_div_ps(g, _mm512_add_ps(one, e)), _mm512_maskz_loadu_ps(k, up + i));
    _mm512_mask_storeu_ps(out + i, k, y);
  }
}

}  // namespace latprof::cpu::detail
