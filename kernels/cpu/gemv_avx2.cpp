// AVX2 GEMV: the same scheme as gemv_avx512.cpp with 8-wide vectors (fp16 via F16C vcvtph2ps,
// int8 via vpmovsxbd + vcvtdq2ps); the last n_in % 8 weights of a row are done in scalar.
#include <immintrin.h>

#include "core/half.hpp"
#include "kernels/cpu/internal.hpp"

namespace latprof::cpu::detail {
namespace {

inline __m256 load_w(const uint16_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
inline __m256 load_w(const int8_t* p) {
  return _mm256_cvtepi32_ps(
      _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
}
inline float to_f(uint16_t v) {
  return half_to_float(v);
}
inline float to_f(int8_t v) {
  return float(v);
}

inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

template <class T, int M, int R, int U>
void block(const T* w, const float* x, int64_t n, float* y, int64_t ldy, int64_t r,
           const float* scales) {
  __m256 acc[U][R][M];
  for (int u = 0; u < U; ++u)
    for (int i = 0; i < R; ++i)
      for (int j = 0; j < M; ++j) acc[u][i][j] = _mm256_setzero_ps();
  const T* wr = w + r * n;
  int64_t k = 0;
  for (; k + 8 * U <= n; k += 8 * U) {
#pragma GCC unroll 4
    for (int u = 0; u < U; ++u) {
      __m256 xv[M];
      for (int j = 0; j < M; ++j) xv[j] = _mm256_loadu_ps(x + j * n + k + 8 * u);
      for (int i = 0; i < R; ++i) {
        const __m256 wv = load_w(wr + i * n + k + 8 * u);
        for (int j = 0; j < M; ++j) acc[u][i][j] = _mm256_fmadd_ps(wv, xv[j], acc[u][i][j]);
      }
    }
  }
  for (; k + 8 <= n; k += 8) {
    __m256 xv[M];
    for (int j = 0; j < M; ++j) xv[j] = _mm256_loadu_ps(x + j * n + k);
    for (int i = 0; i < R; ++i) {
      const __m256 wv = load_w(wr + i * n + k);
      for (int j = 0; j < M; ++j) acc[0][i][j] = _mm256_fmadd_ps(wv, xv[j], acc[0][i][j]);
    }
  }
  for (int i = 0; i < R; ++i) {
    const float s = scales ? scales[r + i] : 1.0f;
    for (int j = 0; j < M; ++j) {
      __m256 a = acc[0][i][j];
      for (int u = 1; u < U; ++u) a = _mm256_add_ps(a, acc[u][i][j]);
      float sum = hsum(a);
      for (int64_t kk = k; kk < n; ++kk) sum += to_f(wr[i * n + kk]) * x[j * n + kk];
      y[j * ldy + r + i] = sum * s;
    }
  }
}

template <class T, int M>
void rows(const Weight& w, const float* x, float* y, int64_t r0, int64_t r1) {
  // 16 ymm: accumulators <= 8-10, M activation vectors, one weight vector.
  constexpr int R = M <= 2 ? 4 : 2;
  constexpr int U = M == 1 ? 2 : 1;
  const T* wd = static_cast<const T*>(w.data);
  const float* sc = int8_storage(w.type) ? w.scales : nullptr;
  int64_t r = r0;
  if constexpr (M <= 4) {
    for (; r + R <= r1; r += R) block<T, M, R, U>(wd, x, w.n_in, y, w.n_out, r, sc);
  }
  for (; r < r1; ++r) block<T, M, 1, U>(wd, x, w.n_in, y, w.n_out, r, sc);
}

template <class T>
void rows_t(const Weight& w, const float* x, int64_t m, float* y, int64_t r0, int64_t r1) {
  with_rows(m, [&](auto M) { rows<T, decltype(M)::value>(w, x, y, r0, r1); });
}

}  // namespace

void gemv_rows_avx2(const Weight& w, const float* x, int64_t m, float* y, int64_t r0, int64_t r1) {
  if (w.type == WType::f16)
    rows_t<uint16_t>(w, x, m, y, r0, r1);
  else
    rows_t<int8_t>(w, x, m, y, r0, r1);
}

}  // namespace latprof::cpu::detail
