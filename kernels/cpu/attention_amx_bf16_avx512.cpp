// The AVX-512 prefill attention's tile on the AMX-BF16 tile unit (Intel Xeon since Sapphire
// Rapids), for an fp16 cache with hd a multiple of 32 (up to 256): attention_tile's online
// softmax over 64-key blocks, its two products on the tiles.
//
// Precision: the FMA path's. The tiles multiply bf16 exactly and sum in fp32; each fp32 operand
// (the scaled queries, the probabilities) is split into three bf16 (hi + mid + lo, exact) and
// each fp16 one (K, V) into two (bf16_split_avx512.hpp), and the five products of parts that
// matter are summed: hi·hi, hi·lo, mid·lo, mid·hi, lo·hi (lo·lo, 2^-27 of the product and below,
// is left out). So the scores and outputs carry fp32 sums of exact products, as the
// multiply-adds' do, in another order.
//
// Per tile of up to kAttnAmxRows = 512 query rows (tokens x heads of one kv group, padded to pairs
// of 16-row tiles) and 64-key block:
//   K's block as B tiles (dimension pairs x 16 keys: from a tiled16 cache each pair of 16-key runs
//   interleaved, from rows 16 keys' pairs transposed), hi and lo;
//   S = Q·Kᵀ in blocks of 32 rows x 32 keys (four C tiles; A: Q's parts, set up once a tile);
//   the online softmax per row over S's 64 columns (row-major: the row maxima and sums reduce
//   16 lanes, the rescale factors are computed 16 rows at a time), P split into A tiles;
//   V's block as B tiles (key pairs x 16 dimensions: two keys' rows interleaved), hi and lo;
//   O += P·V in blocks of 32 rows x 32 dimensions, O (fp32, rescaled by the softmax first) loaded
//   into the C tiles and stored back.
// A 32 x 32 block takes its 20 products a 32-element step with 12 tile loads (tile_block5); a
// pair of row tiles skips the keys none of its rows sees (the causal corner). The conversion of K
// and V is shared by the tile's rows: on the Intel Xeon of reports/cpu-kernels.md, one thread,
// tinyllama-1.1b's heads (512 tokens after 1,536), tiles of 64, 256 and 512 rows took 58.8, 46.7
// and 41.1 ms, the multiply-add tile 73 ms; the products run at about half the tile unit's
// rate, and the softmax (its exponentials and P's split) takes about a third of the time.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "kernels/cpu/amx_tiles_avx512.hpp"
#include "kernels/cpu/bf16_split_avx512.hpp"
#include "kernels/cpu/exp_avx512.hpp"
#include "kernels/cpu/internal.hpp"
#include "kernels/cpu/transpose_avx512.hpp"

// GCC 12 reports _mm512_undefined_*() inside the intrinsics headers as uninitialised (a known
// false positive once the intrinsics are inlined).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace latprof::cpu::detail {
namespace {

constexpr int kKeys = 64;  // keys per online-softmax step: two 32-key steps of P·V
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// One operand's split tiles (1 KB each): part p (0 hi, 1 mid, 2 lo; or hi, lo), tile i (a row
// tile of A, a column tile of B), step s (32 elements of the summed dimension) at
// base + p * part + i * tile + s * step bytes.
struct Tiles {
  uint8_t* base;
  int64_t part, tile, step;
  uint8_t* at(int p, int64_t i, int64_t s) const { return base + p * part + i * tile + s * step; }
};

// C tiles 0-3 (rows of A's tiles i, i + 1 by columns of B's tiles j, j + 1: 0 = (i, j),
// 1 = (i, j + 1), 2 = (i + 1, j), 3 = (i + 1, j + 1)) += A·B over steps [s0, s1), A in three parts
// and B in two, lo·lo left out. Each A or B tile is reloaded right after its last product of a
// phase (the tiles are not renamed), as the FP16 GEMM's tile_block does.
void tile_block5(const Tiles& A, int64_t i, const Tiles& B, int64_t j, int64_t s0, int64_t s1) {
  _tile_loadd(4, A.at(0, i, s0), kTileBytes);
  _tile_loadd(5, A.at(0, i + 1, s0), kTileBytes);
  _tile_loadd(6, B.at(0, j, s0), kTileBytes);
  _tile_loadd(7, B.at(0, j + 1, s0), kTileBytes);
  for (int64_t s = s0; s < s1; ++s) {
    const bool more = s + 1 < s1;
    // a hi, b hi
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(2, 5, 6);
    _tile_loadd(6, B.at(1, j, s), kTileBytes);
    _tile_dpbf16ps(1, 4, 7);
    _tile_dpbf16ps(3, 5, 7);
    _tile_loadd(7, B.at(1, j + 1, s), kTileBytes);
    // a hi, b lo
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    _tile_loadd(4, A.at(1, i, s), kTileBytes);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
    _tile_loadd(5, A.at(1, i + 1, s), kTileBytes);
    // a mid, b lo
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(2, 5, 6);
    _tile_loadd(6, B.at(0, j, s), kTileBytes);
    _tile_dpbf16ps(1, 4, 7);
    _tile_dpbf16ps(3, 5, 7);
    _tile_loadd(7, B.at(0, j + 1, s), kTileBytes);
    // a mid, b hi
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    _tile_loadd(4, A.at(2, i, s), kTileBytes);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
    _tile_loadd(5, A.at(2, i + 1, s), kTileBytes);
    // a lo, b hi; then the next step's a hi and b hi
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    if (more) _tile_loadd(4, A.at(0, i, s + 1), kTileBytes);
    _tile_dpbf16ps(2, 5, 6);
    if (more) _tile_loadd(6, B.at(0, j, s + 1), kTileBytes);
    _tile_dpbf16ps(3, 5, 7);
    if (more) {
      _tile_loadd(5, A.at(0, i + 1, s + 1), kTileBytes);
      _tile_loadd(7, B.at(0, j + 1, s + 1), kTileBytes);
    }
  }
}

// 32 fp32 values (f0: 0-15, f1: 16-31) split into three bf16 rows, row `row` of A tiles
// (tile, step) of parts hi, mid and lo.
inline void store_split3_row(const Tiles& t, int64_t tile, int64_t step, int64_t row, __m512 f0,
                             __m512 f1) {
  __m512i h, m, l;
  split3(f0, f1, h, m, l);
  _mm512_store_si512(t.at(0, tile, step) + row * kTileBytes, h);
  _mm512_store_si512(t.at(1, tile, step) + row * kTileBytes, m);
  _mm512_store_si512(t.at(2, tile, step) + row * kTileBytes, l);
}

// A B-tile row from 32 fp16 (a 512-bit vector: element 2n, 2n + 1 the pair of column n), split:
// the hi row at hi, the lo row at lo.
inline void store_pair_row(__m512i v, uint8_t* hi, uint8_t* lo) {
  __m512i h, l;
  split<false>(_mm512_cvtph_ps(_mm512_castsi512_si256(v)),
               _mm512_cvtph_ps(_mm512_extracti64x4_epi64(v, 1)), h, l);
  _mm512_store_si512(hi, h);
  _mm512_store_si512(lo, l);
}

// Lane n of the result: the 16-bit elements n of x's low and high 256 bits, as a pair.
inline __m512i interleave16(__m512i x) {
  const __m512i idx = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8,
                                       23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
  return _mm512_permutexvar_epi16(idx, x);
}

// The mask of slots [lo, hi) of a block (0 <= lo, hi <= 64): bit n for slot n.
inline uint64_t slot_mask(int lo, int hi) {
  if (hi <= lo) return 0;
  const uint64_t below_hi = hi >= 64 ? ~uint64_t(0) : (uint64_t(1) << hi) - 1;
  return below_hi & ~((uint64_t(1) << lo) - 1);
}

}  // namespace

void attention_tile_amx(const AttnArgs& a, int64_t s, int kvh, int64_t t0, int64_t t1) {
  const int hd = a.hd, group = a.n_heads / a.n_kv_heads;
  const int64_t rows = (t1 - t0) * group;
  const int64_t rp = (rows + 31) / 32 * 32, nrt = rp / 16;  // rows in pairs of 16-row tiles
  const int64_t dsteps = hd / 32, dtiles = hd / 16;
  const int64_t row_elems = a.row_elems(), slice = int64_t(kvh) * a.slice_elems();
  const float scale = 1.0f / std::sqrt(float(hd));
  const auto* kc = static_cast<const uint16_t*>(a.k_cache);
  const auto* vc = static_cast<const uint16_t*>(a.v_cache);

  // Scratch (64-byte aligned, kept per thread): Q's tiles (3 parts), K's and V's block (2 parts),
  // P's tiles (3 parts), the scores, the outputs (fp32, rows hd apart), per-row state.
  thread_local Aligned64<uint8_t> qa_buf, kb_buf, vb_buf, pa_buf;
  thread_local AlignedFloats s_buf, o_buf, m_buf, l_buf, bm_buf, c_buf;
  thread_local Aligned64<int32_t> lo_buf, hi_buf;
  int pair_lo[kAttnAmxRows / 32], pair_hi[kAttnAmxRows / 32];
  auto bytes = [](Aligned64<uint8_t>& b, int64_t n) {
    b.reserve(size_t(n));
    return b.p;
  };
  const Tiles qa{bytes(qa_buf, 3 * nrt * dsteps * kTile), nrt * dsteps * kTile, dsteps * kTile,
                 kTile};
  const Tiles kb{bytes(kb_buf, 2 * 4 * dsteps * kTile), 4 * dsteps * kTile, dsteps * kTile, kTile};
  const Tiles vb{bytes(vb_buf, 2 * dtiles * 2 * kTile), dtiles * 2 * kTile, 2 * kTile, kTile};
  const Tiles pa{bytes(pa_buf, 3 * nrt * 2 * kTile), nrt * 2 * kTile, 2 * kTile, kTile};
  s_buf.reserve(size_t(rp * kKeys));
  o_buf.reserve(size_t(rp * hd));
  for (AlignedFloats* b : {&m_buf, &l_buf, &bm_buf, &c_buf}) b->reserve(size_t(rp));
  lo_buf.reserve(size_t(rp));
  hi_buf.reserve(size_t(rp));
  float *const S = s_buf.p, *const O = o_buf.p, *const mrow = m_buf.p, *const lrow = l_buf.p;
  float *const bmax = bm_buf.p, *const corr = c_buf.p;
  std::fill_n(O, rp * hd, 0.0f);
  std::fill_n(mrow, rp, kNegInf);
  std::fill_n(lrow, rp, 0.0f);

  // Q: row r = (token t0 + r / group, head kvh * group + r % group), scaled, split; padding rows
  // zero. Each row's keys: [first, pos].
  thread_local Aligned64<int64_t> pos_buf, first_buf;
  pos_buf.reserve(size_t(rp));
  first_buf.reserve(size_t(rp));
  int64_t* const pos = pos_buf.p;
  int64_t* const first = first_buf.p;
  int64_t kmin = std::numeric_limits<int64_t>::max(), kmax = 0;
  const __m512 vscale = _mm512_set1_ps(scale);
  for (int64_t r = 0; r < rp; ++r) {
    __m512 f0 = _mm512_setzero_ps(), f1 = f0;
    const float* q = nullptr;
    if (r < rows) {
      const int64_t t = t0 + r / group;
      pos[r] = a.pos(s, t);
      first[r] = attn_first_key(a, pos[r]);
      kmin = std::min(kmin, first[r]);
      kmax = std::max(kmax, pos[r] + 1);
      q = a.q + ((a.tok0(s) + t) * a.n_heads + int64_t(kvh) * group + r % group) * hd;
    } else {
      pos[r] = -1;
      first[r] = 0;
    }
    for (int64_t d = 0; d < dsteps; ++d) {
      if (q) {
        f0 = _mm512_mul_ps(_mm512_loadu_ps(q + 32 * d), vscale);
        f1 = _mm512_mul_ps(_mm512_loadu_ps(q + 32 * d + 16), vscale);
      }
      store_split3_row(qa, r / 16, d, r % 16, f0, f1);
    }
  }

  configure_tiles();
  // Blocks aligned to multiples of 64 keys; every key in [kmin, kmax) is visible to some row of
  // the tile (and was written), the others of a block read as zero.
  for (int64_t j0 = kmin / kKeys * kKeys; j0 < kmax; j0 += kKeys) {
    const int64_t jb = std::max(j0, kmin), je = std::min(j0 + kKeys, kmax);
    const int nk = int(je - j0);  // slots [0, nk) may hold keys; [jb - j0, nk) do

    // K's block as B tiles: key tile kt, dimension step d, row q = dimension pair 2q, 2q + 1.
    for (int kt = 0; kt < 4; ++kt) {
      const int64_t p0 = j0 + 16 * kt;
      const int lo = int(std::max(jb, p0) - p0), hi = int(std::min(je, p0 + 16) - p0);
      for (int64_t d = 0; d < dsteps; ++d) {
        uint8_t *th = kb.at(0, kt, d), *tl = kb.at(1, kt, d);
        if (hi <= lo) {
          std::memset(th, 0, kTile);
          std::memset(tl, 0, kTile);
          continue;
        }
        const __mmask16 m = __mmask16(((1u << (hi - lo)) - 1) << lo);
        if (a.k_tiled) {
          // The 16-position tile's runs of dimensions 2q and 2q + 1 are adjacent: one load.
          const uint16_t* t = kc + a.k_tile(a.row(s, p0) / 16) + int64_t(kvh) * hd * 16;
          const __mmask32 m2 = __mmask32(m) | (__mmask32(m) << 16);
          for (int q = 0; q < 16; ++q)
            store_pair_row(interleave16(_mm512_maskz_loadu_epi16(m2, t + (32 * d + 2 * q) * 16)),
                           th + q * kTileBytes, tl + q * kTileBytes);
        } else {
          __m512 r[16];
          for (int n = 0; n < 16; ++n)
            r[n] = n >= lo && n < hi
                       ? _mm512_loadu_ps(kc + a.row(s, p0 + n) * row_elems + slice + 32 * d)
                       : _mm512_setzero_ps();
          transpose16(r);  // r[q] lane n: key n's pair q
          for (int q = 0; q < 16; ++q)
            store_pair_row(_mm512_castps_si512(r[q]), th + q * kTileBytes, tl + q * kTileBytes);
        }
      }
    }

    // Each pair of row tiles' slots: the union of its rows' [lo, hi) (empty: the pair sees no key
    // of this block, its products are skipped).
    const int nv = (nk + 15) / 16;
    for (int64_t r = 0; r < rp; ++r) {
      lo_buf.p[r] = int(std::clamp<int64_t>(std::max(first[r], jb) - j0, 0, kKeys));
      hi_buf.p[r] = int(std::clamp<int64_t>(std::min(pos[r] + 1, je) - j0, 0, kKeys));
    }
    for (int64_t i = 0; i < nrt; i += 2) {
      int plo = kKeys, phi = 0;
      for (int64_t r = 16 * i; r < 16 * i + 32; ++r)
        if (hi_buf.p[r] > lo_buf.p[r]) {
          plo = std::min(plo, lo_buf.p[r]);
          phi = std::max(phi, hi_buf.p[r]);
        }
      pair_lo[i / 2] = plo;
      pair_hi[i / 2] = phi;
    }

    // S = Q·Kᵀ, 32 x 32 at a time, over the key tiles a pair sees.
    for (int64_t i = 0; i < nrt; i += 2) {
      const int plo = pair_lo[i / 2], phi = pair_hi[i / 2];
      for (int j = plo / 32 * 2; 16 * j < phi; j += 2) {
        _tile_zero(0);
        _tile_zero(1);
        _tile_zero(2);
        _tile_zero(3);
        tile_block5(qa, i, kb, j, 0, dsteps);
        float* c = S + i * 16 * kKeys + 16 * j;
        _tile_stored(0, c, kKeys * 4);
        _tile_stored(1, c + 16, kKeys * 4);
        _tile_stored(2, c + 16 * kKeys, kKeys * 4);
        _tile_stored(3, c + 16 * kKeys + 16, kKeys * 4);
      }
    }

    // Online softmax, row by row over the block's slots [lo, hi): the block's maxima, then the
    // rescale factors 16 rows at a time, then the probabilities (split into P's tiles) and sums.
    for (int64_t r = 0; r < rp; ++r) {
      const uint64_t mk = slot_mask(lo_buf.p[r], hi_buf.p[r]);
      __m512 b = _mm512_set1_ps(kNegInf);
      for (int c = 0; c < nv; ++c)
        b = _mm512_mask_max_ps(b, __mmask16(mk >> (16 * c)), b,
                               _mm512_loadu_ps(S + r * kKeys + 16 * c));
      bmax[r] = mk ? _mm512_reduce_max_ps(b) : kNegInf;
    }
    for (int64_t r = 0; r < rp; r += 16) {
      const __m512 m_old = _mm512_loadu_ps(mrow + r);
      const __m512 m_new = _mm512_max_ps(m_old, _mm512_loadu_ps(bmax + r));
      const __mmask16 live = _mm512_cmp_ps_mask(m_new, _mm512_set1_ps(kNegInf), _CMP_NEQ_OQ);
      const __m512 m_sub = _mm512_maskz_mov_ps(live, m_new);  // rows with no key yet: 0
      const __mmask16 had = _mm512_cmp_ps_mask(m_old, _mm512_set1_ps(kNegInf), _CMP_NEQ_OQ);
      _mm512_storeu_ps(corr + r, _mm512_maskz_mov_ps(had, exp512(_mm512_sub_ps(m_old, m_sub))));
      _mm512_storeu_ps(mrow + r, m_new);
      _mm512_storeu_ps(bmax + r, m_sub);  // from here: what each row's scores are reduced by
    }
    for (int64_t r = 0; r < rp; ++r) {
      if (pair_hi[r / 32] <= pair_lo[r / 32]) continue;  // the pair's P is not read
      const uint64_t mk = slot_mask(lo_buf.p[r], hi_buf.p[r]);
      const __m512 msub = _mm512_set1_ps(bmax[r]);
      __m512 p[4], sum = _mm512_setzero_ps();
      for (int c = 0; c < 4; ++c) {
        const __mmask16 m = __mmask16(mk >> (16 * c));
        p[c] = m ? _mm512_maskz_mov_ps(
                       m, exp512(_mm512_sub_ps(_mm512_loadu_ps(S + r * kKeys + 16 * c), msub)))
                 : _mm512_setzero_ps();
        sum = _mm512_add_ps(sum, p[c]);
      }
      if (mk) lrow[r] = lrow[r] * corr[r] + _mm512_reduce_add_ps(sum);
      if (mk && corr[r] != 1.0f) {
        const __m512 cv = _mm512_set1_ps(corr[r]);
        for (int64_t d = 0; d < hd; d += 16)
          _mm512_storeu_ps(O + r * hd + d, _mm512_mul_ps(_mm512_loadu_ps(O + r * hd + d), cv));
      }
      for (int ks = 0; ks < 2; ++ks)
        store_split3_row(pa, r / 16, ks, r % 16, p[2 * ks], p[2 * ks + 1]);
    }

    // V's block as B tiles: key step ks, dimension tile dt, row q = slots 32 ks + 2q, + 1.
    const int ksteps = (nk + 31) / 32;
    for (int ks = 0; ks < ksteps; ++ks)
      for (int q = 0; q < 16; ++q) {
        const int64_t n = 32 * ks + 2 * q;
        const uint16_t* v0 =
            j0 + n >= jb && n < nk ? vc + a.row(s, j0 + n) * row_elems + slice : nullptr;
        const uint16_t* v1 = j0 + n + 1 >= jb && n + 1 < nk
                                 ? vc + a.row(s, j0 + n + 1) * row_elems + slice
                                 : nullptr;
        for (int64_t dt = 0; dt < dtiles; ++dt) {
          const __m256i x0 = v0 ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(v0 + 16 * dt))
                                : _mm256_setzero_si256();
          const __m256i x1 = v1 ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(v1 + 16 * dt))
                                : _mm256_setzero_si256();
          store_pair_row(interleave16(_mm512_inserti64x4(_mm512_castsi256_si512(x0), x1, 1)),
                         vb.at(0, dt, ks) + q * kTileBytes, vb.at(1, dt, ks) + q * kTileBytes);
        }
      }

    // O += P·V, 32 rows x 32 dimensions at a time, over the key steps a pair sees.
    for (int64_t i = 0; i < nrt; i += 2) {
      const int plo = pair_lo[i / 2], phi = pair_hi[i / 2];
      if (phi <= plo) continue;
      for (int64_t j = 0; j < dtiles; j += 2) {
        float* c = O + i * 16 * hd + 16 * j;
        _tile_loadd(0, c, hd * 4);
        _tile_loadd(1, c + 16, hd * 4);
        _tile_loadd(2, c + 16 * hd, hd * 4);
        _tile_loadd(3, c + 16 * hd + 16, hd * 4);
        tile_block5(pa, i, vb, j, plo / 32, (phi + 31) / 32);
        _tile_stored(0, c, hd * 4);
        _tile_stored(1, c + 16, hd * 4);
        _tile_stored(2, c + 16 * hd, hd * 4);
        _tile_stored(3, c + 16 * hd + 16, hd * 4);
      }
    }
  }
  _tile_release();

  for (int64_t r = 0; r < rows; ++r) {
    const int64_t t = t0 + r / group;
    float* out = a.out + ((a.tok0(s) + t) * a.n_heads + int64_t(kvh) * group + r % group) * hd;
    const __m512 inv = _mm512_set1_ps(1.0f / lrow[r]);
    for (int64_t d = 0; d < hd; d += 16)
      _mm512_storeu_ps(out + d, _mm512_mul_ps(_mm512_loadu_ps(O + r * hd + d), inv));
  }
}

}  // namespace latprof::cpu::detail
