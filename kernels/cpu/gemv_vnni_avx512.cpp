// INT8-weight GEMV with AVX512-VNNI: y[m, n_out] = x[m, n_in] · Wᵀ.
//
// Why: the fp32 path (gemv_avx512.cpp) spends two port-0 uops per 16 int8 weights (vcvtdq2ps
// and the FMA; 512-bit FP runs on ports 0 and 5 only), which caps two cores at ~80% of the read
// bandwidth. Here each activation row is quantised once per call to int16 with its own scale
// (relative rounding 2^-16 of max|x|: far finer than the weights' int8 and than fp16), weights
// are sign-extended to int16 (vpmovsxbw, port 5) and multiplied-accumulated into int32 with
// vpdpwssd (port 0): one port-0 uop per 32 weights, so the loop is memory-bound.
//
// Overflow: one vpdpwssd lane adds two products of at most 127 * 32767 each; int32 holds 2^31,
// so lanes are flushed into fp32 accumulators every kFlushSteps = 128 steps (4096 weights), far
// inside the 258 steps that could overflow.
#include <immintrin.h>

#include <algorithm>
#include <cmath>

#include "kernels/cpu/internal.hpp"
#include "kernels/cpu/vnni_avx512.hpp"

// GCC 12's own intrinsics headers (_mm512_undefined_ps inside _mm512_cvtepi32_ps) trip
// -Wmaybe-uninitialized when inlined here; a known false positive of the compiler's headers.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace latprof::cpu::detail {

namespace {

constexpr int64_t kFlushSteps = 128;
// The linear stream's prefetch distance (row_stream), into L2 as kLinearPrefetchBytes: 6 KB, not
// the FP16 stream's 8 KB. On AMD Zen 4, in one process, alternating with the FP16 stream at 8 KB
// (256 MB of weights, huge pages), the W8A16 stream ran at 0.85 of its bandwidth from 8 KB ahead
// and 0.93-0.94 from 6 KB (2 threads, rounds at >= 45 GB/s); 5 and 7 KB were 0.86-0.90, 2-4 KB
// 0.54-0.71 (reports/cpu-kernels.md).
constexpr int64_t kStreamPrefetchBytes = 6144;
// The row-major blocks of 2 weight rows (7-8 activation rows, and 16 in two groups) at most
// kRowPairMaxIn wide, on a CPU that keeps W8A16 weights row-major (StreamTuning::i8_rows4 off):
// each row stream prefetched kRowPairAhead bytes on into L2 (two pairs of rows ahead at 2,048
// columns), not 1,024 into L1. Intel Xeon (family 6 model 207, 5,632 x 2,048, 2 threads from
// DRAM, three rounds alternating): 8 rows 1.25-1.38x, 16 rows 1.10-1.2x as fast; the blocks of 3
// rows (6 activation rows) ran 0.90-0.99x so, and stay as they were (reports/cpu-kernels.md).
constexpr int64_t kRowPairMaxIn = 2048, kRowPairAhead = 4096;
// Row-major blocks of at least kPanelMinRows activation rows (R = 2) walk a matrix wider than
// kRowPanel columns in panels of that many, every block of a panel before the next panel: the 8
// activation rows of a panel (32 KB of int16) stay in L1, where all 5,632 columns (88 KB) came
// from L2 again for every block of 2 weight rows. Intel Xeon (family 6 model 207, 2 threads): 8
// rows of 5,632 columns hot in L2 92.6 -> 82.2 us; from DRAM, 2,048 x 5,632 and 4,096 x 11,008,
// 8 rows 1.08-1.23x and 16 rows 1.10-1.19x as fast. Fewer rows, whose blocks wait on the memory
// rather than on the multiply-adds, ran 0.86-0.89x as fast in panels (their rows read in 2 KB
// pieces), and keep whole rows (reports/cpu-kernels.md).
constexpr int kPanelMinRows = 7;
constexpr int64_t kRowPanel = 2048;

inline __m512i load_w16(const int8_t* p) {
  return _mm512_cvtepi8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}
inline __m512i load_w16(const int8_t* p, __mmask32 k) {
  return _mm512_cvtepi8_epi16(_mm256_maskz_loadu_epi8(k, p));
}

// Whether block<M, R> pins its fp32 sums to memory (an asm operand at each flush). GCC 12 keeps
// them in registers when they fit beside the int32 ones; at M = 3, R = 4 (24 zmm of sums, 4
// widened weights, the activation and the row pointers) it then spilled the widened weights to
// the stack inside the loop. Pinned, on AMD Zen 4 (2 threads, reports/cpu-kernels.md): 3 rows
// hot in L3 1.58x, 7 rows (4 + 3) 1.25x hot and 1.24-1.29x from DRAM, the row-major 7-row block
// (R = 2) 1.8x hot; 3 rows from DRAM 0.92-1.08x. Pinned everywhere, 1, 2 and 4 rows ran 3-7%
// slower, so only the blocks whose sums would just fit are pinned. (Measured on 4,096-column
// interleaved panels; the 2,048-column ones now take block's single-flush path, without fp32
// sums, so this holds for row-major weights: the shapes rows4_fits refuses.)
template <int M, int R>
constexpr bool kSumsInMemory = (2 * R * M < 32) && (2 * R * M + R + 1 > 24);

// The lane sums of 16 vectors: lane k of the result is the sum of v[k]'s 16 lanes. A tree of 45
// unpacks, shuffles and adds, where 16 _mm512_reduce_add_ps take ~128 instructions (half of them
// shuffles on the port the weights' vpmovsxbw also needs).
inline __m512 sum_lanes16(const __m512 (&v)[16]) {
  __m512 u[8], q[4];
  for (int i = 0; i < 8; ++i)  // per 128-bit lane: a0+a2, b0+b2, a1+a3, b1+b3
    u[i] = _mm512_add_ps(_mm512_unpacklo_ps(v[2 * i], v[2 * i + 1]),
                         _mm512_unpackhi_ps(v[2 * i], v[2 * i + 1]));
  for (int i = 0; i < 4; ++i)  // per 128-bit lane: the lane's sums of v[4i] .. v[4i + 3]
    q[i] = _mm512_add_ps(_mm512_shuffle_ps(u[2 * i], u[2 * i + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                         _mm512_shuffle_ps(u[2 * i], u[2 * i + 1], _MM_SHUFFLE(3, 2, 3, 2)));
  const __m512 h01 = _mm512_add_ps(_mm512_shuffle_f32x4(q[0], q[1], _MM_SHUFFLE(1, 0, 1, 0)),
                                   _mm512_shuffle_f32x4(q[0], q[1], _MM_SHUFFLE(3, 2, 3, 2)));
  const __m512 h23 = _mm512_add_ps(_mm512_shuffle_f32x4(q[2], q[3], _MM_SHUFFLE(1, 0, 1, 0)),
                                   _mm512_shuffle_f32x4(q[2], q[3], _MM_SHUFFLE(3, 2, 3, 2)));
  return _mm512_add_ps(_mm512_shuffle_f32x4(h01, h23, _MM_SHUFFLE(2, 0, 2, 0)),
                       _mm512_shuffle_f32x4(h01, h23, _MM_SHUFFLE(3, 1, 3, 1)));
}

// Whether block<M, R> writes its R x M results from one vector (sum_lanes16) instead of one
// horizontal sum each: 4 rows of 2-4 activation rows (the batched decode's blocks).
template <int M, int R>
constexpr bool kTreeStore = R == 4 && M >= 2 && M <= 4;

// Rows [r, r + R) of W, M >= 2 activation rows of xq (int16, row stride ldx, zero beyond n): the
// R weight vectors of a step stay in registers and each activation vector is loaded once for all
// R rows (R * M int32 accumulators + R weights + one activation); the fp32 sums they are flushed
// into live in memory, touched only at the flushes. (Holding the fp32 sums and all M activations
// in registers too left R = 1 at M >= 5: 8 activation loads per 8 vpdpwssd, and the 8-row GEMV
// at ~20% of the read bandwidth.) Row-major weights may be read in a panel of `width` columns
// from c0 (xq then points at the panel's first column; width 0: all columns): every panel but
// the first adds its results to y.
template <int M, int R, bool Rows4>
void block(const Weight& w, const int16_t* xq, int64_t ldx, const float* xs, float* y, int64_t r,
           int64_t c0 = 0, int64_t width = 0) {
  const int64_t n = width > 0 ? width : w.n_in, ldy = w.n_out;
  const bool add = c0 > 0;
  __m512i acci[R][M];
  for (int i = 0; i < R; ++i)
    for (int j = 0; j < M; ++j) acci[i][j] = _mm512_setzero_si512();
  const I8Rows<R, Rows4> wr(w, r, c0, width);
  const int64_t full = n / 32;
  const bool pair_l2 =
      !Rows4 && R == 2 && width == 0 && n <= kRowPairMaxIn && !stream_tuning().i8_rows4;
  auto step_at = [&](int64_t step) {
    const int64_t k = step * 32;
    if ((step & 1) == 0) {
      if (pair_l2)
        wr.template prefetch_rows<2>(k, kRowPairAhead);
      else if (width > 0)  // in panels: the next block's rows, into L2 (below)
        wr.template prefetch_next_block<2>(k);
      else
        wr.template prefetch<M>(k, 1024);
    }
    __m512i wv[R];
    for (int i = 0; i < R; ++i) wv[i] = load_w16(wr.at(i, k));
    for (int j = 0; j < M; ++j) {
      __m512i xv = _mm512_loadu_si512(reinterpret_cast<const void*>(xq + j * ldx + k));
      asm("" : "+v"(xv));  // one load for the R products, not one folded into each
      for (int i = 0; i < R; ++i) acci[i][j] = dpwssd(acci[i][j], wv[i], xv);
    }
  };
  auto store = [&](int i, int j, __m512 sum) {
    const float v = _mm512_reduce_add_ps(sum) * w.scales[r + i] * xs[j];
    float& o = y[j * ldy + r + i];
    o = add ? o + v : v;
  };
  auto store4 = [&](int j, __m128 v) {  // rows r .. r + 3 of activation row j
    float* o = y + j * ldy + r;
    _mm_storeu_ps(o, add ? _mm_add_ps(_mm_loadu_ps(o), v) : v);
  };
  // Every result, from the fp32 sums sum_of(i, j): y = (sum * scale) * xs, as store() rounds it.
  auto store_all = [&](auto&& sum_of) {
    if constexpr (kTreeStore<M, R>) {
      __m512 v[16];
      for (int j = 0; j < 4; ++j)
        for (int i = 0; i < 4; ++i) v[4 * j + i] = j < M ? sum_of(i, j) : _mm512_setzero_ps();
      // lane 4j + i: row r + i of activation row j
      const __m512 sc = _mm512_broadcast_f32x4(_mm_loadu_ps(w.scales + r));
      const __m512 xv = _mm512_permutexvar_ps(
          _mm512_set_epi32(3, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0),
          _mm512_castps128_ps512(_mm_maskz_loadu_ps(__mmask8((1u << M) - 1), xs)));
      const __m512 out = _mm512_mul_ps(_mm512_mul_ps(sum_lanes16(v), sc), xv);
      store4(0, _mm512_castps512_ps128(out));
      store4(1, _mm512_extractf32x4_ps(out, 1));
      if constexpr (M >= 3) store4(2, _mm512_extractf32x4_ps(out, 2));
      if constexpr (M >= 4) store4(3, _mm512_extractf32x4_ps(out, 3));
    } else {
      for (int i = 0; i < R; ++i)
        for (int j = 0; j < M; ++j) store(i, j, sum_of(i, j));
    }
  };
  if (full * 32 == n && full <= kFlushSteps) {
    // One flush's worth of whole steps (every interleaved panel): the int32 sums straight to y,
    // without the fp32 sums in memory (hot in L3 on AMD Zen 4, 1.00-1.05x at 1-8 rows).
    for (int64_t step = 0; step < full; ++step) step_at(step);
    store_all([&](int i, int j) { return _mm512_cvtepi32_ps(acci[i][j]); });
    return;
  }
  alignas(64) float accf[R][M][16] = {};
  auto flush = [&] {
    if constexpr (kSumsInMemory<M, R>) asm volatile("" : "+m"(accf));
    for (int i = 0; i < R; ++i)
      for (int j = 0; j < M; ++j) {
        _mm512_store_ps(accf[i][j],
                        _mm512_add_ps(_mm512_load_ps(accf[i][j]), _mm512_cvtepi32_ps(acci[i][j])));
        acci[i][j] = _mm512_setzero_si512();
      }
  };
  int64_t step = 0;
  while (step < full) {
    const int64_t end = std::min(full, step + kFlushSteps);
    for (; step < end; ++step) step_at(step);
    flush();
  }
  if (const int64_t k = full * 32; k < n) {  // the last, partial step (row-major): masked weights
    const __mmask32 mask = __mmask32((uint64_t(1) << (n - k)) - 1);
    __m512i wv[R];
    for (int i = 0; i < R; ++i) wv[i] = load_w16(wr.at(i, k), mask);
    for (int j = 0; j < M; ++j) {
      const __m512i xv =
          _mm512_maskz_loadu_epi16(mask, reinterpret_cast<const void*>(xq + j * ldx + k));
      for (int i = 0; i < R; ++i) acci[i][j] = dpwssd(acci[i][j], wv[i], xv);
    }
    flush();
  }
  store_all([&](int i, int j) { return _mm512_load_ps(accf[i][j]); });
}

// M activation rows, one weight row at a time, so a thread's rows [r0, r1) are one linear stream
// (rows are contiguous), prefetched kStreamPrefetchBytes ahead; per row and activation row two
// vpdpwssd chains (64 weights, one line, per step) hide its latency. The activation vectors are
// loaded again for every weight row (from L1).
template <int M>
void row_stream(const int8_t* w, int64_t n, const int16_t* xq, int64_t ldx, const float* xs,
                const float* ws, float* y, int64_t ldy, int64_t r0, int64_t r1) {
  const int8_t* end = w + r1 * n;  // no prefetch past the thread's share
  auto xv = [&](int j, int64_t k) {
    return _mm512_loadu_si512(reinterpret_cast<const void*>(xq + j * ldx + k));
  };
  for (int64_t r = r0; r < r1; ++r) {
    const int8_t* wr = w + r * n;
    __m512 accf[M];
    __m512i acc0[M], acc1[M];
    for (int j = 0; j < M; ++j) {
      accf[j] = _mm512_setzero_ps();
      acc0[j] = acc1[j] = _mm512_setzero_si512();
    }
    auto flush = [&] {
      for (int j = 0; j < M; ++j) {
        accf[j] = _mm512_add_ps(accf[j], _mm512_cvtepi32_ps(_mm512_add_epi32(acc0[j], acc1[j])));
        acc0[j] = acc1[j] = _mm512_setzero_si512();
      }
    };
    int64_t k = 0;
    while (k + 64 <= n) {
      // flush every kFlushSteps 32-weight steps per chain, as block() does
      const int64_t stop = std::min(n / 64 * 64, k + 64 * kFlushSteps);
      for (; k < stop; k += 64) {
        if (const int8_t* pf = wr + k + kStreamPrefetchBytes; pf < end) prefetch_linear(pf);
        // One 64-byte load, its halves sign-extended: on AMD Zen 4, in a stand-alone copy from
        // DRAM, 1.01-1.12x two 32-byte loads (88-98% of a plain read; reports/cpu-kernels.md).
        const __m512i wv = _mm512_loadu_si512(reinterpret_cast<const void*>(wr + k));
        const __m512i w0 = _mm512_cvtepi8_epi16(_mm512_castsi512_si256(wv));
        const __m512i w1 = _mm512_cvtepi8_epi16(_mm512_extracti64x4_epi64(wv, 1));
        for (int j = 0; j < M; ++j) {
          acc0[j] = dpwssd(acc0[j], w0, xv(j, k));
          acc1[j] = dpwssd(acc1[j], w1, xv(j, k + 32));
        }
      }
      flush();
    }
    for (; k < n; k += 32) {  // the rest, 32 weights a step, the last one masked
      const __mmask32 mask = n - k >= 32 ? ~__mmask32(0) : __mmask32((uint64_t(1) << (n - k)) - 1);
      const __m512i w0 = load_w16(wr + k, mask);
      for (int j = 0; j < M; ++j)
        acc0[j] =
            dpwssd(acc0[j], w0,
                   _mm512_maskz_loadu_epi16(mask, reinterpret_cast<const void*>(xq + j * ldx + k)));
    }
    flush();
    for (int j = 0; j < M; ++j) y[j * ldy + r] = _mm512_reduce_add_ps(accf[j]) * ws[r] * xs[j];
  }
}

template <int M>
void rows(const Weight& w, const int16_t* xq, int64_t ldx, const float* xs, float* y, int64_t r0,
          int64_t r1) {
  // R * M int32 accumulators, <= 20. At M = 8, R = 3 (24) made GCC keep them on the stack and
  // ran 1.7x slower than R = 2; R = 3 at M = 7 (21) was no faster than R = 2, at M = 6 (18) 1.2x
  // faster.
  constexpr int R = M <= 5 ? 4 : M == 6 ? 3 : 2;
  if (w.rows4) {
    // Rows interleaved in fours: a block of the 4 rows of a group is one linear stream (R = 4
    // from the group's first row), each activation vector loaded once for the 4. From 5
    // activation rows (4 x M accumulators would not fit the registers) each group is taken in
    // two blocks, 4 activation rows and then the rest, the second reading the group again from
    // L1/L2 (3 + 3 at 6 rows ran 0.65x 4 + 2; reports/cpu-kernels.md).
    constexpr int Ma = M <= 4 ? M : 4, Mb = M - Ma;
    const int64_t ldy = w.n_out;
    int64_t r = r0;
    for (; r + 4 <= r1; r += 4) {
      block<Ma, 4, true>(w, xq, ldx, xs, y, r);
      if constexpr (Mb > 0) block<Mb, 4, true>(w, xq + Ma * ldx, ldx, xs + Ma, y + Ma * ldy, r);
    }
    for (; r < r1; ++r) {
      block<Ma, 1, true>(w, xq, ldx, xs, y, r);
      if constexpr (Mb > 0) block<Mb, 1, true>(w, xq + Ma * ldx, ldx, xs + Ma, y + Ma * ldy, r);
    }
    return;
  }
  // One linear stream while the activations stay in L1 (internal.hpp), else R-row blocks.
  if (M == 1 || (M <= 4 && M * w.n_in * int64_t(sizeof(int16_t)) <= kLinearActivationBytes))
    return row_stream<M>(static_cast<const int8_t*>(w.data), w.n_in, xq, ldx, xs, w.scales, y,
                         w.n_out, r0, r1);
  // Wide matrices at >= kPanelMinRows rows in column panels (above). Each row of a block is then
  // 2 KB, too short a run for the prefetch 1 KB ahead into L1 of the whole rows' blocks: the
  // block prefetches the next block's rows (R rows on, in the same panel) into L2 as it goes. On
  // the Intel Xeon from DRAM, 8 rows: 1 KB ahead into L1 1.01-1.19x the whole rows' time, the
  // next block into L2 1.10-1.23x, into L1 or two blocks on into L2 1.08-1.20x.
  const int64_t pw = M >= kPanelMinRows && w.n_in > kRowPanel ? kRowPanel : w.n_in;
  for (int64_t c0 = 0; c0 < w.n_in; c0 += pw) {
    const int64_t width = pw < w.n_in ? std::min(pw, w.n_in - c0) : 0;
    int64_t r = r0;
    for (; r + R <= r1; r += R) block<M, R, false>(w, xq + c0, ldx, xs, y, r, c0, width);
    for (; r < r1; ++r) block<M, 1, false>(w, xq + c0, ldx, xs, y, r, c0, width);
  }
}

}  // namespace

void quantize_activations_i16(const float* x, int64_t m, int64_t n, int64_t ldx, int16_t* xq,
                              float* xs) {
  // Vectorised: this runs once per INT8 matmul, on one thread before the parallel weight stream
  // (or, for up to 4 activation rows, on each thread for itself: gemv.cpp); the scalar loop took
  // ~5 us of a 14 us 256 x 2048 GEMV.
  for (int64_t j = 0; j < m; ++j) {
    const float* xj = x + j * n;
    const float mx = row_max_abs(xj, n);
    int64_t k = 0;
    const float s = mx > 0 ? mx / 32767.0f : 1.0f;
    const float inv = 1.0f / s;
    int16_t* q = xq + j * ldx;
    const __m512 vinv = _mm512_set1_ps(inv);
    const __m512 lim = _mm512_set1_ps(32767.0f);
    for (k = 0; k + 16 <= n; k += 16) {
      // round to nearest even (as lrintf), clamp, narrow with saturation
      __m512 v = _mm512_mul_ps(_mm512_loadu_ps(xj + k), vinv);
      v = _mm512_min_ps(_mm512_max_ps(v, _mm512_sub_ps(_mm512_setzero_ps(), lim)), lim);
      const __m512i i32 =
          _mm512_cvt_roundps_epi32(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + k), _mm512_cvtsepi32_epi16(i32));
    }
    for (; k < n; ++k) q[k] = int16_t(std::clamp(std::lrintf(xj[k] * inv), -32767L, 32767L));
    for (k = n; k < ldx; ++k) q[k] = 0;
    xs[j] = s;
  }
}

void gemv_rows_i8_vnni(const Weight& w, const int16_t* xq, int64_t ldx, const float* xs, int64_t m,
                       float* y, int64_t r0, int64_t r1) {
  for_panels(w, m, y, r0, r1, [&](const Weight& v, int64_t p0, float* yv) {
    with_rows(m, [&](auto M) { rows<decltype(M)::value>(v, xq + p0, ldx, xs, yv, r0, r1); });
  });
}

}  // namespace latprof::cpu::detail
