// AMX INT8 GEMM for prefill: y[m, n_out] = x[m, n_in] · Wᵀ for INT8 weights on the tile unit
// (AMX-TILE and AMX-INT8: Intel Xeon since Sapphire Rapids), from the AVX512-VNNI GEMM's
// rounded activations (gemm_avx512.cpp), in int32 sums over all of n_in.
//
// W8A8 (i8a8): each activation row rounded to int8 (round_i8); tdpbssd multiplies int8 by int8,
// exact. W8A16 (i8): rows rounded to int16 (quantize_activations_i16, step max|x| / 32767). The
// tiles have no int16 products, so each q is split as q = 256 * hi + lo, hi = q >> 8 (int8) and
// lo = q & 255 (uint8): q·w = 256 * (hi·w) + lo·w, hi by tdpbssd and lo by tdpbusd, two tile
// products where the VNNI GEMM spends one vpdpwssd lane. hi·w and lo·w are each exact in int32
// up to n_in = kAmxMaxIn; 256 * hi·w + lo·w is formed once in fp32 (one rounding more than the
// VNNI GEMM's exact sums of 256-wide slices).
//
// Tiles are 16 rows of 64 bytes. A C block is 16 rows x 32 columns: tiles 0-1 (hi or int8 sums)
// and 2-3 (lo sums), A in 4 (hi) and 5 (lo), B in 6-7 (16 k-quads x 16 columns, quad-major, as
// the tile products read B). A job is NC = 256 output columns and a span of row blocks of
// kPanelsPerJob row panels (AmxJobs): it packs its block of W for all of k once (128 KB a KC =
// 512 slice, in the thread's buffer), then per row block and slice, for each pair of B tile
// columns (16 KB a slice, L1) walks the block's row panels of A, which tileloadd reads straight
// from the rounded rows (ldq bytes apart: no packing), each block's sums loaded from and stored
// back to the row block's int32 scratch (tiles, not the fp32 output: 16 x 32 fp32 rows of y,
// n_out apart, read and written back each slice took a third of the time). y is written once per
// row block.
#include <immintrin.h>
#include <omp.h>

#include <algorithm>

#include "kernels/cpu/amx_tiles_avx512.hpp"
#include "kernels/cpu/internal.hpp"
#include "kernels/cpu/transpose_avx512.hpp"

// GCC 12 reports _mm512_undefined_*() inside the intrinsics headers as uninitialised (a known
// false positive once the intrinsics are inlined).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace latprof::cpu::detail {
namespace {

constexpr int64_t NR = 32;  // output columns of a C block: two tiles
constexpr int64_t KC = 512, NC = 256;
static_assert(kAmxMaxIn * 255 * 127 < (int64_t(1) << 31), "lo·w must stay exact in int32");
constexpr int64_t kPanelsPerJob = 16;  // row panels of a job: its int32 sums 512 KB (W8A16)
static_assert(KC % kTileBytes == 0 && NC % NR == 0);

// W rows [n0, n0 + nc) x columns [k0, k0 + kc) as B tiles: tile (j / 16, s) at
// dst + ((j / 16) * steps + s) * kTile, its row q holding columns n0 + j .. + 15's four weights
// k0 + 64 s + 4 q .. + 3 each (16 x 16 dwords transposed). Zero past n_in; columns are packed
// in whole tiles (rows past n_out zero).
void pack_b(const Weight& w, int64_t n0, int64_t nc, int64_t k0, int64_t kc, int8_t* dst) {
  const auto* wd = static_cast<const int8_t*>(w.data);
  const int64_t steps = (kc + kTileBytes - 1) / kTileBytes;
  for (int64_t j0 = 0; j0 < nc; j0 += 16)
    for (int64_t s = 0; s < steps; ++s) {
      const int64_t k = k0 + s * kTileBytes, kn = std::min(kTileBytes, w.n_in - k);
      const __mmask64 km = kn >= 64 ? ~__mmask64(0) : (__mmask64(1) << kn) - 1;
      __m512 r[16];
      for (int i = 0; i < 16; ++i) {
        const int64_t n = n0 + j0 + i;
        r[i] = n < w.n_out ? _mm512_castsi512_ps(_mm512_maskz_loadu_epi8(
                                 km, wd + i8_offset(w.rows4, w.n_out, w.n_in, n, k)))
                           : _mm512_setzero_ps();
      }
      transpose16(r);  // r[q] lane i = column j0 + i's quad q
      int8_t* t = dst + ((j0 / 16) * steps + s) * kTile;
      for (int q = 0; q < 16; ++q)
        _mm512_store_ps(reinterpret_cast<float*>(t + q * kTileBytes), r[q]);
    }
}

// Activation row x[0, n_in) rounded: W8A16 as hi (int8) and lo (uint8) bytes of its int16 q,
// W8A8 as int8 in hi; both zero from n_in to ldq. q16: ldq int16 of scratch.
void round_row(const float* x, int64_t n_in, int64_t ldq, bool a8, int16_t* q16, int8_t* hi,
               uint8_t* lo, float* s) {
  if (a8)
    quantize_row_i8_as_i16(x, n_in, ldq, q16, s);
  else
    quantize_activations_i16(x, 1, n_in, ldq, q16, s);
  const __m512i low_byte = _mm512_set1_epi16(0xff);
  for (int64_t k = 0; k < ldq; k += 32) {
    const __m512i q = _mm512_load_si512(q16 + k);
    if (a8) {
      _mm256_store_si256(reinterpret_cast<__m256i*>(hi + k), _mm512_cvtepi16_epi8(q));
    } else {
      _mm256_store_si256(reinterpret_cast<__m256i*>(hi + k),
                         _mm512_cvtepi16_epi8(_mm512_srai_epi16(q, 8)));
      _mm256_store_si256(reinterpret_cast<__m256i*>(lo + k),
                         _mm512_cvtepi16_epi8(_mm512_and_si512(q, low_byte)));
    }
  }
}

// One C block: rows [r0, r0 + 16) of A (hi, lo: ldq apart) times the B tiles b0 (and b1 when
// two) over `steps` k steps from byte k0 of the rows, added to the int32 sums in c (four 16 x 16
// tiles: hi / int8 columns 0-15, 16-31, lo columns 0-15, 16-31), which start at zero when first.
template <bool kLo>
void tile_block(const int8_t* hi, const uint8_t* lo, int64_t ldq, const int8_t* b0,
                const int8_t* b1, bool two, int64_t steps, int32_t* c, bool first) {
  if (first) {
    _tile_zero(0);
    _tile_zero(1);
    if constexpr (kLo) {
      _tile_zero(2);
      _tile_zero(3);
    }
  } else {
    _tile_loadd(0, c, kTileBytes);
    if (two) _tile_loadd(1, c + 256, kTileBytes);
    if constexpr (kLo) {
      _tile_loadd(2, c + 512, kTileBytes);
      if (two) _tile_loadd(3, c + 768, kTileBytes);
    }
  }
  for (int64_t s = 0; s < steps; ++s) {
    _tile_loadd(4, hi + s * kTileBytes, ldq);
    _tile_loadd(6, b0 + s * kTile, kTileBytes);
    _tile_dpbssd(0, 4, 6);
    if constexpr (kLo) {
      _tile_loadd(5, lo + s * kTileBytes, ldq);
      _tile_dpbusd(2, 5, 6);
    }
    if (two) {
      _tile_loadd(7, b1 + s * kTile, kTileBytes);
      _tile_dpbssd(1, 4, 7);
      if constexpr (kLo) _tile_dpbusd(3, 5, 7);
    }
  }
  _tile_stored(0, c, kTileBytes);
  if (two) _tile_stored(1, c + 256, kTileBytes);
  if constexpr (kLo) {
    _tile_stored(2, c + 512, kTileBytes);
    if (two) _tile_stored(3, c + 768, kTileBytes);
  }
}

// y rows [0, mr) of the block (ldy apart) = the block's sums * sa[r] * sw[n], columns [0, nr).
// W8A16 (lo): 256 * hi + lo in fp32 (hi·w <= n_in * 128 * 127 and lo·w <= n_in * 255 * 127 each
// exact in int32; their fp32 sum rounds once more).
void store_block(const int32_t* c, bool lo, const float* sa, const float* sw, float* y, int64_t ldy,
                 int mr, int nr) {
  const __mmask16 m0 = nr >= 16 ? __mmask16(0xffff) : __mmask16((1u << nr) - 1);
  const __mmask16 m1 = nr >= 32   ? __mmask16(0xffff)
                       : nr <= 16 ? 0
                                  : __mmask16((1u << (nr - 16)) - 1);
  const __m512 sw0 = _mm512_maskz_loadu_ps(m0, sw), sw1 = _mm512_maskz_loadu_ps(m1, sw + 16);
  const __m512 k256 = _mm512_set1_ps(256.0f);
  for (int r = 0; r < mr; ++r) {
    // The second tile's sums exist only for nr > 16 (tile_block stores them then).
    __m512 f0 = _mm512_cvtepi32_ps(_mm512_load_si512(c + r * 16));
    __m512 f1 = m1 ? _mm512_cvtepi32_ps(_mm512_load_si512(c + 256 + r * 16)) : _mm512_setzero_ps();
    if (lo) {
      f0 = _mm512_fmadd_ps(f0, k256, _mm512_cvtepi32_ps(_mm512_load_si512(c + 512 + r * 16)));
      if (m1)
        f1 = _mm512_fmadd_ps(f1, k256, _mm512_cvtepi32_ps(_mm512_load_si512(c + 768 + r * 16)));
    }
    const __m512 s = _mm512_set1_ps(sa[r]);
    _mm512_mask_storeu_ps(y + r * ldy, m0, _mm512_mul_ps(f0, _mm512_mul_ps(sw0, s)));
    _mm512_mask_storeu_ps(y + r * ldy + 16, m1, _mm512_mul_ps(f1, _mm512_mul_ps(sw1, s)));
  }
}

}  // namespace

void gemm_i8_amx(const Weight* ws, int n, const float* x, int64_t m, float* const* ys, bool a8) {
  // Rows an odd number of 64-byte lines apart: 4 KB apart (n_in 4,096), the 16 rows of an A tile
  // fell in one L1 set.
  const int64_t n_in = ws[0].n_in, ldq = ((n_in + kTileBytes - 1) / kTileBytes | 1) * kTileBytes;
  const int64_t panels = (m + kTileRows - 1) / kTileRows, mp = panels * kTileRows;
  // Kept between calls by the calling thread, as the other GEMMs' (floats as byte storage).
  thread_local AlignedFloats hi_cache, lo_cache, xs_cache;
  hi_cache.reserve(size_t(mp * ldq / 4));
  if (!a8) lo_cache.reserve(size_t(mp * ldq / 4));
  xs_cache.reserve(size_t(mp));
  auto* const hi = reinterpret_cast<int8_t*>(hi_cache.p);
  auto* const lo = a8 ? nullptr : reinterpret_cast<uint8_t*>(lo_cache.p);
  float* const xs = xs_cache.p;
  const int64_t row_blocks = (panels + kPanelsPerJob - 1) / kPanelsPerJob;
  // Packed again per 256 rows, the weights took ~1/10 of a W8A8 GEMM at 500 rows (AmxJobs).
  const AmxJobs jobs(ws, n, NC, row_blocks, omp_get_max_threads());
  const int64_t slices = (n_in + KC - 1) / KC;
  SyncRegion sync;
#pragma omp parallel
  {
    sync.start();
    thread_local Aligned64<int16_t> q16;
    q16.reserve(size_t(ldq));
#pragma omp for schedule(static) nowait
    for (int64_t j = 0; j < mp; ++j) {
      if (j < m) {
        round_row(x + j * n_in, n_in, ldq, a8, q16.p, hi + j * ldq, a8 ? nullptr : lo + j * ldq,
                  xs + j);
      } else {  // the last panel's rows past m: zero, never stored
        std::fill(hi + j * ldq, hi + (j + 1) * ldq, int8_t(0));
        if (!a8) std::fill(lo + j * ldq, lo + (j + 1) * ldq, uint8_t(0));
        xs[j] = 0;
      }
    }
    sync.barrier();  // every row rounded before any is read
    configure_tiles();
    thread_local Aligned64<int8_t> bp;    // this thread's packed B block
    thread_local Aligned64<int32_t> acc;  // its C blocks' int32 sums, 4 tiles a block
    constexpr int64_t kPairs = NC / NR;
    bp.reserve(size_t(NC * KC * (jobs.whole ? slices : 1)));
    acc.reserve(size_t(kPanelsPerJob * kPairs * 4 * 256));
#pragma omp for schedule(dynamic, 1) nowait
    for (int64_t job = 0; job < jobs.n_jobs; ++job) {
      const AmxJobs::Job jb = jobs.at(job);
      const int i = jb.w;
      const Weight& w = ws[i];
      const int64_t n_out = w.n_out, n0 = jb.n0, nc = jb.nc;
      for (int64_t k0 = 0; k0 < n_in && jobs.whole; k0 += KC)
        pack_b(w, n0, nc, k0, std::min(KC, n_in - k0), bp.p + k0 / KC * (NC * KC));
      for (int64_t rb = jb.rb0; rb < jb.rb1; ++rb) {
        const int64_t p0 = rb * kPanelsPerJob, p1 = std::min(panels, p0 + kPanelsPerJob);
        auto block = [&](int64_t ir, int64_t jr) {
          return acc.p + ((ir - p0) * kPairs + jr / NR) * 1024;
        };
        for (int64_t k0 = 0; k0 < n_in; k0 += KC) {
          const int64_t kc = std::min(KC, n_in - k0), steps = (kc + kTileBytes - 1) / kTileBytes;
          if (!jobs.whole) pack_b(w, n0, nc, k0, kc, bp.p);
          const int8_t* bs = jobs.whole ? bp.p + k0 / KC * (NC * KC) : bp.p;
          for (int64_t jr = 0; jr < nc; jr += NR) {
            const int8_t* b0 = bs + (jr / 16) * steps * kTile;
            const int8_t* b1 = b0 + steps * kTile;  // packed only when nc - jr > 16
            const bool two = nc - jr > 16;
            for (int64_t ir = p0; ir < p1; ++ir) {
              const int64_t r0 = ir * kTileRows;
              if (a8)
                tile_block<false>(hi + r0 * ldq + k0, nullptr, ldq, b0, b1, two, steps,
                                  block(ir, jr), k0 == 0);
              else
                tile_block<true>(hi + r0 * ldq + k0, lo + r0 * ldq + k0, ldq, b0, b1, two, steps,
                                 block(ir, jr), k0 == 0);
            }
          }
        }
        for (int64_t jr = 0; jr < nc; jr += NR)
          for (int64_t ir = p0; ir < p1; ++ir) {
            const int64_t r0 = ir * kTileRows;
            store_block(block(ir, jr), !a8, xs + r0, w.scales + n0 + jr,
                        ys[i] + r0 * n_out + n0 + jr, n_out, int(std::min(kTileRows, m - r0)),
                        int(std::min(NR, nc - jr)));
          }
      }
    }
    _tile_release();
    sync.done();
  }
  sync.finish();
}

}  // namespace latprof::cpu::detail
