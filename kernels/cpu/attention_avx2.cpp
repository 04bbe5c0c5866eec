// AVX2 (with FMA and F16C) attention: a work unit of query tokens [t0, t1) of sequence s and every
// query head of kv head kvh (attention.cpp's attention_unit_scalar, the same online softmax over
// the same key blocks, blocked for 8-wide vectors), or a decode's chunk of keys for every head. Per
// block of 32 keys the unit's K is widened once into a dimension-major tile (a tiled16 fp16 cache
// is dimension-major already) and its V into rows, both shared by all the unit's query rows; the
// scores are 6 rows x 16 keys of multiply-adds a step, P·V 6 rows x 16 dimensions (1-2 rows: 32
// keys, 32 dimensions for 2 rows, so that 8 multiply-adds are in flight). The query rows
// are pre-scaled by 1/sqrt(hd). A unit of at most kDirectRows query rows (a decode's) reads an fp16
// cache's K tiles and V rows in the multiply-adds instead (`vcvtph2ps` from memory): widened,
// each block's K and V crossed the store and load ports once more for 1-8 rows.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "core/half.hpp"
#include "kernels/cpu/internal.hpp"
#include "kernels/cpu/math_avx2.hpp"

namespace latprof::cpu::detail {
namespace {

constexpr int kKeys = 32;  // keys per online-softmax block: two K tiles
// Units of up to this many query rows convert an fp16 cache in the multiply-adds. On AMD Zen 3 (2
// threads, from DRAM) tinyllama-1.1b's decode (8 rows a kv head) ran 1.5x and llama-2-7b's (one
// row a head) 1.4x as fast at 2,000 positions; llama-2-7b's prefill units of 64 rows 0.85x
// (each row group converting the block again), tinyllama's level (reports/cpu-kernels.md).
constexpr int kDirectRows = 8;

// dst[0 .. hd8) = the (row, kv head kvh) slice of a row-major cache (K not tiled, or V) in fp32,
// zeros from hd on.
[[gnu::always_inline]] inline void widen_row(const AttnArgs& a, const void* cache, int64_t row,
                                             int kvh, float* dst, int hd8) {
  const int hd = a.hd;
  const int64_t at = row * a.row_elems() + kvh * a.slice_elems();
  int d = 0;
  if (a.kv == KvType::i8) {
    const int8_t* x = static_cast<const int8_t*>(cache) + at;
    float scale;
    std::memcpy(&scale, x + hd, sizeof scale);
    const __m256 sv = _mm256_set1_ps(scale);
    for (; d + 8 <= hd; d += 8)
      _mm256_storeu_ps(dst + d,
                       _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(
                                         _mm_loadl_epi64(reinterpret_cast<const __m128i*>(x + d)))),
                                     sv));
    for (; d < hd; ++d) dst[d] = float(x[d]) * scale;
  } else {
    const uint16_t* x = static_cast<const uint16_t*>(cache) + at;
    const bool bf16 = a.kv == KvType::bf16;
    for (; d + 8 <= hd; d += 8) {
      const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(x + d));
      _mm256_storeu_ps(dst + d,
                       bf16 ? _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16))
                            : _mm256_cvtph_ps(h));
    }
    for (; d < hd; ++d) dst[d] = bf16 ? bf16_to_float(x[d]) : half_to_float(x[d]);
  }
  for (; d < hd8; ++d) dst[d] = 0;
}

// rows[j] = the cache row of position p0 + j of sequence s, j in [0, n): one division per call
// (a.row divides by the block size; two such a key cost more than its multiply-adds here).
inline void cache_rows(const AttnArgs& a, int64_t s, int64_t p0, int n, int64_t* rows) {
  int64_t blk = p0 / a.block_size, off = p0 % a.block_size;
  const int32_t* table = a.block_tables + s * a.max_blocks;
  for (int j = 0; j < n; ++j) {
    rows[j] = int64_t(table[blk]) * a.block_size + off;
    if (++off == a.block_size) {
      off = 0;
      ++blk;
    }
  }
}

// S[i][kh .. kh + 16 NH) = qs[i] · 16 NH keys for RR rows ldq apart; k0 (and k1, the second half's
// tile, for NH = 2): the keys dimension-major, dimension d at k + d * ks (a widened tile, kKeys
// apart, or an fp16 cache tile, 16 apart). DS sums over the dimensions (d, d + 1): hd % DS == 0.
template <int RR, int NH, int DS, class T>
void scores_tile(const float* qs, int64_t ldq, const T* k0, const T* k1, int64_t ks, int hd, int kh,
                 float* S) {
  constexpr int NV = 2 * NH;
  __m256 acc[DS][RR][NV];
#pragma GCC unroll 2
  for (int s = 0; s < DS; ++s)
#pragma GCC unroll 6
    for (int i = 0; i < RR; ++i)
#pragma GCC unroll 4
      for (int x = 0; x < NV; ++x) acc[s][i][x] = _mm256_setzero_ps();
  // hd >= 1: a loop GCC knows to run keeps the accumulators in registers (with `for`, GCC 12
  // stored them to the stack every step).
  int d = 0;
  do {
#pragma GCC unroll 2
    for (int s = 0; s < DS; ++s) {
      __m256 kv[NV];
      kv[0] = load8(k0);
      kv[1] = load8(k0 + 8);
      if constexpr (NH == 2) {
        kv[2] = load8(k1);
        kv[3] = load8(k1 + 8);
        k1 += ks;
      }
      k0 += ks;
#pragma GCC unroll 6
      for (int i = 0; i < RR; ++i) {
        const __m256 qb = _mm256_broadcast_ss(qs + i * ldq + d + s);
#pragma GCC unroll 4
        for (int x = 0; x < NV; ++x) acc[s][i][x] = _mm256_fmadd_ps(qb, kv[x], acc[s][i][x]);
      }
    }
  } while ((d += DS) < hd);
  for (int i = 0; i < RR; ++i)
    for (int x = 0; x < NV; ++x) {
      __m256 sum = acc[0][i][x];
      if constexpr (DS == 2) sum = _mm256_add_ps(sum, acc[1][i][x]);
      _mm256_store_ps(S + i * kKeys + kh + 8 * x, sum);
    }
}

// O[i][d0 .. d0 + 8W) += sum over keys j in [j0, j1) of P[i][j] * V[j][d0 ..] for RR rows, V[j]
// at v(j) (a widened row, or an fp16 cache row) (j0 < j1: a do-while, as in scores_tile).
template <int RR, int W, class V>
void pv_tile(const float* P, V v_row, int hd8, int j0, int j1, float* O, int d0) {
  __m256 acc[RR][W];
#pragma GCC unroll 6
  for (int i = 0; i < RR; ++i)
#pragma GCC unroll 4
    for (int w = 0; w < W; ++w) acc[i][w] = _mm256_load_ps(O + i * hd8 + d0 + 8 * w);
  int j = j0;
  do {
    const auto* vr = v_row(j) + d0;
    __m256 v[W];
#pragma GCC unroll 4
    for (int w = 0; w < W; ++w) v[w] = load8(vr + 8 * w);
#pragma GCC unroll 6
    for (int i = 0; i < RR; ++i) {
      const __m256 pb = _mm256_broadcast_ss(P + i * kKeys + j);
#pragma GCC unroll 4
      for (int w = 0; w < W; ++w) acc[i][w] = _mm256_fmadd_ps(pb, v[w], acc[i][w]);
    }
  } while (++j < j1);
  for (int i = 0; i < RR; ++i)
    for (int w = 0; w < W; ++w) _mm256_store_ps(O + i * hd8 + d0 + 8 * w, acc[i][w]);
}

// The dimensions [0, hd8) of pv_tile (hd8 a multiple of 8). Two rows take 32 dimensions a tile: 8
// accumulators, the multiply-adds in flight that keep both FMA pipes busy (4 cycles' latency);
// with 16, half of them waited. One row's tiles stay at 16: its V reads bound it, and 32 (in two
// sums over the keys) ran 0.96-1.02x as fast from DRAM at llama-2-7b's heads.
template <int RR, class V>
void pv_rows(const float* P, V v_row, int hd8, int j0, int j1, float* O) {
  int d0 = 0;
  if constexpr (RR == 2)
    for (; d0 + 32 <= hd8; d0 += 32) pv_tile<RR, 4>(P, v_row, hd8, j0, j1, O, d0);
  for (; d0 + 16 <= hd8; d0 += 16) pv_tile<RR, 2>(P, v_row, hd8, j0, j1, O, d0);
  if (d0 < hd8) pv_tile<RR, 1>(P, v_row, hd8, j0, j1, O, d0);
}

// f(r, RR) for the rows [0, n) in groups of up to 6: a 6-row tile holds 12 accumulators, two
// loaded vectors and a broadcast, 15 of the 16 registers. On AMD Zen 3 (2 threads) 6-row groups
// ran 1.03-1.06x as fast as 4-row ones in prefill and decode (reports/cpu-kernels.md).
template <class F>
void row_groups(int64_t n, F&& f) {
  int64_t r = 0;
  for (; r + 6 <= n; r += 6) f(r, std::integral_constant<int, 6>{});
  switch (n - r) {
    case 5:
      f(r, std::integral_constant<int, 5>{});
      break;
    case 4:
      f(r, std::integral_constant<int, 4>{});
      break;
    case 3:
      f(r, std::integral_constant<int, 3>{});
      break;
    case 2:
      f(r, std::integral_constant<int, 2>{});
      break;
    case 1:
      f(r, std::integral_constant<int, 1>{});
      break;
    default:
      break;
  }
}

// Query tokens [t0, t1) of sequence s, every query head of kv heads [g0, g1), keys [ka, kb) only.
// part null: the rows' outputs, normalised, to a.out. Otherwise each row's online-softmax state
// to part + (t * n_heads + h) * attn_part_stride(hd): the unnormalised P·V sums, the maximum and
// the sum of the probabilities (the maximum -inf and the sum 0 where no key of [ka, kb) is
// visible to the row). The blocks of 32 keys are walked in order, and within each the kv heads:
// with several heads (a decode's chunk of keys) a block's K tiles and V rows are read across the
// heads in address order, rather than one head's pieces of every row, far apart.
void attend(const AttnArgs& a, int64_t s, int g0, int g1, int64_t t0, int64_t t1, int64_t ka,
            int64_t kb, float* part) {
  const int hd = a.hd, hd8 = (hd + 7) / 8 * 8;
  const int group = a.n_heads / a.n_kv_heads;
  const int64_t nrg = (t1 - t0) * group;  // query rows a kv head: token-major, then head
  const int64_t nr = nrg * (g1 - g0);
  if (nr <= 0) return;
  const float scale = 1.0f / std::sqrt(float(hd));
  // One aligned buffer: scaled q and the output accumulators (nr x hd8 each), the probabilities
  // (nr x kKeys), K dimension-major (hd x kKeys), V by rows (kKeys x hd8) and each row's sum of
  // probabilities in 8 lanes (nr x 8).
  thread_local AlignedFloats buf;
  const int64_t q_off = 0, o_off = nr * hd8, p_off = 2 * nr * hd8, k_off = p_off + nr * kKeys,
                v_off = k_off + int64_t(hd) * kKeys, l_off = v_off + int64_t(kKeys) * hd8,
                total = l_off + nr * 8;
  buf.reserve(size_t(total));
  float* const Qs = buf.p + q_off;
  float* const O = buf.p + o_off;
  float* const P = buf.p + p_off;
  float* const Kt = buf.p + k_off;
  float* const Vb = buf.p + v_off;
  float* const L = buf.p + l_off;
  thread_local std::vector<int64_t> first_tl, last_tl;
  thread_local std::vector<float> m_tl;
  auto &first = first_tl, &last = last_tl;
  auto& m = m_tl;
  first.resize(size_t(nr));
  last.resize(size_t(nr));
  m.assign(size_t(nr), -std::numeric_limits<float>::infinity());
  std::fill(L, L + nr * 8, 0.0f);
  const __m256 sv = _mm256_set1_ps(scale);
  int64_t k_lo = std::numeric_limits<int64_t>::max(), k_hi = 0;  // keys [k_lo, k_hi)
  for (int g = g0; g < g1; ++g)
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t pos = a.pos(s, t);
      const int64_t f = std::max(attn_first_key(a, pos), ka), e = std::min(pos, kb - 1);
      if (f <= e) {
        k_lo = std::min(k_lo, f);
        k_hi = std::max(k_hi, e + 1);
      }
      for (int hh = 0; hh < group; ++hh) {
        const int64_t r = (g - g0) * nrg + (t - t0) * group + hh;
        first[size_t(r)] = f;
        last[size_t(r)] = e;
        const float* q = a.q + ((a.tok0(s) + t) * a.n_heads + g * group + hh) * hd;
        float* qs = Qs + r * hd8;
        int d = 0;
        for (; d + 8 <= hd; d += 8)
          _mm256_store_ps(qs + d, _mm256_mul_ps(_mm256_loadu_ps(q + d), sv));
        for (; d < hd; ++d) qs[d] = q[d] * scale;
        for (; d < hd8; ++d) qs[d] = 0;
      }
    }
  std::fill(O, O + nr * hd8, 0.0f);
  const bool tiled = a.k_tiled;
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  const __m256 neg_inf = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
  const int64_t esz = a.kv == KvType::i8 ? 1 : 2;
  // The bytes of the heads [g0, g1) in one K tile (tiled) or cache row, and in one V row.
  const int64_t k_bytes = (g1 - g0) * (tiled ? int64_t(hd) * 16 * 2 : kv_slice_bytes(a.kv, hd));
  const int64_t v_bytes = (g1 - g0) * kv_slice_bytes(a.kv, hd);
  for (int64_t j0 = k_lo / kKeys * kKeys; j0 < k_hi; j0 += kKeys) {
    // A unit of one kv head reads its share of each cache row (of each 16-row tile of a tiled K):
    // pieces of 64-2,048 bytes far apart, which the hardware prefetchers do not follow. So the
    // block two on is fetched into L2 by hand (its keys below k_hi only: the block table ends
    // there).
    const int64_t pf0 = j0 + 2 * kKeys;
    const int npf = int(std::clamp<int64_t>(k_hi - pf0, 0, kKeys));
    int64_t pf_rows[kKeys], rows[kKeys];
    cache_rows(a, s, pf0, npf, pf_rows);
    for (int i = 0; i < npf; ++i) {
      const int64_t p = pf0 + i, row = pf_rows[i];
      if (!tiled || p % 16 == 0) {
        const char* k = static_cast<const char*>(a.k_cache) +
                        esz * (tiled ? a.k_tile(row >> 4) + int64_t(g0) * hd * 16
                                     : row * a.row_elems() + g0 * a.slice_elems());
        for (int64_t b = 0; b < k_bytes; b += 64) prefetch_linear(k + b);
        prefetch_linear(k + k_bytes - 1);
      }
      const char* v =
          static_cast<const char*>(a.v_cache) + esz * (row * a.row_elems() + g0 * a.slice_elems());
      for (int64_t b = 0; b < v_bytes; b += 64) prefetch_linear(v + b);
      prefetch_linear(v + v_bytes - 1);
    }
    // Keys [j0 + js, j0 + nb) of this block are visible to some row; the others are not read.
    const int nb = int(std::min<int64_t>(kKeys, k_hi - j0));
    const int js = int(std::max<int64_t>(0, k_lo - j0));
    // The halves of 16 keys holding some of them (a tiled K's tiles).
    const bool half0 = js < 16;
    const bool half1 = nb > 16;
    cache_rows(a, s, j0 + js, nb - js, rows + js);
    for (int g = g0; g < g1; ++g) {
      const int64_t rg = (g - g0) * nrg;  // this kv head's rows [rg, rg + nrg)
      // A unit of few rows reads K's fp16 tiles and V's fp16 rows in the multiply-adds (ktile[hf]:
      // the tile of half hf); the others widen them once into Kt and Vb.
      const bool direct_k = tiled && nrg <= kDirectRows;
      const bool direct_v = a.kv == KvType::f16 && hd % 8 == 0 && nrg <= kDirectRows;
      const uint16_t* ktile[2] = {};
      for (int hf = 0; hf < 2 && tiled; ++hf)
        if (hf == 0 ? half0 : half1)
          ktile[hf] = static_cast<const uint16_t*>(a.k_cache) +
                      a.k_tile(rows[std::max(js, 16 * hf)] >> 4) + int64_t(g) * hd * 16;
      const uint16_t* vrow[kKeys];
      if (tiled && !direct_k) {
        for (int hf = 0; hf < 2; ++hf) {
          if (!(hf == 0 ? half0 : half1)) {
            for (int d = 0; d < hd; ++d) std::fill_n(Kt + d * kKeys + 16 * hf, 16, 0.0f);
            continue;
          }
          const uint16_t* src = ktile[hf];
          for (int d = 0; d < hd; ++d) {
            _mm256_store_ps(Kt + d * kKeys + 16 * hf, load8(src + d * 16));
            _mm256_store_ps(Kt + d * kKeys + 16 * hf + 8, load8(src + d * 16 + 8));
          }
        }
      } else if (!tiled) {
        if (js > 0 || nb < kKeys) std::fill(Kt, Kt + int64_t(hd) * kKeys, 0.0f);
        thread_local std::vector<float> row;
        row.resize(size_t(hd8));
        for (int j = js; j < nb; ++j) {
          widen_row(a, a.k_cache, rows[j], g, row.data(), hd8);
          for (int d = 0; d < hd; ++d) Kt[d * kKeys + j] = row[size_t(d)];
        }
      }
      if (direct_v) {
        for (int j = js; j < nb; ++j)
          vrow[j] = static_cast<const uint16_t*>(a.v_cache) + rows[j] * a.row_elems() +
                    g * a.slice_elems();
      } else {
        for (int j = js; j < nb; ++j) widen_row(a, a.v_cache, rows[j], g, Vb + j * hd8, hd8);
      }
      // Scores, then each row's online-softmax step: its visible keys [lo, hi) of the block.
      row_groups(nrg, [&](int64_t r, auto rr) {
        constexpr int RR = decltype(rr)::value;
        const float* qs = Qs + (rg + r) * hd8;
        float* S = P + (rg + r) * kKeys;
        // 1-2 rows take both halves in one pass, and one row two sums over the dimensions: 8
        // accumulators, where 16 keys gave 2-4 and the multiply-adds waited on each other's
        // results (4 cycles' latency, 2 a cycle on AMD Zen 3: 8 needed in flight).
        if constexpr (RR <= 2) {
          constexpr int DS = 3 - RR;
          if (half0 && half1 && hd % DS == 0) {
            if (direct_k)
              scores_tile<RR, 2, DS>(qs, hd8, ktile[0], ktile[1], 16, hd, 0, S);
            else
              scores_tile<RR, 2, DS>(qs, hd8, Kt, Kt + 16, kKeys, hd, 0, S);
            return;
          }
        }
        for (int hf = 0; hf < 2; ++hf) {
          if (!(hf == 0 ? half0 : half1)) continue;
          if (direct_k)
            scores_tile<RR, 1, 1>(qs, hd8, ktile[hf], ktile[hf], 16, hd, 16 * hf, S);
          else
            scores_tile<RR, 1, 1>(qs, hd8, Kt + 16 * hf, Kt + 16 * hf, kKeys, hd, 16 * hf, S);
        }
      });
      for (int64_t r = rg; r < rg + nrg; ++r) {
        float* p = P + r * kKeys;
        const int lo = int(std::max<int64_t>(first[size_t(r)] - j0, js));
        const int hi = int(std::min<int64_t>(last[size_t(r)] - j0 + 1, nb));
        if (lo >= hi) {  // no key of this block is visible to the row
          std::fill_n(p, kKeys, 0.0f);
          continue;
        }
        // A block the row sees whole (all but a causal row's last, and a window's first) takes
        // no masks: with them, they were a quarter of this loop's work.
        const bool whole = lo == 0 && hi == kKeys;
        __m256 mask[4] = {}, sc[4];  // mask: set and read only if !whole
        __m256 bmax = neg_inf;
        if (whole) {
          for (int c = 0; c < 4; ++c) {
            sc[c] = _mm256_load_ps(p + 8 * c);
            bmax = _mm256_max_ps(bmax, sc[c]);
          }
        } else {
          for (int c = 0; c < 4; ++c) {
            const __m256i j = _mm256_add_epi32(lane, _mm256_set1_epi32(8 * c));
            mask[c] = _mm256_castsi256_ps(
                _mm256_andnot_si256(_mm256_cmpgt_epi32(_mm256_set1_epi32(lo), j),
                                    _mm256_cmpgt_epi32(_mm256_set1_epi32(hi), j)));
            // Lanes outside [lo, hi) are never read: a half not computed holds old values.
            sc[c] = _mm256_blendv_ps(
                neg_inf, c * 8 < hi && c * 8 + 8 > lo ? _mm256_load_ps(p + 8 * c) : neg_inf,
                mask[c]);
            bmax = _mm256_max_ps(bmax, sc[c]);
          }
        }
        const float old_max = m[size_t(r)], new_max = std::max(old_max, hmax(bmax));
        const __m256 nm = _mm256_set1_ps(new_max);
        __m256 sum = _mm256_setzero_ps();
        for (int c = 0; c < 4; ++c) sc[c] = exp256(_mm256_sub_ps(sc[c], nm));
        if (!whole)
          for (int c = 0; c < 4; ++c) sc[c] = _mm256_and_ps(sc[c], mask[c]);
        for (int c = 0; c < 4; ++c) {
          sum = _mm256_add_ps(sum, sc[c]);
          _mm256_store_ps(p + 8 * c, sc[c]);
        }
        // The sum of the row's probabilities stays in 8 lanes, added up once after the last
        // block: reduced every block, it was a chain of dependent adds in each row's step.
        float* lr = L + r * 8;
        if (new_max == old_max) {  // most blocks past the first few: nothing to rescale
          _mm256_store_ps(lr, _mm256_add_ps(_mm256_load_ps(lr), sum));
          continue;
        }
        const __m256 cv = _mm256_set1_ps(std::exp(old_max - new_max));  // 0 on the first block
        _mm256_store_ps(lr, _mm256_fmadd_ps(_mm256_load_ps(lr), cv, sum));
        m[size_t(r)] = new_max;
        float* o = O + r * hd8;
        for (int d = 0; d < hd8; d += 8)
          _mm256_store_ps(o + d, _mm256_mul_ps(_mm256_load_ps(o + d), cv));
      }
      row_groups(nrg, [&](int64_t r, auto rr) {
        constexpr int RR = decltype(rr)::value;
        if (direct_v)
          pv_rows<RR>(
              P + (rg + r) * kKeys, [&](int j) { return vrow[j]; }, hd8, js, nb,
              O + (rg + r) * hd8);
        else
          pv_rows<RR>(
              P + (rg + r) * kKeys, [&](int j) { return Vb + j * hd8; }, hd8, js, nb,
              O + (rg + r) * hd8);
      });
    }
  }
  const int64_t ps = attn_part_stride(hd), hdp = ps - 16;
  for (int g = g0; g < g1; ++g)
    for (int64_t t = t0; t < t1; ++t)
      for (int hh = 0; hh < group; ++hh) {
        const int64_t r = (g - g0) * nrg + (t - t0) * group + hh, h = g * group + hh;
        const float* o = O + r * hd8;
        const float l = hsum(_mm256_load_ps(L + r * 8));
        if (part) {
          float* dst = part + (t * a.n_heads + h) * ps;
          std::copy_n(o, hd, dst);
          dst[hdp] = m[size_t(r)];
          dst[hdp + 1] = l;
          continue;
        }
        float* out = a.out + ((a.tok0(s) + t) * a.n_heads + h) * hd;
        const float inv = 1.0f / l;
        for (int d = 0; d < hd; ++d) out[d] = o[d] * inv;
      }
}

}  // namespace

void attention_unit_avx2(const AttnArgs& a, int64_t s, int kvh, int64_t t0, int64_t t1) {
  attend(a, s, kvh, kvh + 1, t0, t1, 0, std::numeric_limits<int64_t>::max(), nullptr);
}

void attention_chunk_avx2(const AttnArgs& a, int64_t s, int64_t k0, int64_t k1, float* part) {
  attend(a, s, 0, a.n_kv_heads, 0, a.n_tok(s), k0, k1, part);
}

}  // namespace latprof::cpu::detail
