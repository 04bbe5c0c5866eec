// AVX-512 blocked GEMM for prefill: y[m, n_out] = x[m, n_in] · Wᵀ.
//
// In BLAS terms C = A·B with A = x (m x k) and B = Wᵀ (k x n). Blocking, BLIS style:
//   - A is packed once per call into micro-panels of MR = 14 rows, k-major ([k][14] floats).
//   - Each thread takes blocks of NC = 256 output channels; for each KC = 256 slice of k it
//     converts W (fp16 -> fp32, or int8 * row scale -> fp32) ONCE into NR = 32 wide, k-major
//     micro-panels (an in-register 16x16 transpose), 256 KB per thread, resident in L2.
//   - Micro-kernel 14 x 32: 28 zmm accumulators + 2 B vectors + 1 broadcast = 31 of 32 registers;
//     per k: 2 loads, 14 broadcasts, 28 FMAs (FMA bound, 14 cycles on two FMA ports).
//   - Loop order jr (B micro-panel, 32 KB, stays in L1) outside ir (A micro-panels from L2).
// INT8 weights on AVX512-VNNI take the same blocking in integers (gemm_i8_vnni below): int16
// activations and weights in k-pairs, vpdpwssd instead of the FMA (0.49-0.52x the time of the
// FP32 path on Zen 4, reports/cpu-kernels.md).
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cstdlib>
#include <new>

#include "kernels/cpu/internal.hpp"
#include "kernels/cpu/transpose_avx512.hpp"
#include "kernels/cpu/vnni_avx512.hpp"

// GCC 12 reports _mm512_undefined_*() inside the intrinsics headers as uninitialised (a known
// false positive once the intrinsics are inlined).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace latprof::cpu::detail {
namespace {

constexpr int MR = 14, NR = 32;
constexpr int64_t KC = 256, NC = 256;

inline __m512 load_row(const uint16_t* p, __mmask16 k, float) {
  return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(k, p));
}
inline __m512 load_row(const int8_t* p, __mmask16 k, float scale) {
  return _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_maskz_loadu_epi8(k, p))),
                       _mm512_set1_ps(scale));
}

// Pack W rows [n0, n0 + nc) x columns [k0, k0 + kc) into k-major NR-wide micro-panels:
// dst[(j / NR) * kc * NR + k * NR + j % NR] = W[n0 + j][k0 + k] (zero beyond n_out).
// INT8 rows interleaved in fours (rows4, kernels.hpp) are read where they lie: 16 elements at a
// multiple of 16 never cross a 64-element piece (KC is a multiple of 64).
template <class T>
void pack_b(const T* w, const float* scales, int64_t n_in, int64_t n_out, int64_t n0, int64_t nc,
            int64_t k0, int64_t kc, float* dst, bool rows4) {
  static_assert(KC % 64 == 0);
  constexpr int64_t kAhead = 256 / sizeof(T);  // four 64-byte lines of fp16, two of int8
  auto at = [&](int64_t n, int64_t k) {
    if constexpr (sizeof(T) == 1) return w + i8_offset(rows4, n_out, n_in, n, k);
    return w + n * n_in + k;
  };
  for (int64_t j0 = 0; j0 < nc; j0 += 16) {
    float* panel = dst + (j0 / NR) * kc * NR + (j0 % NR);
    for (int64_t k = 0; k < kc; k += 16) {
      const int64_t kn = std::min<int64_t>(16, kc - k);
      const __mmask16 km = kn == 16 ? __mmask16(0xffff) : __mmask16((1u << kn) - 1);
      __m512 r[16];
      for (int i = 0; i < 16; ++i) {
        const int64_t n = n0 + j0 + i;
        // 16 rows n_in apart are 16 streams the hardware prefetchers do not follow (and, at
        // n_in = 4,096, one L1 set): fetch kAhead elements on, past the slice's end in the
        // next 16 rows. Without it the conversion waited on the loads: ~10% of a 4,096^2 GEMM.
        const int64_t ka = k + kAhead;
        if (ka < kc) {
          if (n < n_out) __builtin_prefetch(at(n, k0 + ka), 0, 3);
        } else if (j0 + 16 < nc && n + 16 < n_out) {
          __builtin_prefetch(at(n + 16, k0 + (ka - kc)), 0, 3);
        }
        r[i] = n < n_out ? load_row(at(n, k0 + k), km, scales ? scales[n] : 1.0f)
                         : _mm512_setzero_ps();
      }
      transpose16(r);
      for (int64_t kk = 0; kk < kn; ++kk) _mm512_store_ps(panel + (k + kk) * NR, r[kk]);
    }
  }
}

// Pack x into MR-row, k-major micro-panels per KC slice: for the slice starting at k0 (width kc),
// panel ir lives at dst + k0 * mp + ir * kc * MR, element [k][r] = x[ir * MR + r][k0 + k].
// 16 columns at a time: 14 row vectors (zeros past m) transposed in registers, then 16 masked
// stores of 14 floats. (An element-by-element copy took ~8 ms for 500 x 4,096 on 2 threads, a
// sixth of that GEMM.)
void pack_a(const float* x, int64_t m, int64_t n_in, float* dst) {
  const int64_t panels = (m + MR - 1) / MR, mp = panels * MR;
  const int64_t slices = (n_in + KC - 1) / KC;
  constexpr __mmask16 kRowMask = (1u << MR) - 1;
#pragma omp for schedule(static) nowait
  for (int64_t job = 0; job < slices * panels; ++job) {
    const int64_t s = job / panels, ir = job % panels;
    const int64_t k0 = s * KC, kc = std::min(KC, n_in - k0);
    float* p = dst + k0 * mp + ir * kc * MR;
    for (int64_t k = 0; k < kc; k += 16) {
      const int64_t kn = std::min<int64_t>(16, kc - k);
      const __mmask16 km = kn == 16 ? __mmask16(0xffff) : __mmask16((1u << kn) - 1);
      __m512 r[16];
      for (int i = 0; i < 16; ++i) {
        const int64_t row = ir * MR + i;
        r[i] = i < MR && row < m ? _mm512_maskz_loadu_ps(km, x + row * n_in + k0 + k)
                                 : _mm512_setzero_ps();
      }
      transpose16(r);  // r[kk] lane i = x[row i][k0 + k + kk]
      for (int64_t kk = 0; kk < kn; ++kk) _mm512_mask_storeu_ps(p + (k + kk) * MR, kRowMask, r[kk]);
    }
  }
}

// The masks of a micro-tile's two 16-column halves for nr <= 32 valid columns.
struct ColMasks {
  __mmask16 m0, m1;
  explicit ColMasks(int nr)
      : m0(nr >= 16 ? __mmask16(0xffff) : __mmask16((1u << nr) - 1)),
        m1(nr >= 32  ? __mmask16(0xffff)
           : nr > 16 ? __mmask16((1u << (nr - 16)) - 1)
                     : 0) {}
};

// One row of a micro-tile: c[0..32) = (or +=) v0, v1 in its valid columns.
inline void store_row(float* c, __m512 v0, __m512 v1, const ColMasks& m, bool accumulate) {
  if (accumulate) {
    v0 = _mm512_add_ps(v0, _mm512_maskz_loadu_ps(m.m0, c));
    v1 = _mm512_add_ps(v1, _mm512_maskz_loadu_ps(m.m1, c + 16));
  }
  _mm512_mask_storeu_ps(c, m.m0, v0);
  _mm512_mask_storeu_ps(c + 16, m.m1, v1);
}

// C[0..mr, 0..nr) (+)= A(14 x kc) · B(kc x 32).
void micro_kernel(const float* a, const float* b, int64_t kc, float* c, int64_t ldc, int mr, int nr,
                  bool accumulate) {
  __m512 acc[MR][2];
#pragma GCC unroll 14
  for (int r = 0; r < MR; ++r) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
  for (int64_t k = 0; k < kc; ++k) {
    const __m512 b0 = _mm512_load_ps(b + k * NR), b1 = _mm512_load_ps(b + k * NR + 16);
#pragma GCC unroll 14
    for (int r = 0; r < MR; ++r) {
      const __m512 av = _mm512_set1_ps(a[k * MR + r]);
      acc[r][0] = _mm512_fmadd_ps(av, b0, acc[r][0]);
      acc[r][1] = _mm512_fmadd_ps(av, b1, acc[r][1]);
    }
  }
  const ColMasks m(nr);
#pragma GCC unroll 14
  for (int r = 0; r < MR; ++r) {
    if (r >= mr) break;
    store_row(c + r * ldc, acc[r][0], acc[r][1], m, accumulate);
  }
}

// The products of one activation matrix x with n weights (same n_in and type): x packed once,
// then the 256-column blocks of all the weights shared out dynamically.
template <class T>
void gemm_t(const Weight* ws, int n, const float* x, int64_t m, float* const* ys) {
  const int64_t n_in = ws[0].n_in;
  const int64_t panels = (m + MR - 1) / MR, mp = panels * MR;
  // The packed activations, kept between calls by the calling thread (a fresh allocation of
  // several MB per call is page-faulted in each time).
  thread_local AlignedFloats ap_cache;
  ap_cache.reserve(size_t(mp * n_in));
  float* const ap = ap_cache.p;
  int64_t first_block[kMatmulGroupMax + 1] = {0};  // blocks of weight i: [first_block[i], [i + 1])
  for (int i = 0; i < n; ++i) first_block[i + 1] = first_block[i] + (ws[i].n_out + NC - 1) / NC;
  const int64_t n_blocks = first_block[n];
  SyncRegion sync;
#pragma omp parallel
  {
    sync.start();
    pack_a(x, m, n_in, ap);         // omp for nowait inside
    sync.barrier();                 // every panel packed before any is read
    thread_local AlignedFloats bp;  // this thread's converted B block, kept between calls
    bp.reserve(size_t(NC * KC));
#pragma omp for schedule(dynamic, 1) nowait
    for (int64_t job = 0; job < n_blocks; ++job) {
      int i = 0;
      while (job >= first_block[i + 1]) ++i;
      const Weight& w = ws[i];
      const T* wd = static_cast<const T*>(w.data);
      const float* scales = int8_storage(w.type) ? w.scales : nullptr;
      const int64_t n_out = w.n_out;
      float* y = ys[i];
      const int64_t n0 = (job - first_block[i]) * NC, nc = std::min(NC, n_out - n0);
      for (int64_t k0 = 0; k0 < n_in; k0 += KC) {
        const int64_t kc = std::min(KC, n_in - k0);
        pack_b(wd, scales, n_in, n_out, n0, nc, k0, kc, bp.p, w.rows4);
        for (int64_t jr = 0; jr < nc; jr += NR) {
          const float* b = bp.p + (jr / NR) * kc * NR;
          const int nr = int(std::min<int64_t>(NR, nc - jr));
          for (int64_t ir = 0; ir < panels; ++ir) {
            const int mr = int(std::min<int64_t>(MR, m - ir * MR));
            micro_kernel(ap + k0 * mp + ir * kc * MR, b, kc, y + ir * MR * n_out + n0 + jr, n_out,
                         mr, nr, k0 > 0);
          }
        }
      }
    }
    sync.done();
  }
  sync.finish();
}

// ---- INT8 weights on AVX512-VNNI (W8A16) -------------------------------------------------------
// The same blocking with integer products: each activation row is rounded to int16 with its own
// scale (quantize_activations_i16, as the decode GEMV does), the int8 weights are widened to int16
// when packed, both are packed in k-pairs (one int32 lane = the int16 values of k and k + 1), and
// the micro-kernel multiplies with vpdpwssd: 32 multiply-adds per instruction where an FP32 FMA
// does 16. A KC slice is 128 k-pairs, so a lane sums at most 256 products of |127 * 32767|
// (1.07e9 < 2^31) before the slice's int32 sums are scaled (row scale x weight scale) into the
// fp32 output.

// Packs xq (int16, rows ldq apart, zero from n_in to ldq) as pack_a does x, in k-pairs: panel ir
// of the slice at k0 (width kc, kcp = ceil(kc / 2) pairs) at dst + (k0 / 2) * mp + ir * kcp * MR,
// element [kp][r] = the pair (xq[ir * MR + r][k0 + 2 kp], [k0 + 2 kp + 1]).
void pack_a_i16(const int16_t* xq, int64_t ldq, int64_t m, int64_t n_in, int32_t* dst) {
  const int64_t panels = (m + MR - 1) / MR, mp = panels * MR;
  const int64_t slices = (n_in + KC - 1) / KC;
  constexpr __mmask16 kRowMask = (1u << MR) - 1;
#pragma omp for schedule(static) nowait
  for (int64_t job = 0; job < slices * panels; ++job) {
    const int64_t s = job / panels, ir = job % panels;
    const int64_t k0 = s * KC, kcp = (std::min(KC, n_in - k0) + 1) / 2;
    int32_t* p = dst + (k0 / 2) * mp + ir * kcp * MR;
    for (int64_t kp = 0; kp < kcp; kp += 16) {
      const int64_t kn = std::min<int64_t>(16, kcp - kp);
      const __mmask16 km = kn == 16 ? __mmask16(0xffff) : __mmask16((1u << kn) - 1);
      __m512 r[16];
      for (int i = 0; i < 16; ++i) {
        const int64_t row = ir * MR + i;
        r[i] = i < MR && row < m
                   ? _mm512_castsi512_ps(_mm512_maskz_loadu_epi32(km, xq + row * ldq + k0 + 2 * kp))
                   : _mm512_setzero_ps();
      }
      transpose16(r);  // r[kk] lane i = row i's pair kp + kk
      for (int64_t kk = 0; kk < kn; ++kk)
        _mm512_mask_storeu_epi32(p + (kp + kk) * MR, kRowMask, _mm512_castps_si512(r[kk]));
    }
  }
}

// Packs W rows [n0, n0 + nc) x columns [k0, k0 + kc) as pack_b does, widened to int16 and in
// k-pairs: dst[(j / NR) * kcp * NR + kp * NR + j % NR] = the pair (W[n0 + j][k0 + 2 kp],
// [k0 + 2 kp + 1]), zero past n_out and past n_in. 32 elements at a multiple of 32 never cross a
// 64-element piece of rows interleaved in fours.
// The rows are prefetched two lines ahead into L1, or into L2 with L2 (row-major weights on a CPU
// that keeps W8A16 weights row-major, StreamTuning::i8_rows4 off): on the Intel Xeon, 16
// row-major rows prefetched into L1 left 65% of the packing's samples on its prefetch
// instructions (waiting for fill buffers) and the GEMM of 16-64 rows from DRAM at 1.02-1.17x the
// time of the interleaved layout; into L2, 0.92-1.05x (reports/cpu-kernels.md).
template <bool L2>
void pack_b_i16(const int8_t* w, int64_t n_in, int64_t n_out, int64_t n0, int64_t nc, int64_t k0,
                int64_t kc, int32_t* dst, bool rows4) {
  auto prefetch = [](const int8_t* p) __attribute__((always_inline)) {
    __builtin_prefetch(p, 0, L2 ? 2 : 3);
  };
  const int64_t kcp = (kc + 1) / 2;
  constexpr int64_t kAhead = 128;  // two 64-byte lines on, as pack_b's int8 rows
  for (int64_t j0 = 0; j0 < nc; j0 += 16) {
    int32_t* panel = dst + (j0 / NR) * kcp * NR + (j0 % NR);
    for (int64_t k = 0; k < kc; k += 32) {
      const int64_t kn = std::min<int64_t>(32, kc - k);
      const __mmask32 km = kn == 32 ? __mmask32(0xffffffffu) : __mmask32((1u << kn) - 1);
      __m512 r[16];
      for (int i = 0; i < 16; ++i) {
        const int64_t n = n0 + j0 + i;
        const int64_t ka = k + kAhead;
        if (ka < kc) {
          if (n < n_out) prefetch(w + i8_offset(rows4, n_out, n_in, n, k0 + ka));
        } else if (j0 + 16 < nc && n + 16 < n_out) {
          prefetch(w + i8_offset(rows4, n_out, n_in, n + 16, k0 + (ka - kc)));
        }
        r[i] = n < n_out ? _mm512_castsi512_ps(_mm512_cvtepi8_epi16(_mm256_maskz_loadu_epi8(
                               km, w + i8_offset(rows4, n_out, n_in, n, k0 + k))))
                         : _mm512_setzero_ps();
      }
      transpose16(r);  // r[kk] lane i = row i's pair k / 2 + kk
      for (int64_t kk = 0; kk < (kn + 1) / 2; ++kk)
        _mm512_store_si512(panel + (k / 2 + kk) * NR, _mm512_castps_si512(r[kk]));
    }
  }
}

// C[0..mr, 0..nr) (+)= sa[r] * sw[n] * (A(14 x kcp pairs) · B(kcp pairs x 32)), the products
// summed in int32.
void micro_kernel_i16(const int32_t* a, const int32_t* b, int64_t kcp, const float* sa,
                      const float* sw, float* c, int64_t ldc, int mr, int nr, bool accumulate) {
  __m512i acc[MR][2];
#pragma GCC unroll 14
  for (int r = 0; r < MR; ++r) acc[r][0] = acc[r][1] = _mm512_setzero_si512();
  for (int64_t kp = 0; kp < kcp; ++kp) {
    const __m512i b0 = _mm512_load_si512(b + kp * NR), b1 = _mm512_load_si512(b + kp * NR + 16);
#pragma GCC unroll 14
    for (int r = 0; r < MR; ++r) {
      const __m512i av = _mm512_set1_epi32(a[kp * MR + r]);
      acc[r][0] = dpwssd(acc[r][0], av, b0);
      acc[r][1] = dpwssd(acc[r][1], av, b1);
    }
  }
  const ColMasks m(nr);
  const __m512 sw0 = _mm512_maskz_loadu_ps(m.m0, sw), sw1 = _mm512_maskz_loadu_ps(m.m1, sw + 16);
#pragma GCC unroll 14
  for (int r = 0; r < MR; ++r) {
    if (r >= mr) break;
    const __m512 s = _mm512_set1_ps(sa[r]);
    store_row(c + r * ldc, _mm512_mul_ps(_mm512_cvtepi32_ps(acc[r][0]), _mm512_mul_ps(sw0, s)),
              _mm512_mul_ps(_mm512_cvtepi32_ps(acc[r][1]), _mm512_mul_ps(sw1, s)), m, accumulate);
  }
}

}  // namespace

// W8A8's rounding of one activation row (round_i8, internal.hpp) with q kept as int16: the same
// q and s as every W8A8 path, so q times the int8 weights is exact in int32.
void quantize_row_i8_as_i16(const float* x, int64_t n, int64_t ldq, int16_t* q, float* s) {
  const float sc = i8_activation_scale(row_max_abs(x, n)), inv = 1.0f / sc;
  const __m512 vinv = _mm512_set1_ps(inv), lim = _mm512_set1_ps(127.0f);
  int64_t k = 0;
  for (; k + 16 <= n; k += 16) {
    __m512 v = _mm512_mul_ps(_mm512_loadu_ps(x + k), vinv);
    v = _mm512_min_ps(_mm512_max_ps(v, _mm512_sub_ps(_mm512_setzero_ps(), lim)), lim);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + k),
                        _mm512_cvtepi32_epi16(_mm512_cvt_roundps_epi32(
                            v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)));
  }
  for (; k < n; ++k) q[k] = int16_t(round_i8(x[k], inv));
  for (k = n; k < ldq; ++k) q[k] = 0;
  *s = sc;
}

namespace {

// gemm_t for INT8 weights on VNNI: the activations rounded once (W8A16: to int16 with a step of
// max|x| / 32767; W8A8, a8: to int8 as round_i8), then packed once.
void gemm_i8_vnni(const Weight* ws, int n, const float* x, int64_t m, float* const* ys, bool a8) {
  const int64_t n_in = ws[0].n_in, ldq = (n_in + 31) / 32 * 32;
  const int64_t panels = (m + MR - 1) / MR, mp = panels * MR;
  // Kept between calls by the calling thread, as gemm_t's (floats as storage for int16 / int32).
  thread_local AlignedFloats xq_cache, xs_cache, ap_cache;
  xq_cache.reserve(size_t(m * ldq / 2));
  xs_cache.reserve(size_t(mp));
  ap_cache.reserve(size_t(mp * ((n_in + 1) / 2 + 1)));
  auto* const xq = reinterpret_cast<int16_t*>(xq_cache.p);
  float* const xs = xs_cache.p;
  auto* const ap = reinterpret_cast<int32_t*>(ap_cache.p);
  int64_t first_block[kMatmulGroupMax + 1] = {0};
  for (int i = 0; i < n; ++i) first_block[i + 1] = first_block[i] + (ws[i].n_out + NC - 1) / NC;
  const int64_t n_blocks = first_block[n];
  const bool l2_prefetch = !stream_tuning().i8_rows4;
  SyncRegion sync;
#pragma omp parallel
  {
    sync.start();
#pragma omp for schedule(static) nowait
    for (int64_t j = 0; j < m; ++j) {
      if (a8)
        quantize_row_i8_as_i16(x + j * n_in, n_in, ldq, xq + j * ldq, xs + j);
      else
        quantize_activations_i16(x + j * n_in, 1, n_in, ldq, xq + j * ldq, xs + j);
    }
    sync.barrier();  // every row rounded before it is packed
    pack_a_i16(xq, ldq, m, n_in, ap);
    sync.barrier();                 // every panel packed before any is read
    thread_local AlignedFloats bp;  // this thread's packed B block, int32 pairs
    bp.reserve(size_t(NC * KC / 2));
    auto* const b32 = reinterpret_cast<int32_t*>(bp.p);
#pragma omp for schedule(dynamic, 1) nowait
    for (int64_t job = 0; job < n_blocks; ++job) {
      int i = 0;
      while (job >= first_block[i + 1]) ++i;
      const Weight& w = ws[i];
      const auto* wd = static_cast<const int8_t*>(w.data);
      const int64_t n_out = w.n_out;
      float* y = ys[i];
      const int64_t n0 = (job - first_block[i]) * NC, nc = std::min(NC, n_out - n0);
      for (int64_t k0 = 0; k0 < n_in; k0 += KC) {
        const int64_t kc = std::min(KC, n_in - k0), kcp = (kc + 1) / 2;
        if (l2_prefetch && !w.rows4)
          pack_b_i16<true>(wd, n_in, n_out, n0, nc, k0, kc, b32, false);
        else
          pack_b_i16<false>(wd, n_in, n_out, n0, nc, k0, kc, b32, w.rows4);
        for (int64_t jr = 0; jr < nc; jr += NR) {
          const int32_t* b = b32 + (jr / NR) * kcp * NR;
          const int nr = int(std::min<int64_t>(NR, nc - jr));
          for (int64_t ir = 0; ir < panels; ++ir) {
            const int mr = int(std::min<int64_t>(MR, m - ir * MR));
            micro_kernel_i16(ap + (k0 / 2) * mp + ir * kcp * MR, b, kcp, xs + ir * MR,
                             w.scales + n0 + jr, y + ir * MR * n_out + n0 + jr, n_out, mr, nr,
                             k0 > 0);
          }
        }
      }
    }
    sync.done();
  }
  sync.finish();
}

}  // namespace

void gemm_group_avx512(const Weight* ws, int n, const float* x, int64_t m, float* const* ys) {
  static const bool vnni = __builtin_cpu_supports("avx512vnni");
  for (int j = 0; j < n; j += kMatmulGroupMax) {
    const int nj = std::min(kMatmulGroupMax, n - j);
    if (ws[j].type == WType::f16) {
      if (!amx_f16_active() || !gemm_f16_amx(ws + j, nj, x, m, ys + j))
        gemm_t<uint16_t>(ws + j, nj, x, m, ys + j);
    } else if (amx_int8_active() && ws[j].n_in <= kAmxMaxIn)
      gemm_i8_amx(ws + j, nj, x, m, ys + j, ws[j].type == WType::i8a8);
    else if (vnni)
      gemm_i8_vnni(ws + j, nj, x, m, ys + j, ws[j].type == WType::i8a8);
    else
      gemm_t<int8_t>(ws + j, nj, x, m, ys + j);
  }
}

}  // namespace latprof::cpu::detail
