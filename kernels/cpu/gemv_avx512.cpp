// AVX-512 GEMV: R output rows x M activation rows per pass, 16 weights per vector step
// (fp16 via vcvtph2ps, int8 via vpmovsxbd + vcvtdq2ps), fp32 FMA into R*M*U independent
// accumulators, the int8 row scale applied once at the end. Weight rows are read sequentially,
// each byte once; the activation vector is reused from L1 across the R rows.
#include <immintrin.h>

// GCC 12 reports _mm512_undefined_*() inside the intrinsics headers as uninitialised (a known
// false positive once the intrinsics are inlined).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include "kernels/cpu/internal.hpp"

namespace latprof::cpu::detail {
namespace {

constexpr int kPrefetchBytes = 1024;

inline __m512 load_w(const uint16_t* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}
inline __m512 load_w(const int8_t* p) {
  return _mm512_cvtepi32_ps(
      _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
}
inline __m512 load_w(const uint16_t* p, __mmask16 k) {
  return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(k, p));
}
inline __m512 load_w(const int8_t* p, __mmask16 k) {
  return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_maskz_loadu_epi8(k, p)));
}

template <class T, int R>
[[gnu::always_inline]] inline void prefetch_ahead(const T* wr, int64_t n, int i, int64_t k) {
  prefetch_row_stream<R>(wr, n, i, k, kPrefetchBytes / int64_t(sizeof(T)));
}

inline __m512 load_x(const float* p) {
  return _mm512_loadu_ps(p);
}
inline __m512 load_x(const float* p, __mmask16 k) {
  return _mm512_maskz_loadu_ps(k, p);
}
inline __m512 load_x(const uint16_t* p) {
  return load_w(p);
}
inline __m512 load_x(const uint16_t* p, __mmask16 k) {
  return load_w(p, k);
}

// Rows [r, r + R) of W (element type T), M activation rows (X: fp32, or fp16 for FP16 weights),
// U-way unrolled over k.
template <class T, int M, int R, int U, class X = float>
void block(const T* w, const X* x, int64_t n, float* y, int64_t ldy, int64_t r,
           const float* scales) {
  __m512 acc[U][R][M];
  for (int u = 0; u < U; ++u)
    for (int i = 0; i < R; ++i)
      for (int j = 0; j < M; ++j) acc[u][i][j] = _mm512_setzero_ps();
  const T* wr = w + r * n;
  int64_t k = 0;
  for (; k + 16 * U <= n; k += 16 * U) {
    // fp16: a software prefetch into L2 8 KB ahead in every row stream, one per 64-byte line
    // (the hardware prefetcher alone reached ~75% of the read bandwidth with R interleaved
    // streams on Zen 5). 1 KB ahead into L1, as before, left the 2-row product on AMD Zen 4 at
    // 0.52-0.55 of the one-row stream's bytes per second; 8 KB into L2, with the block's other
    // changes (gemv_rows_f16_x16), 0.93-0.99 (reports/cpu-kernels.md). int8 is left to the
    // hardware prefetcher: its inner loop is nearly port bound and the extra prefetches cost more
    // than they gained (80% -> 71% measured).
    if constexpr (sizeof(T) == 2)
      if (U == 2 || (k & 31) == 0)
        for (int i = 0; i < R; ++i)
          prefetch_row_stream<R, 2>(wr, n, i, k, kLinearPrefetchBytes / 2);
#pragma GCC unroll 4
    for (int u = 0; u < U; ++u) {
      __m512 xv[M];
#pragma GCC unroll 8
      for (int j = 0; j < M; ++j) xv[j] = load_x(x + j * n + k + 16 * u);
      for (int i = 0; i < R; ++i) {
        const __m512 wv = load_w(wr + i * n + k + 16 * u);
        for (int j = 0; j < M; ++j) acc[u][i][j] = _mm512_fmadd_ps(wv, xv[j], acc[u][i][j]);
      }
    }
  }
  for (; k < n; k += 16) {  // remainder, the last step masked
    const __mmask16 mask = n - k >= 16 ? __mmask16(0xffff) : __mmask16((1u << (n - k)) - 1);
    __m512 xv[M];
    for (int j = 0; j < M; ++j) xv[j] = load_x(x + j * n + k, mask);
    for (int i = 0; i < R; ++i) {
      const __m512 wv = load_w(wr + i * n + k, mask);
      for (int j = 0; j < M; ++j) acc[0][i][j] = _mm512_fmadd_ps(wv, xv[j], acc[0][i][j]);
    }
  }
  for (int i = 0; i < R; ++i) {
    const float s = scales ? scales[r + i] : 1.0f;
    for (int j = 0; j < M; ++j) {
      __m512 a = acc[0][i][j];
      for (int u = 1; u < U; ++u) a = _mm512_add_ps(a, acc[u][i][j]);
      y[j * ldy + r + i] = _mm512_reduce_add_ps(a) * s;
    }
  }
}

// Many activation rows (M >= 5): the R weight vectors of a step stay in registers and each
// activation vector is loaded once and used for all R rows, so R*M accumulators + R weights + one
// activation fit the 32 zmm registers at R = 3, M = 8 (the form above holds all M activations
// and R weights, which caps R at 2 there). Fewer activation loads per FMA: 8 + 3 loads for 24
// FMAs instead of 8 + 2 for 16.
template <class T, int M, int R>
void block_many(const T* w, const float* x, int64_t n, float* y, int64_t ldy, int64_t r,
                const float* scales) {
  __m512 acc[R][M];
  for (int i = 0; i < R; ++i)
    for (int j = 0; j < M; ++j) acc[i][j] = _mm512_setzero_ps();
  const T* wr = w + r * n;
  int64_t k = 0;
  for (; k + 16 <= n; k += 16) {
    if constexpr (sizeof(T) == 2)
      if ((k & 31) == 0)  // one prefetch per 64-byte line of each row stream
        for (int i = 0; i < R; ++i) prefetch_ahead<T, R>(wr, n, i, k);
    __m512 wv[R];
    for (int i = 0; i < R; ++i) wv[i] = load_w(wr + i * n + k);
    for (int j = 0; j < M; ++j) {
      __m512 xv = _mm512_loadu_ps(x + j * n + k);
      // Keep the activation in a register: GCC otherwise folds the load into each of the R
      // FMAs (27 loads per 24 FMAs instead of 11), and the kernel ran 1.45-1.6x slower.
      asm("" : "+v"(xv));
      for (int i = 0; i < R; ++i) acc[i][j] = _mm512_fmadd_ps(wv[i], xv, acc[i][j]);
    }
  }
  if (k < n) {  // the last step, masked
    const __mmask16 mask = __mmask16((1u << (n - k)) - 1);
    __m512 wv[R];
    for (int i = 0; i < R; ++i) wv[i] = load_w(wr + i * n + k, mask);
    for (int j = 0; j < M; ++j) {
      const __m512 xv = _mm512_maskz_loadu_ps(mask, x + j * n + k);
      for (int i = 0; i < R; ++i) acc[i][j] = _mm512_fmadd_ps(wv[i], xv, acc[i][j]);
    }
  }
  for (int i = 0; i < R; ++i) {
    const float s = scales ? scales[r + i] : 1.0f;
    for (int j = 0; j < M; ++j) y[j * ldy + r + i] = _mm512_reduce_add_ps(acc[i][j]) * s;
  }
}

// One activation row, fp16 weights: one row at a time, so a thread's rows [r0, r1) are one linear
// stream (rows are contiguous), prefetched kLinearPrefetchBytes ahead. Four accumulators (64
// weights per step) hide the FMA latency; compute is far from the limit at m = 1. (The blocked
// form below, R = 4 rows at once for one shared activation load, reads R streams 2n bytes apart:
// in one process, a tinyllama decode step's weights went from 85% to 98% of the read bandwidth
// with this and the guided schedule of gemv.cpp; reports/cpu-kernels.md.) The activations X are
// fp32, or fp16 (gemv_rows_f16_x16: half the bytes the loop reads again for every row).
template <class X>
void row_stream(const uint16_t* w, const X* x, int64_t n, float* y, int64_t r0, int64_t r1) {
  const uint16_t* end = w + r1 * n;  // no prefetch past the thread's share
  for (int64_t r = r0; r < r1; ++r) {
    const uint16_t* wr = w + r * n;
    __m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(),
                     _mm512_setzero_ps()};
    int64_t k = 0;
    for (; k + 64 <= n; k += 64) {
      const uint16_t* pf = wr + k + kLinearPrefetchBytes / 2;
      if (pf < end) {
        prefetch_linear(pf);
        prefetch_linear(pf + 32);
      }
#pragma GCC unroll 4
      for (int u = 0; u < 4; ++u)
        acc[u] = _mm512_fmadd_ps(load_w(wr + k + 16 * u), load_x(x + k + 16 * u), acc[u]);
    }
    for (; k < n; k += 16) {
      const __mmask16 mask = n - k >= 16 ? __mmask16(0xffff) : __mmask16((1u << (n - k)) - 1);
      acc[0] = _mm512_fmadd_ps(load_w(wr + k, mask), load_x(x + k, mask), acc[0]);
    }
    y[r] = _mm512_reduce_add_ps(
        _mm512_add_ps(_mm512_add_ps(acc[0], acc[1]), _mm512_add_ps(acc[2], acc[3])));
  }
}

template <class T, int M>
void rows(const Weight& w, const float* x, float* y, int64_t r0, int64_t r1) {
  if constexpr (M == 1 && sizeof(T) == 2)
    return row_stream(static_cast<const uint16_t*>(w.data), x, w.n_in, y, r0, r1);
  // Accumulator budget ~16 zmm: R rows share each activation load, U hides FMA latency at small M.
  constexpr int R = M <= 4 ? 4 : 2;
  constexpr int U = M <= 2 ? 2 : 1;
  const T* wd = static_cast<const T*>(w.data);
  const float* sc = int8_storage(w.type) ? w.scales : nullptr;
  int64_t r = r0;
  if constexpr (M >= 5) {
    constexpr int R3 = 3;
    for (; r + R3 <= r1; r += R3) block_many<T, M, R3>(wd, x, w.n_in, y, w.n_out, r, sc);
  }
  for (; r + R <= r1; r += R) block<T, M, R, U>(wd, x, w.n_in, y, w.n_out, r, sc);
  for (; r < r1; ++r) block<T, M, 1, U>(wd, x, w.n_in, y, w.n_out, r, sc);
}

template <class T>
void rows_t(const Weight& w, const float* x, int64_t m, float* y, int64_t r0, int64_t r1) {
  with_rows(m, [&](auto M) { rows<T, decltype(M)::value>(w, x, y, r0, r1); });
}

}  // namespace

void gemv_rows_f16_x16(const Weight& w, const uint16_t* xh, int64_t m, float* y, int64_t r0,
                       int64_t r1) {
  const uint16_t* wd = static_cast<const uint16_t*>(w.data);
  if (m == 1) return row_stream(wd, xh, w.n_in, y, r0, r1);
  // R rows share each activation load, so the activations (fp16: 2 x 4,096 columns in 16 KB)
  // are converted once per R rows; R * M accumulators (times U) and M activations in registers.
  // On AMD Zen 4 (one process, old and new alternating) 2 rows at R = 2 ran 1.13-1.78x the fp32
  // blocks at R = 4 (53-55 GB/s of a ~58 GB/s read), 3-7 rows 1.02-1.40x; at 8 rows the fp32
  // block_many stayed ahead (0.90-1.10x), and takes them (gemv.cpp).
  with_rows(m, [&](auto Mc) {
    constexpr int M = decltype(Mc)::value;
    constexpr int R = M == 2 ? 2 : M <= 6 ? 4 : 3;
    constexpr int U = R * M <= 8 ? 2 : 1;
    int64_t r = r0;
    for (; r + R <= r1; r += R) block<uint16_t, M, R, U>(wd, xh, w.n_in, y, w.n_out, r, nullptr);
    for (; r < r1; ++r) block<uint16_t, M, 1, 2>(wd, xh, w.n_in, y, w.n_out, r, nullptr);
  });
}

void gemv_rows_avx512(const Weight& w, const float* x, int64_t m, float* y, int64_t r0,
                      int64_t r1) {
  if (w.type == WType::f16)
    rows_t<uint16_t>(w, x, m, y, r0, r1);
  else
    rows_t<int8_t>(w, x, m, y, r0, r1);
}

}  // namespace latprof::cpu::detail
