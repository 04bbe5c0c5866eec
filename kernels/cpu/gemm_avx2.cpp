// AVX2 blocked GEMM: the scheme of gemm_avx512.cpp with 8-wide vectors. Micro-kernel 6 x 16:
// 12 ymm accumulators + 2 B vectors + 1 broadcast (15 of 16 registers). W is converted once per
// KC x NC block into k-major 16-wide micro-panels with an in-register 8x8 transpose. The packed x
// is walked in row blocks of kMcPanels panels, each kept in L2 while every W micro-panel of the
// block passes over it (the loops of BLIS's Goto scheme).
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cstdlib>
#include <new>
#include <vector>

#include "core/half.hpp"
#include "kernels/cpu/internal.hpp"
#include "kernels/cpu/math_avx2.hpp"

namespace latprof::cpu::detail {
namespace {

constexpr int MR = 6, NR = 16;
constexpr int64_t KC = 256, NC = 256;
// 72 rows: 72 KB of packed x a k slice, in L2 (512 KB on AMD Zen 3) beside the 256 KB W block.
// Walked whole for each W micro-panel instead, x (512 KB at 500 rows) came from L3.
constexpr int64_t kMcPanels = 12;

struct Aligned {
  float* p = nullptr;
  explicit Aligned(size_t n) {
    p = static_cast<float*>(std::aligned_alloc(64, (n * sizeof(float) + 63) / 64 * 64));
    if (!p) throw std::bad_alloc();
  }
  ~Aligned() { std::free(p); }
  Aligned(const Aligned&) = delete;
  Aligned& operator=(const Aligned&) = delete;
};

inline void transpose8(__m256 r[8]) {
  __m256 t[8], u[8];
  for (int i = 0; i < 4; ++i) {
    t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  for (int i = 0; i < 2; ++i) {
    u[4 * i + 0] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], 0x44);
    u[4 * i + 1] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], 0xee);
    u[4 * i + 2] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0x44);
    u[4 * i + 3] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0xee);
  }
  for (int c = 0; c < 4; ++c) {
    r[c] = _mm256_permute2f128_ps(u[c], u[4 + c], 0x20);
    r[4 + c] = _mm256_permute2f128_ps(u[c], u[4 + c], 0x31);
  }
}

inline float to_f(uint16_t v) {
  return half_to_float(v);
}
inline float to_f(int8_t v) {
  return float(v);
}

// dst[(j / NR) * kc * NR + k * NR + j % NR] = W[n0 + j][k0 + k] * scale (zero beyond n_out).
template <class T>
void pack_b(const T* w, const float* scales, int64_t n_in, int64_t n_out, int64_t n0, int64_t nc,
            int64_t k0, int64_t kc, float* dst) {
  for (int64_t j0 = 0; j0 < nc; j0 += 8) {
    float* panel = dst + (j0 / NR) * kc * NR + (j0 % NR);
    int64_t k = 0;
    for (; k + 8 <= kc; k += 8) {
      __m256 r[8];
      for (int i = 0; i < 8; ++i) {
        const int64_t n = n0 + j0 + i;
        r[i] = n < n_out ? _mm256_mul_ps(load8(w + n * n_in + k0 + k),
                                         _mm256_set1_ps(scales ? scales[n] : 1.0f))
                         : _mm256_setzero_ps();
      }
      transpose8(r);
      for (int kk = 0; kk < 8; ++kk) _mm256_store_ps(panel + (k + kk) * NR, r[kk]);
    }
    for (; k < kc; ++k)
      for (int i = 0; i < 8; ++i) {
        const int64_t n = n0 + j0 + i;
        panel[k * NR + i] =
            n < n_out ? to_f(w[n * n_in + k0 + k]) * (scales ? scales[n] : 1.0f) : 0.0f;
      }
  }
}

void pack_a(const float* x, int64_t m, int64_t n_in, float* dst) {
  const int64_t panels = (m + MR - 1) / MR, mp = panels * MR;
  const int64_t slices = (n_in + KC - 1) / KC;
#pragma omp for schedule(static) nowait
  for (int64_t job = 0; job < slices * panels; ++job) {
    const int64_t s = job / panels, ir = job % panels;
    const int64_t k0 = s * KC, kc = std::min(KC, n_in - k0);
    float* p = dst + k0 * mp + ir * kc * MR;
    for (int r = 0; r < MR; ++r) {
      const int64_t row = ir * MR + r;
      for (int64_t k = 0; k < kc; ++k) p[k * MR + r] = row < m ? x[row * n_in + k0 + k] : 0.0f;
    }
  }
}

void micro_kernel(const float* a, const float* b, int64_t kc, float* c, int64_t ldc, int mr, int nr,
                  bool accumulate) {
  // The C tile read at the end: fetched now, so that its misses overlap the multiply-adds.
  if (accumulate)
    for (int r = 0; r < mr; ++r) {
      _mm_prefetch(reinterpret_cast<const char*>(c + r * ldc), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(c + r * ldc + NR - 1), _MM_HINT_T0);
    }
  __m256 acc[MR][2];
#pragma GCC unroll 6
  for (int r = 0; r < MR; ++r) {
    acc[r][0] = _mm256_setzero_ps();
    acc[r][1] = _mm256_setzero_ps();
  }
  // kc >= 1, in a loop GCC can see runs: with `for`, GCC 12 kept the accumulators on the stack
  // and stored all 12 every step (12 stores a step against 6 cycles of multiply-adds).
  int64_t k = 0;
  do {
    const __m256 b0 = _mm256_load_ps(b + k * NR), b1 = _mm256_load_ps(b + k * NR + 8);
#pragma GCC unroll 6
    for (int r = 0; r < MR; ++r) {
      const __m256 av = _mm256_broadcast_ss(a + k * MR + r);
      acc[r][0] = _mm256_fmadd_ps(av, b0, acc[r][0]);
      acc[r][1] = _mm256_fmadd_ps(av, b1, acc[r][1]);
    }
  } while (++k < kc);
  if (mr == MR && nr == NR) {
    for (int r = 0; r < MR; ++r) {
      float* cr = c + r * ldc;
      __m256 v0 = acc[r][0], v1 = acc[r][1];
      if (accumulate) {
        v0 = _mm256_add_ps(v0, _mm256_loadu_ps(cr));
        v1 = _mm256_add_ps(v1, _mm256_loadu_ps(cr + 8));
      }
      _mm256_storeu_ps(cr, v0);
      _mm256_storeu_ps(cr + 8, v1);
    }
    return;
  }
  alignas(32) float tile[MR][NR];  // edge tile: only the valid part goes to C
  for (int r = 0; r < MR; ++r) {
    _mm256_store_ps(tile[r], acc[r][0]);
    _mm256_store_ps(tile[r] + 8, acc[r][1]);
  }
  for (int r = 0; r < mr; ++r)
    for (int j = 0; j < nr; ++j) c[r * ldc + j] = tile[r][j] + (accumulate ? c[r * ldc + j] : 0.0f);
}

// Columns [n0, n0 + nc) of y = x W^T for one weight, its k slices in turn (ap: x packed).
template <class T>
void column_block(const Weight& w, const float* ap, int64_t m, int64_t n0, float* y, float* bp) {
  const T* wd = static_cast<const T*>(w.data);
  const float* scales = int8_storage(w.type) ? w.scales : nullptr;
  const int64_t n_in = w.n_in, n_out = w.n_out, nc = std::min(NC, n_out - n0);
  const int64_t panels = (m + MR - 1) / MR, mp = panels * MR;
  for (int64_t k0 = 0; k0 < n_in; k0 += KC) {
    const int64_t kc = std::min(KC, n_in - k0);
    pack_b(wd, scales, n_in, n_out, n0, nc, k0, kc, bp);
    for (int64_t ib = 0; ib < panels; ib += kMcPanels) {
      const int64_t ie = std::min(panels, ib + kMcPanels);
      for (int64_t jr = 0; jr < nc; jr += NR) {
        const float* b = bp + (jr / NR) * kc * NR;
        const int nr = int(std::min<int64_t>(NR, nc - jr));
        for (int64_t ir = ib; ir < ie; ++ir) {
          const int mr = int(std::min<int64_t>(MR, m - ir * MR));
          micro_kernel(ap + k0 * mp + ir * kc * MR, b, kc, y + ir * MR * n_out + n0 + jr, n_out, mr,
                       nr, k0 > 0);
        }
      }
    }
  }
}

}  // namespace

void gemm_group_avx2(const Weight* ws, int n, const float* x, int64_t m, float* const* ys) {
  const int64_t n_in = ws[0].n_in;
  const int64_t panels = (m + MR - 1) / MR, mp = panels * MR;
  Aligned ap(size_t(mp * n_in));
  // The column blocks of every weight, one job each: one packing of x serves them all, and the
  // threads share the group's blocks (tinyllama-1.1b's K and V, 256 columns each, are one block
  // apiece: alone, each left a thread idle).
  std::vector<int64_t> first(size_t(n) + 1, 0);  // weight i's jobs: [first[i], first[i + 1])
  for (int i = 0; i < n; ++i) first[size_t(i) + 1] = first[size_t(i)] + (ws[i].n_out + NC - 1) / NC;
  SyncRegion sync;
#pragma omp parallel
  {
    sync.start();
    pack_a(x, m, n_in, ap.p);  // omp for nowait inside
    sync.barrier();            // every panel packed before any is read
    Aligned bp(size_t(NC * KC));
#pragma omp for schedule(dynamic, 1) nowait
    for (int64_t job = 0; job < first[size_t(n)]; ++job) {
      const int i = int(std::upper_bound(first.begin(), first.end(), job) - first.begin()) - 1;
      const int64_t n0 = (job - first[size_t(i)]) * NC;
      if (ws[i].type == WType::f16)
        column_block<uint16_t>(ws[i], ap.p, m, n0, ys[i], bp.p);
      else
        column_block<int8_t>(ws[i], ap.p, m, n0, ys[i], bp.p);
    }
    sync.done();
  }
  sync.finish();
}

}  // namespace latprof::cpu::detail
