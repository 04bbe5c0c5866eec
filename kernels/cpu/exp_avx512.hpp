#pragma once
// exp over 16 floats with AVX-512F, for the files compiled with AVX-512 flags (*_avx512.cpp):
// the attention's softmax and SwiGLU.
#include <immintrin.h>

namespace latprof::cpu::detail {

// exp(x): range reduction x = n ln2 + r, |r| <= ln2/2, degree-6 Taylor polynomial (relative
// error ~2e-7), 2^n applied with vscalefps. NaN propagates; below -87.3 the result is ~1e-38.
inline __m512 exp512(__m512 x) {
  x = _mm512_max_ps(_mm512_set1_ps(-87.3f), x);  // max(c, NaN) = NaN: keeps NaN visible
  x = _mm512_min_ps(_mm512_set1_ps(88.3f), x);
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.0f / 720);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  return _mm512_scalef_ps(p, n);
}

}  // namespace latprof::cpu::detail
