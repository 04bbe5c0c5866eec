// W8A8 GEMV with AVX512-VNNI: y[m, n_out] = x[m, n_in] · Wᵀ with int8 weights (one fp32 scale per
// output row) and each activation row rounded to int8 (one fp32 scale per row, max|x| / 127).
//
// Why: the W8A16 path (gemv_vnni_avx512.cpp) spends, per 64 weights and activation row, two
// vpdpwssd and, per 64 weights, two sign extensions: from 6 activation rows up the multiply-adds,
// not the memory, bound it (8 rows at ~55% of the read bandwidth). vpdpbusd multiplies 64 unsigned
// by 64 signed bytes into 16 int32 lanes: one instruction per 64 weights and row, and the weights
// are used as loaded.
//
// vpdpbusd takes one unsigned operand, so activations are stored as u = q + 128 (q in [-127,
// 127]) and Σ q·w = Σ u·w − 128·Σ w: the correction is one more vpdpbusd per weight vector (128s
// times the weights), shared by all activation rows. Every product is exact: the int32 lanes are
// reduced into int64 sums every kFlushSteps steps (a lane gains at most 4 · 255 · 127 per step),
// so the dot product of the quantised values is exact and only the final scaling rounds.
#include <immintrin.h>

#include <algorithm>
#include <cmath>

#include "kernels/cpu/internal.hpp"
#include "kernels/cpu/vnni_avx512.hpp"

// GCC 12's own intrinsics headers (_mm512_undefined_epi32 inside _mm512_reduce_add_epi32) trip
// -Wmaybe-uninitialized when inlined here; a known false positive of the compiler's headers.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace latprof::cpu::detail {

namespace {

// 1,024 steps of 64 weights: a lane holds at most 1,024 · 4 · 255 · 127 ≈ 1.3e8 (< 2^31), and
// the reduced difference at most 1,024 · 64 · 127 · 127 ≈ 1.1e9.
constexpr int64_t kFlushSteps = 1024;
// How far ahead the R row streams of a block are prefetched, in bytes over all R (each stream
// kBlockPrefetchBytes / R ahead). Measured from DRAM on AMD Zen 5, a tinyllama decode step's
// weights, total 2,048 / 4,096 / 6,144 / 8,192: 8 rows (R = 2) 49 / 57 / 55 / 60% of the read,
// 6 rows (R = 3) 52 / 62 / 73 / 68%, 4 rows (R = 4) 65 / 77 / 78 / 66%.
constexpr int64_t kBlockPrefetchBytes = 6144;
// The linear stream (row_stream) prefetches 4 KB ahead into L1 (prefetcht0), not as the FP16 and
// W8A16 streams do (kLinearPrefetchBytes into L2): its activations are one byte per element
// (2-5.5 KB a row at tinyllama's widths) and hardly contest the L1, and on Zen 4 the L2 hint
// measured 0.85-1.57x in kernel A/B runs whose noise was +-12%: no clear result, not changed
// (reports/cpu-kernels.md).
constexpr int64_t kStreamPrefetchBytes = 4096;

inline __m512i load_w(const int8_t* p) {
  return _mm512_loadu_si512(p);
}
inline __m512i load_w(const int8_t* p, __mmask64 k) {
  return _mm512_maskz_loadu_epi8(k, p);
}

inline int64_t reduce_diff(__m512i acc, __m512i cor) {
  // At most 1.1e9 in magnitude (above): int32 holds it.
  return _mm512_reduce_add_epi32(_mm512_sub_epi32(acc, cor));
}

// Rows [r, r + R) of W against M activation rows of xu (u8, row stride ldx >= n rounded up to 64,
// padded with 128): the R weight vectors of a step stay in registers, each activation vector is
// loaded once for the R rows; R * M + R int32 accumulators (the R corrections).
template <int M, int R, bool Rows4>
void block(const Weight& w, const uint8_t* xu, int64_t ldx, const float* xs, float* y, int64_t r) {
  const int64_t n = w.n_in, ldy = w.n_out;
  int64_t tot[R][M] = {};
  const __m512i off = _mm512_set1_epi8(char(0x80));  // 128 as an unsigned byte
  const I8Rows<R, Rows4> wr(w, r);
  const int64_t full = n / 64;
  // Rounds of at most kFlushSteps steps; the last round takes the partial step (masked weights).
  for (int64_t step = 0; step < full || (step == full && full * 64 < n);) {
    __m512i acc[R][M], cor[R];
#pragma GCC unroll 16
    for (int i = 0; i < R; ++i) {
      cor[i] = _mm512_setzero_si512();
#pragma GCC unroll 16
      for (int j = 0; j < M; ++j) acc[i][j] = _mm512_setzero_si512();
    }
    // One step: the corrections and the R x M products of the R weight vectors at k.
    auto mac = [&](const __m512i* wv, int64_t k) {
#pragma GCC unroll 16
      for (int i = 0; i < R; ++i) cor[i] = dpbusd(cor[i], off, wv[i]);
#pragma GCC unroll 16
      for (int j = 0; j < M; ++j) {
        const __m512i xv = _mm512_load_si512(xu + j * ldx + k);
#pragma GCC unroll 16
        for (int i = 0; i < R; ++i) acc[i][j] = dpbusd(acc[i][j], xv, wv[i]);
      }
    };
    const int64_t end = std::min(full, step + kFlushSteps);
    for (; step < end; ++step) {
      const int64_t k = step * 64;
      wr.template prefetch<M>(k, kBlockPrefetchBytes / R);
      __m512i wv[R];
#pragma GCC unroll 16
      for (int i = 0; i < R; ++i) wv[i] = load_w(wr.at(i, k));
      mac(wv, k);
    }
    if (step == full && full * 64 < n) {
      const int64_t k = full * 64;
      const __mmask64 mask = (uint64_t(1) << (n - k)) - 1;
      __m512i wv[R];
#pragma GCC unroll 16
      for (int i = 0; i < R; ++i) wv[i] = load_w(wr.at(i, k), mask);
      mac(wv, k);
      ++step;
    }
#pragma GCC unroll 16
    for (int i = 0; i < R; ++i)
#pragma GCC unroll 16
      for (int j = 0; j < M; ++j) tot[i][j] += reduce_diff(acc[i][j], cor[i]);
  }
#pragma GCC unroll 16
  for (int i = 0; i < R; ++i)
#pragma GCC unroll 16
    for (int j = 0; j < M; ++j) y[j * ldy + r + i] = float(tot[i][j]) * w.scales[r + i] * xs[j];
}

// M activation rows, one weight row at a time, so a thread's rows [r0, r1) are one linear stream,
// prefetched kStreamPrefetchBytes ahead into L1; U steps of 64 weights (U lines) per iteration,
// each with its own chains. Activation vectors are loaded again for every row (from L1).
template <int M, int U>
void row_stream(const int8_t* w, int64_t n, const uint8_t* xu, int64_t ldx, const float* xs,
                const float* ws, float* y, int64_t ldy, int64_t r0, int64_t r1) {
  const int8_t* end = w + r1 * n;  // no prefetch past the thread's share
  const __m512i off = _mm512_set1_epi8(char(0x80));
  constexpr int64_t kStep = 64 * U;
  for (int64_t r = r0; r < r1; ++r) {
    const int8_t* wr = w + r * n;
    int64_t tot[M] = {};
    __m512i acc[U][M], cor[U];
    auto zero = [&] {
#pragma GCC unroll 16
      for (int u = 0; u < U; ++u) {
        cor[u] = _mm512_setzero_si512();
#pragma GCC unroll 16
        for (int j = 0; j < M; ++j) acc[u][j] = _mm512_setzero_si512();
      }
    };
    auto flush = [&] {
#pragma GCC unroll 16
      for (int j = 0; j < M; ++j) {
        __m512i a = acc[0][j], c = cor[0];
#pragma GCC unroll 16
        for (int u = 1; u < U; ++u) {
          a = _mm512_add_epi32(a, acc[u][j]);
          c = _mm512_add_epi32(c, cor[u]);
        }
        tot[j] += reduce_diff(a, c);
      }
    };
    zero();
    int64_t k = 0;
    while (k + kStep <= n) {
      // kFlushSteps / U iterations of U steps: no lane exceeds kFlushSteps steps' sums.
      const int64_t stop = std::min(n / kStep * kStep, k + 64 * kFlushSteps);
      for (; k < stop; k += kStep) {
#pragma GCC unroll 16
        for (int u = 0; u < U; ++u)
          if (const int8_t* pf = wr + k + 64 * u + kStreamPrefetchBytes; pf < end)
            __builtin_prefetch(pf, 0, 3);
#pragma GCC unroll 16
        for (int u = 0; u < U; ++u) {
          const __m512i wv = load_w(wr + k + 64 * u);
          cor[u] = dpbusd(cor[u], off, wv);
#pragma GCC unroll 16
          for (int j = 0; j < M; ++j)
            acc[u][j] = dpbusd(acc[u][j], _mm512_load_si512(xu + j * ldx + k + 64 * u), wv);
        }
      }
      flush();
      zero();
    }
    for (; k < n; k += 64) {  // the rest, 64 weights a step, the last one masked
      const __mmask64 mask = n - k >= 64 ? ~__mmask64(0) : (uint64_t(1) << (n - k)) - 1;
      const __m512i wv = load_w(wr + k, mask);
      cor[0] = dpbusd(cor[0], off, wv);
#pragma GCC unroll 16
      for (int j = 0; j < M; ++j)
        acc[0][j] = dpbusd(acc[0][j], _mm512_load_si512(xu + j * ldx + k), wv);
    }
    flush();
#pragma GCC unroll 16
    for (int j = 0; j < M; ++j) y[j * ldy + r] = float(tot[j]) * ws[r] * xs[j];
  }
}

template <int M>
void rows(const Weight& w, const uint8_t* xu, int64_t ldx, const float* xs, float* y, int64_t r0,
          int64_t r1) {
  // R * M + R accumulators, R weights, the activation and the 128s: <= 30 registers.
  constexpr int R = M <= 5 ? 4 : M == 6 ? 3 : 2;
  if (w.rows4) {
    // Rows interleaved in fours (kernels.hpp): 4-row blocks from each group's first row, one
    // linear stream.
    int64_t r = r0;
    for (; r + R <= r1; r += R) block<M, R, true>(w, xu, ldx, xs, y, r);
    for (; r < r1; ++r) block<M, 1, true>(w, xu, ldx, xs, y, r);
    return;
  }
  // Up to 4 activation rows, while they stay in L1 (internal.hpp, kLinearActivationBytes): one
  // linear stream (on AMD Zen 4, 2 threads, from DRAM, the 2,048-wide gate projection ran 2.1x
  // faster at 2 rows and 1.45x at 4 than the R-row blocks; at 6 and 8 rows, where the
  // multiply-adds bound both, the blocks, loading each activation once per R rows, were as fast
  // or faster: reports/cpu-kernels.md).
  if (M == 1 || (M <= 4 && M * w.n_in <= kLinearActivationBytes)) {
    constexpr int U = M <= 2 ? 2 : 1;
    return row_stream<M, U>(static_cast<const int8_t*>(w.data), w.n_in, xu, ldx, xs, w.scales, y,
                            w.n_out, r0, r1);
  }
  int64_t r = r0;
  for (; r + R <= r1; r += R) block<M, R, false>(w, xu, ldx, xs, y, r);
  for (; r < r1; ++r) block<M, 1, false>(w, xu, ldx, xs, y, r);
}

}  // namespace

void quantize_activations_u8(const float* x, int64_t m, int64_t n, int64_t ldx, uint8_t* xu,
                             float* xs) {
  for (int64_t j = 0; j < m; ++j) {
    const float* xj = x + j * n;
    const float mx = row_max_abs(xj, n);
    int64_t k = 0;
    const float s = i8_activation_scale(mx);
    const float inv = 1.0f / s;
    uint8_t* u = xu + j * ldx;
    const __m512 vinv = _mm512_set1_ps(inv);
    const __m512 lim = _mm512_set1_ps(127.0f);
    const __m512i bias = _mm512_set1_epi32(128);
    for (k = 0; k + 16 <= n; k += 16) {
      // as round_i8: round to nearest even, clamp to [-127, 127]; then + 128, narrowed
      __m512 v = _mm512_mul_ps(_mm512_loadu_ps(xj + k), vinv);
      v = _mm512_min_ps(_mm512_max_ps(v, _mm512_sub_ps(_mm512_setzero_ps(), lim)), lim);
      const __m512i q = _mm512_cvt_roundps_epi32(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(u + k),
                       _mm512_cvtepi32_epi8(_mm512_add_epi32(q, bias)));
    }
    for (; k < n; ++k) u[k] = uint8_t(round_i8(xj[k], inv) + 128);
    for (k = n; k < ldx; ++k) u[k] = 128;
    xs[j] = s;
  }
}

void gemv_rows_w8a8_vnni(const Weight& w, const uint8_t* xu, int64_t ldx, const float* xs,
                         int64_t m, float* y, int64_t r0, int64_t r1) {
  for_panels(w, m, y, r0, r1, [&](const Weight& v, int64_t p0, float* yv) {
    with_rows(m, [&](auto M) { rows<decltype(M)::value>(v, xu + p0, ldx, xs, yv, r0, r1); });
  });
}

}  // namespace latprof::cpu::detail
