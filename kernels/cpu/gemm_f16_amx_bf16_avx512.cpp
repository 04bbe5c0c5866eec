// AMX FP16 GEMM for prefill: y[m, n_out] = x[m, n_in] · Wᵀ for FP16 weights on the AMX-BF16
// tile unit (Intel Xeon since Sapphire Rapids), with the FP16 path's arithmetic: FP16 weights
// times activations rounded to FP16 (gemm.cpp rounds them), exact products summed in FP32.
//
// The tiles multiply bf16 (8 significant bits), not fp16 (11). Every fp16 value v is the exact sum
// of two bf16: hi = v rounded to bf16 (vcvtne2ps2bf16), lo = v - hi (at most 3 significant bits,
// exact). So x·w = xh·wh + xh·wl + xl·wl + xl·wh, four tile products (tdpbf16ps) whose products
// are each exact in FP32 (8 x 8 bits) and summed in FP32 by the tiles into one C tile: the same
// products as the FMA GEMM's, summed in another order. A row that is not fp16 (gemm.cpp leaves a
// row with an element beyond +-65504, or not finite, in fp32) does not split exactly: then
// gemm_f16_amx returns false before it writes y, and the caller runs the FMA GEMM.
//
// Tiles are 16 rows of 64 bytes (amx_tiles_avx512.hpp): an A tile is 16 rows x 32 k of bf16, a
// B tile 16 k-pairs x 16 columns (pair-major, as tdpbf16ps reads B), a C tile 16 x 16 fp32. A C
// block is 32 rows x 32 columns, tiles 0-3; A in 4-5 (two row panels), B in 6-7 (two column
// tiles). Per 32 k the block takes its four products in the order hh, hl, ll, lh, so that each
// step reloads only one side: 10 tile loads a 16 tile products. A job is NC = 256 output columns
// and a span of row blocks of kPanelsPerJob row panels: it packs its block of W for all of k once
// (hi and lo tiles, 1 MB a KC = 1,024 slice, in the thread's buffer), then per row block and
// slice, for each pair of column tiles (128 KB, L2) walks the block's pairs of row panels; the
// activations are split once per GEMM straight into tiles (each 1 KB tile contiguous, a panel's
// steps in k order); each block's sums are loaded from and stored back to the row block's fp32
// scratch and written to y once.
//
// A C block's tiles are stored and reloaded once a slice: the store waits for the block's last
// products and the next block's first wait for its loads, so the tile unit idles at each block's
// end. At slices of 256 (8 steps a block), a single-thread loop over a row block ran 1.47x as
// fast without the stores and loads. Slices of 1,024 with the tiled activations: 0.81-0.86x the
// GEMM's time (the split's rows 8 KB apart, each tile row on its own 4 KB page, at slices of
// 1,024: 0.87x the tiled form's speed in a single-thread loop; the next block's sums prefetched
// into L1: level). reports/cpu-kernels.md.
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <atomic>

#include "kernels/cpu/amx_tiles_avx512.hpp"
#include "kernels/cpu/bf16_split_avx512.hpp"
#include "kernels/cpu/internal.hpp"
#include "kernels/cpu/transpose_avx512.hpp"

// GCC 12 reports _mm512_undefined_*() inside the intrinsics headers as uninitialised (a known
// false positive once the intrinsics are inlined).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace latprof::cpu::detail {
namespace {

constexpr int64_t NR = 32;      // output columns of a C block: two tiles
constexpr int64_t kStepK = 32;  // k of one tile product (16 bf16 pairs)
constexpr int64_t KC = 1024, NC = 256;
constexpr int64_t kAStep = 2 * kTile;  // an A panel's split tiles: hi and lo of a step
constexpr int64_t kPanelsPerJob = 16;  // row panels of a job (even): its fp32 sums 256 KB
static_assert(KC % kStepK == 0 && NC % NR == 0 && kPanelsPerJob % 2 == 0);

// W rows [n0, n0 + nc) x columns [k0, k0 + kc) as B tiles: tile pair (j / 16, s) at
// dst + ((j / 16) * steps + s) * 2 * kTile bytes, hi then lo, row q of each holding columns
// n0 + j .. + 15's bf16 pair k0 + 32 s + 2 q, + 1 (16 x 16 dwords transposed). Zero past n_in and
// past n_out (columns are packed in whole tiles).
void pack_b(const Weight& w, int64_t n0, int64_t nc, int64_t k0, int64_t kc, uint8_t* dst) {
  const auto* wd = static_cast<const uint16_t*>(w.data);
  const int64_t steps = (kc + kStepK - 1) / kStepK;
  for (int64_t j0 = 0; j0 < (nc + 15) / 16 * 16; j0 += 16)
    for (int64_t s = 0; s < steps; ++s) {
      const int64_t k = k0 + s * kStepK, kn = std::min(kStepK, w.n_in - k);
      const __mmask32 km = kn >= 32 ? ~__mmask32(0) : (__mmask32(1) << kn) - 1;
      // The fp16 pairs are transposed as dwords once, then each row of pairs is split: one
      // transpose, not one for hi and one for lo.
      __m512 r[16];
      for (int i = 0; i < 16; ++i) {
        const int64_t n = n0 + j0 + i;
        if (n >= w.n_out) {
          r[i] = _mm512_setzero_ps();
          continue;
        }
        if (s + 1 < steps) __builtin_prefetch(wd + n * w.n_in + k + kStepK, 0, 3);
        r[i] = _mm512_castsi512_ps(_mm512_maskz_loadu_epi16(km, wd + n * w.n_in + k));
      }
      transpose16(r);  // r[q] lane i = column j0 + i's fp16 pair q
      uint8_t* t = dst + ((j0 / 16) * steps + s) * 2 * kTile;
      for (int q = 0; q < 16; ++q) {
        const __m512i v = _mm512_castps_si512(r[q]);
        __m512i hi, lo;
        split<false>(_mm512_cvtph_ps(_mm512_castsi512_si256(v)),
                     _mm512_cvtph_ps(_mm512_extracti64x4_epi64(v, 1)), hi, lo);
        _mm512_store_si512(t + q * kTileBytes, hi);
        _mm512_store_si512(t + kTile + q * kTileBytes, lo);
      }
    }
}

// One C block: rows [r0, r0 + 32) of A, the split tiles of their two row panels from `a` (hi
// tile of step s at a + s * kAStep, lo 1 KB on; the second panel a1 bytes on)
// times the B tile pairs b0, b1 over `steps` k steps, added to the fp32 sums in c (four 16 x 16
// tiles: rows 0-15 x columns 0-15, 0-15 x 16-31, 16-31 x 0-15, 16-31 x 16-31), which start at
// zero when first.
void tile_block(const uint8_t* a, int64_t a1, const uint8_t* b0, const uint8_t* b1, int64_t steps,
                float* c, bool first) {
  if (first) {
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
  } else {
    _tile_loadd(0, c, kTileBytes);
    _tile_loadd(1, c + 256, kTileBytes);
    _tile_loadd(2, c + 512, kTileBytes);
    _tile_loadd(3, c + 768, kTileBytes);
  }
  const uint8_t* const hi = a;
  const uint8_t* const lo = a + kTile;
  // Each A or B tile is reloaded right after its last product of a phase and used again a product
  // or two later (tiles are not renamed: a load waits for the products that read the tile before
  // it). Reloaded just before their next use instead, and with the weights' split checked as the
  // activations' is, the GEMM took ~1.1x the time (BM_GemmAmx, reports/cpu-kernels.md).
  _tile_loadd(4, hi, kTileBytes);
  _tile_loadd(5, hi + a1, kTileBytes);
  _tile_loadd(6, b0, kTileBytes);
  _tile_loadd(7, b1, kTileBytes);
  for (int64_t s = 0; s < steps; ++s) {
    const int64_t ka = s * kAStep, kb = s * 2 * kTile;
    const bool more = s + 1 < steps;
    // x hi, w hi
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(2, 5, 6);
    _tile_loadd(6, b0 + kb + kTile, kTileBytes);  // w lo
    _tile_dpbf16ps(1, 4, 7);
    _tile_dpbf16ps(3, 5, 7);
    _tile_loadd(7, b1 + kb + kTile, kTileBytes);
    // x hi, w lo
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    _tile_loadd(4, lo + ka, kTileBytes);  // x lo
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
    _tile_loadd(5, lo + a1 + ka, kTileBytes);
    // x lo, w lo
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(2, 5, 6);
    _tile_loadd(6, b0 + kb, kTileBytes);  // w hi
    _tile_dpbf16ps(1, 4, 7);
    _tile_dpbf16ps(3, 5, 7);
    _tile_loadd(7, b1 + kb, kTileBytes);
    // x lo, w hi; then the next step's x hi and w hi
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    if (more) _tile_loadd(4, hi + ka + kAStep, kTileBytes);
    _tile_dpbf16ps(2, 5, 6);
    if (more) _tile_loadd(6, b0 + kb + 2 * kTile, kTileBytes);
    _tile_dpbf16ps(3, 5, 7);
    if (more) {
      _tile_loadd(5, hi + a1 + ka + kAStep, kTileBytes);
      _tile_loadd(7, b1 + kb + 2 * kTile, kTileBytes);
    }
  }
  _tile_stored(0, c, kTileBytes);
  _tile_stored(1, c + 256, kTileBytes);
  _tile_stored(2, c + 512, kTileBytes);
  _tile_stored(3, c + 768, kTileBytes);
}

// y rows [0, mr) x columns [0, nr) of a block (ldy apart) from its four tiles' sums.
void store_block(const float* c, float* y, int64_t ldy, int mr, int nr) {
  const __mmask16 m0 = nr >= 16 ? __mmask16(0xffff) : __mmask16((1u << nr) - 1);
  const __mmask16 m1 = nr >= 32   ? __mmask16(0xffff)
                       : nr <= 16 ? 0
                                  : __mmask16((1u << (nr - 16)) - 1);
  for (int r = 0; r < mr; ++r) {
    const float* t = c + (r / 16) * 512 + (r % 16) * 16;
    _mm512_mask_storeu_ps(y + r * ldy, m0, _mm512_load_ps(t));
    _mm512_mask_storeu_ps(y + r * ldy + 16, m1, _mm512_load_ps(t + 256));
  }
}

}  // namespace

bool gemm_f16_amx(const Weight* ws, int n, const float* x, int64_t m, float* const* ys) {
  const int64_t n_in = ws[0].n_in;
  const int64_t ksteps = (n_in + kStepK - 1) / kStepK, panel_bytes = ksteps * kAStep;
  // Row panels in pairs: the rows past m are zero and never stored.
  const int64_t panels = (m + 2 * kTileRows - 1) / (2 * kTileRows) * 2, mp = panels * kTileRows;
  // The activations split into tiles: panel p's hi and lo tiles of step s at
  // (p * ksteps + s) * kAStep (floats as byte storage).
  thread_local AlignedFloats split_cache;
  split_cache.reserve(size_t(panels * panel_bytes / 4));
  auto* const at = reinterpret_cast<uint8_t*>(split_cache.p);
  const int64_t row_blocks = (panels + kPanelsPerJob - 1) / kPanelsPerJob;
  // Packed again per 256 rows, the weights' split was ~1/6 of the GEMM (4,096^2 at 2,000 rows
  // 0.94x the time packed once per span; AmxJobs).
  const AmxJobs jobs(ws, n, NC, row_blocks, omp_get_max_threads());
  const int64_t slices = (n_in + KC - 1) / KC;
  std::atomic<bool> inexact{false};
  SyncRegion sync;
#pragma omp parallel
  {
    sync.start();
#pragma omp for schedule(static) nowait
    for (int64_t j = 0; j < mp; ++j) {
      uint8_t* const aj = at + (j / kTileRows) * panel_bytes + (j % kTileRows) * kTileBytes;
      __mmask16 bad = 0;
      for (int64_t k = 0; k < ksteps * kStepK; k += kStepK) {
        const int64_t kn = j < m ? std::clamp<int64_t>(n_in - k, 0, kStepK) : 0;
        const __mmask16 m0 = kn >= 16 ? __mmask16(0xffff) : __mmask16((1u << kn) - 1);
        const __mmask16 m1 = kn >= 32   ? __mmask16(0xffff)
                             : kn <= 16 ? 0
                                        : __mmask16((1u << (kn - 16)) - 1);
        const float* xk = x + j * n_in + k;
        __m512i h, l;
        bad |= split<true>(_mm512_maskz_loadu_ps(m0, xk), _mm512_maskz_loadu_ps(m1, xk + 16), h, l);
        uint8_t* const t = aj + k / kStepK * kAStep;
        _mm512_store_si512(t, h);
        _mm512_store_si512(t + kTile, l);
      }
      if (bad) inexact.store(true, std::memory_order_relaxed);
    }
    sync.barrier();  // every row split (and checked) before any is read
    if (!inexact.load(std::memory_order_relaxed)) {
      configure_tiles();
      thread_local Aligned64<uint8_t> bp;  // this thread's packed B block, hi and lo tiles
      thread_local AlignedFloats acc;      // its C blocks' fp32 sums, 4 tiles a block
      constexpr int64_t kPairs = NC / NR;
      bp.reserve(size_t(NC * KC * 4 * (jobs.whole ? slices : 1)));
      acc.reserve(size_t(kPanelsPerJob / 2 * kPairs * 1024));
#pragma omp for schedule(dynamic, 1) nowait
      for (int64_t job = 0; job < jobs.n_jobs; ++job) {
        const AmxJobs::Job jb = jobs.at(job);
        const int i = jb.w;
        const Weight& w = ws[i];
        const int64_t n_out = w.n_out, n0 = jb.n0, nc = jb.nc;
        for (int64_t k0 = 0; k0 < n_in && jobs.whole; k0 += KC)
          pack_b(w, n0, (nc + NR - 1) / NR * NR, k0, std::min(KC, n_in - k0),
                 bp.p + k0 / KC * (NC * KC * 4));
        for (int64_t rb = jb.rb0; rb < jb.rb1; ++rb) {
          const int64_t p0 = rb * kPanelsPerJob, p1 = std::min(panels, p0 + kPanelsPerJob);
          auto block = [&](int64_t ir, int64_t jr) {
            return acc.p + ((ir - p0) / 2 * kPairs + jr / NR) * 1024;
          };
          for (int64_t k0 = 0; k0 < n_in; k0 += KC) {
            const int64_t kc = std::min(KC, n_in - k0), steps = (kc + kStepK - 1) / kStepK;
            if (!jobs.whole) pack_b(w, n0, (nc + NR - 1) / NR * NR, k0, kc, bp.p);
            const uint8_t* bs = jobs.whole ? bp.p + k0 / KC * (NC * KC * 4) : bp.p;
            for (int64_t jr = 0; jr < nc; jr += NR) {
              const uint8_t* b0 = bs + (jr / 16) * steps * 2 * kTile;
              const uint8_t* b1 = b0 + steps * 2 * kTile;
              for (int64_t ir = p0; ir < p1; ir += 2) {
                tile_block(at + ir * panel_bytes + k0 / kStepK * kAStep, panel_bytes, b0, b1, steps,
                           block(ir, jr), k0 == 0);
              }
            }
          }
          for (int64_t jr = 0; jr < nc; jr += NR)
            for (int64_t ir = p0; ir < p1; ir += 2) {
              const int64_t r0 = ir * kTileRows;
              if (r0 >= m) break;
              store_block(block(ir, jr), ys[i] + r0 * n_out + n0 + jr, n_out,
                          int(std::min(2 * kTileRows, m - r0)), int(std::min(NR, nc - jr)));
            }
        }
      }
      _tile_release();
    }
    sync.done();
  }
  sync.finish();
  return !inexact.load(std::memory_order_relaxed);
}

}  // namespace latprof::cpu::detail
