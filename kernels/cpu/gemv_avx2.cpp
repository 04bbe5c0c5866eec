// AVX2 GEMV: the same scheme as gemv_avx512.cpp with 8-wide vectors (fp16 via F16C vcvtph2ps,
// int8 via vpmovsxbd + vcvtdq2ps: W8A8's rounded activations; INT8 weights otherwise take the
// W8A16 kernel below); the last n_in % 8 weights of a row are done in scalar.
#include <immintrin.h>

#include <algorithm>
#include <cmath>

#include "core/half.hpp"
#include "kernels/cpu/internal.hpp"
#include "kernels/cpu/math_avx2.hpp"

namespace latprof::cpu::detail {
namespace {

inline float to_f(uint16_t v) {
  return half_to_float(v);
}
inline float to_f(int8_t v) {
  return float(v);
}

// y[j * ldy + r + i rs] = scale * sum_k w[r + i rs][k] x[j][k], i < R, j < M: R rows rs apart, U
// steps of 8 weights in flight.
template <class T, int M, int R, int U>
void block(const T* w, const float* x, int64_t n, float* y, int64_t ldy, int64_t r,
           const float* scales, int64_t rs = 1) {
  const int64_t ld = rs * n;
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
        const __m256 wv = load8(wr + i * ld + k + 8 * u);
        for (int j = 0; j < M; ++j) acc[u][i][j] = _mm256_fmadd_ps(wv, xv[j], acc[u][i][j]);
      }
    }
  }
  for (; k + 8 <= n; k += 8) {
    __m256 xv[M];
    for (int j = 0; j < M; ++j) xv[j] = _mm256_loadu_ps(x + j * n + k);
    for (int i = 0; i < R; ++i) {
      const __m256 wv = load8(wr + i * ld + k);
      for (int j = 0; j < M; ++j) acc[0][i][j] = _mm256_fmadd_ps(wv, xv[j], acc[0][i][j]);
    }
  }
  for (int i = 0; i < R; ++i) {
    const float s = scales ? scales[r + i * rs] : 1.0f;
    for (int j = 0; j < M; ++j) {
      __m256 a = acc[0][i][j];
      for (int u = 1; u < U; ++u) a = _mm256_add_ps(a, acc[u][i][j]);
      float sum = hsum(a);
      for (int64_t kk = k; kk < n; ++kk) sum += to_f(wr[i * ld + kk]) * x[j * n + kk];
      y[j * ldy + r + i * rs] = sum * s;
    }
  }
}

template <class T, int M>
void rows(const Weight& w, const float* x, float* y, int64_t r0, int64_t r1) {
  // 16 ymm: accumulators <= 8-10, M activation vectors, one weight vector.
  const T* wd = static_cast<const T*>(w.data);
  const float* sc = int8_storage(w.type) ? w.scales : nullptr;
  int64_t r = r0;
  if constexpr (M == 1) {  // 4 adjacent rows a block, 2 steps in flight
    for (; r + 4 <= r1; r += 4) block<T, 1, 4, 2>(wd, x, w.n_in, y, w.n_out, r, sc);
  } else if constexpr (M <= 4) {
    // 2-4 activation rows: the rows [r0, r1) in S runs read side by side, one row of each at a
    // time (S x M sums; as the W8A16 kernel below reads its rows), not S adjacent rows a block.
    // AMD Zen 3, FP16 from DRAM (2 threads, alternating, tinyllama-1.1b's and llama-2-7b's MLP
    // shapes): 2 rows in 4 runs 1.02-1.26x, 3-4 rows in 2 runs 1.15-1.47x (reports/cpu-kernels.md).
    // One row: not separable from the noise.
    constexpr int S = M == 2 ? 4 : 2;
    const int64_t h = (r1 - r0) / S;
    for (; r < r0 + h; ++r) block<T, M, S, 1>(wd, x, w.n_in, y, w.n_out, r, sc, h);
    r = r0 + S * h;
  } else {
    // 5-8 activation rows: M x n floats of them (64 KB at 8 rows of 2,048) overflow the 32 KB L1,
    // and one weight row at a time loaded all of them again from L2 per 8 weights. Now the rows in
    // 2 runs, and the activation rows in two halves of at most 4: the second half reads the same
    // two weight rows again, from L1 or L2 (8-22 KB in FP16 at tinyllama's shapes), so the weights
    // stream from DRAM once and each 8 weights load at most 4 activation vectors.
    constexpr int Ma = (M + 1) / 2, Mb = M - Ma;
    const int64_t h = (r1 - r0) / 2, n = w.n_in, ldy = w.n_out;
    for (; r < r0 + h; ++r) {
      block<T, Ma, 2, 1>(wd, x, n, y, ldy, r, sc, h);
      block<T, Mb, 2, 1>(wd, x + Ma * n, n, y + Ma * ldy, ldy, r, sc, h);
    }
    r = r0 + 2 * h;
  }
  for (; r < r1; ++r) block<T, M, 1, M == 1 ? 2 : 1>(wd, x, w.n_in, y, w.n_out, r, sc);
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

// INT8 weights on AVX2 without VNNI: W8A16, as gemv_vnni_avx512.cpp does with vpdpwssd. Each
// activation row is quantised once per call to int16 with its own scale (the same values as
// quantize_activations_i16); the weights are sign-extended to int16 (vpmovsxbw, 16 a load) and
// multiplied with vpmaddwd (two products summed into each of 8 int32 lanes) and vpaddd: 3 uops
// per 16 weights where the fp32 path spends 6 (vpmovsxbd, vcvtdq2ps and an FMA per 8), which kept
// it below the read bandwidth on AMD Zen 3. Overflow: a lane adds two products of at most
// |127 * 32767| a step, so the int32 sums are flushed into fp32 every kFlushSteps = 128 steps
// (2,048 weights), far inside the 258 that could overflow.
namespace latprof::cpu::detail {
namespace {

constexpr int64_t kFlushSteps = 128;

// y[j * ldy + r + i rs] = xs[j] * scales[r + i rs] * sum_k w[r + i rs][k] q[j][k], i < R, j < M,
// with U steps of 16 weights in flight (U sums a row and activation row): R rows rs apart.
template <int M, int R, int U>
void i16_block(const int8_t* w, int64_t n, const int16_t* q, int64_t ldq, const float* xs,
               const float* scales, float* y, int64_t ldy, int64_t r, int64_t rs = 1) {
  const int8_t* wr = w + r * n;
  const int64_t ld = rs * n;
  const int64_t nu = n / (16 * U) * (16 * U);
  __m256 fs[R][M];
  for (int i = 0; i < R; ++i)
    for (int j = 0; j < M; ++j) fs[i][j] = _mm256_setzero_ps();
  for (int64_t k0 = 0; k0 < nu; k0 += 16 * U * kFlushSteps) {
    const int64_t k1 = std::min(nu, k0 + 16 * U * kFlushSteps);
    __m256i acc[U][R][M];
#pragma GCC unroll 8
    for (int u = 0; u < U; ++u)
#pragma GCC unroll 8
      for (int i = 0; i < R; ++i)
#pragma GCC unroll 8
        for (int j = 0; j < M; ++j) acc[u][i][j] = _mm256_setzero_si256();
    int64_t k = k0;
    do {  // k1 > k0: a loop GCC sees run keeps the sums in registers (gemm_avx2.cpp)
#pragma GCC unroll 8
      for (int u = 0; u < U; ++u)
#pragma GCC unroll 8
        for (int i = 0; i < R; ++i) {
          const __m256i wv = _mm256_cvtepi8_epi16(
              _mm_loadu_si128(reinterpret_cast<const __m128i*>(wr + i * ld + k + 16 * u)));
#pragma GCC unroll 8
          for (int j = 0; j < M; ++j) {
            const __m256i xv =
                _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + j * ldq + k + 16 * u));
            acc[u][i][j] = _mm256_add_epi32(acc[u][i][j], _mm256_madd_epi16(wv, xv));
          }
        }
      k += 16 * U;
    } while (k < k1);
    for (int u = 0; u < U; ++u)  // each sum to fp32 alone: two could overflow int32
      for (int i = 0; i < R; ++i)
        for (int j = 0; j < M; ++j)
          fs[i][j] = _mm256_add_ps(fs[i][j], _mm256_cvtepi32_ps(acc[u][i][j]));
  }
  for (int i = 0; i < R; ++i)
    for (int j = 0; j < M; ++j) {
      int32_t tail = 0;  // the last n % (16 U) weights, exact
      for (int64_t k = nu; k < n; ++k) tail += int32_t(wr[i * ld + k]) * q[j * ldq + k];
      y[j * ldy + r + i * rs] = (hsum(fs[i][j]) + float(tail)) * xs[j] * scales[r + i * rs];
    }
}

template <int M>
void i16_rows(const Weight& w, const int16_t* q, int64_t ldq, const float* xs, float* y, int64_t r0,
              int64_t r1) {
  // The rows [r0, r1) cut into S runs read side by side, one row of each at a time (S x M int32
  // sums <= 8 in 16 ymm, a weight vector, the activations where they fit), so a thread reads S
  // linear streams of weights far apart: 4 at 1-2 activation rows, 2 from 3. On AMD
  // Zen 3 (2 threads from DRAM, alternating) one linear stream read 21-28 GB/s where FP16's GEMV
  // read 29-33; at 1-2 rows 4 streams ran 1.33-1.69x as fast as one, 2 streams 1.19-1.31x, 8
  // 1.33-1.63x, and 4 adjacent rows a block (2 KB apart at 2,048 columns) 0.78x one; at 3-4 rows 2
  // streams 1.05-1.66x 2 adjacent rows a block (reports/cpu-kernels.md). From 5 activation rows,
  // 2 runs and the activation rows in two halves, as the FP16 kernel above reads them (2,048 x
  // 5,632 1.22-1.33x, 5,632 x 2,048 level). The rows left over one at a time (at 1-2 activation
  // rows 4 steps in flight).
  constexpr int S = M <= 2 ? 4 : 2;
  const auto* wd = static_cast<const int8_t*>(w.data);
  const int64_t h = (r1 - r0) / S;
  int64_t r = r0;
  if constexpr (M <= 4) {
    for (; r < r0 + h; ++r) i16_block<M, S, 1>(wd, w.n_in, q, ldq, xs, w.scales, y, w.n_out, r, h);
  } else {
    constexpr int Ma = (M + 1) / 2, Mb = M - Ma;
    for (; r < r0 + h; ++r) {
      i16_block<Ma, 2, 1>(wd, w.n_in, q, ldq, xs, w.scales, y, w.n_out, r, h);
      i16_block<Mb, 2, 1>(wd, w.n_in, q + Ma * ldq, ldq, xs + Ma, w.scales, y + Ma * w.n_out,
                          w.n_out, r, h);
    }
  }
  for (r = r0 + S * h; r < r1; ++r)
    i16_block<M, 1, M <= 2 ? 4 : 1>(wd, w.n_in, q, ldq, xs, w.scales, y, w.n_out, r);
}

}  // namespace

void quantize_activations_i16_avx2(const float* x, int64_t m, int64_t n, int64_t ldx, int16_t* xq,
                                   float* xs) {
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  for (int64_t j = 0; j < m; ++j) {
    const float* xj = x + j * n;
    __m256 mv = _mm256_setzero_ps();
    int64_t k = 0;
    for (; k + 8 <= n; k += 8)
      mv = _mm256_max_ps(mv, _mm256_and_ps(_mm256_loadu_ps(xj + k), abs_mask));
    float mx = hmax(mv);
    for (; k < n; ++k) mx = std::max(mx, std::fabs(xj[k]));
    const float s = mx > 0 ? mx / 32767.0f : 1.0f;
    const float inv = 1.0f / s;
    int16_t* qj = xq + j * ldx;
    const __m256 vinv = _mm256_set1_ps(inv), lim = _mm256_set1_ps(32767.0f),
                 nlim = _mm256_set1_ps(-32767.0f);
    for (k = 0; k + 8 <= n; k += 8) {
      // round to nearest even (as lrintf, the MXCSR default), clamp, narrow
      const __m256 v =
          _mm256_min_ps(_mm256_max_ps(_mm256_mul_ps(_mm256_loadu_ps(xj + k), vinv), nlim), lim);
      const __m256i i32 = _mm256_cvtps_epi32(v);
      _mm_storeu_si128(
          reinterpret_cast<__m128i*>(qj + k),
          _mm_packs_epi32(_mm256_castsi256_si128(i32), _mm256_extracti128_si256(i32, 1)));
    }
    for (; k < n; ++k) qj[k] = int16_t(std::clamp(std::lrintf(xj[k] * inv), -32767L, 32767L));
    for (k = n; k < ldx; ++k) qj[k] = 0;
    xs[j] = s;
  }
}

void gemv_rows_i8_avx2(const Weight& w, const int16_t* xq, int64_t ldx, const float* xs, int64_t m,
                       float* y, int64_t r0, int64_t r1) {
  with_rows(m, [&](auto M) { i16_rows<decltype(M)::value>(w, xq, ldx, xs, y, r0, r1); });
}

}  // namespace latprof::cpu::detail
