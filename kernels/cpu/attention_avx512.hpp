#pragma once
// Pieces shared by the AVX-512 attention files (attention_avx512.cpp, and
// attention_bf16_avx512.cpp, which is compiled with AVX512-BF16 as well): everything here has
// internal linkage, so each file keeps its own copy built with its own instruction set.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#include <utility>

#include "kernels/cpu/exp_avx512.hpp"
#include "kernels/cpu/internal.hpp"

// GCC 12 reports _mm512_undefined_*() inside the intrinsics headers as uninitialised (a known
// false positive once the intrinsics are inlined).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace latprof::cpu::detail {
namespace {

inline __mmask16 head_mask(int c, int nv, int hd) {
  const int rem = hd - 16 * (nv - 1);
  return c < nv - 1 || rem == 16 ? __mmask16(0xffff) : __mmask16((1u << rem) - 1);
}

// The cache's element: uint16 for fp16 and bf16, a byte for int8 (AttnArgs::slice_elems).
template <KvType KV>
using kv_elem = std::conditional_t<KV == KvType::i8, int8_t, uint16_t>;
template <KvType KV>
inline const kv_elem<KV>* kv_ptr(const void* cache) {
  return static_cast<const kv_elem<KV>*>(cache);
}
// The scale of the slice whose values start at x (int8: the fp32 after its hd values; the 2-byte
// types have none: 1).
template <KvType KV>
inline float slice_scale(const kv_elem<KV>* x, int64_t hd) {
  if constexpr (KV == KvType::i8) {
    float s;
    std::memcpy(&s, x + hd, sizeof s);
    return s;
  } else {
    return 1.0f;
  }
}

// 16 cache values in fp32: fp16 converted (vcvtph2ps), bf16 widened (a shift), int8 widened
// (unscaled: the callers apply slice_scale). The masked form reads the lanes of m and gives 0 in
// the others.
template <KvType KV>
inline __m512 widen16(__m256i x) {
  if constexpr (KV == KvType::f16)
    return _mm512_cvtph_ps(x);
  else
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(x), 16));
}
template <KvType KV>
inline __m512 load16(const kv_elem<KV>* p) {
  if constexpr (KV == KvType::i8)
    return _mm512_cvtepi32_ps(
        _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
  else
    return widen16<KV>(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}
template <KvType KV>
inline __m512 load16(const kv_elem<KV>* p, __mmask16 m) {
  if constexpr (KV == KvType::i8)
    return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_maskz_loadu_epi8(m, p)));
  else
    return widen16<KV>(_mm256_maskz_loadu_epi16(m, p));
}

// The 16 lane-wise sums of acc[0 .. 16) in one vector, lane j = sum of acc[j]'s lanes: a
// transposing reduction tree (45 shuffles and adds, where one horizontal reduction per vector took
// ~9 uops).
inline __m512 reduce16(const __m512* acc) {
  // Level 1: pairs; within each 128-bit lane [a0+a2, b0+b2, a1+a3, b1+b3].
  __m512 b[8];
#pragma GCC unroll 8
  for (int i = 0; i < 8; ++i)
    b[i] = _mm512_add_ps(_mm512_unpacklo_ps(acc[2 * i], acc[2 * i + 1]),
                         _mm512_unpackhi_ps(acc[2 * i], acc[2 * i + 1]));
  // Level 2: four sums per 128-bit lane, one partial sum each.
  __m512 c4[4];
#pragma GCC unroll 4
  for (int i = 0; i < 4; ++i)
    c4[i] = _mm512_add_ps(_mm512_shuffle_ps(b[2 * i], b[2 * i + 1], 0x44),
                          _mm512_shuffle_ps(b[2 * i], b[2 * i + 1], 0xEE));
  // Levels 3 and 4: across the 128-bit lanes.
  const __m512 d0 = _mm512_add_ps(_mm512_shuffle_f32x4(c4[0], c4[1], 0x44),
                                  _mm512_shuffle_f32x4(c4[0], c4[1], 0xEE));
  const __m512 d1 = _mm512_add_ps(_mm512_shuffle_f32x4(c4[2], c4[3], 0x44),
                                  _mm512_shuffle_f32x4(c4[2], c4[3], 0xEE));
  return _mm512_add_ps(_mm512_shuffle_f32x4(d0, d1, 0x88), _mm512_shuffle_f32x4(d0, d1, 0xDD));
}

constexpr int kDecBlock = 64;  // keys per online-softmax step of the decode paths
// The same on a tiled16 K cache (chunk_gqa_tiled): its softmax steps cost more a block than
// softmax_block_hl's (a horizontal maximum and sum per head), so fewer, longer ones. On AMD Zen 4,
// tinyllama's heads in L2, one thread: 128 keys 0.957x the time of 64, 256 0.945x.
constexpr int kTiledBlock = 128;

// Scaled queries (qf, rows padded to hdp) and the zeroed partial state of every (token, head) row
// of sequence s.
inline void chunk_init(const AttnArgs& a, int64_t s, float* qf, float* part) {
  const int hd = a.hd, nh = a.n_heads, nv = (hd + 15) / 16, hdp = 16 * nv;
  const int64_t ps = attn_part_stride(hd);
  const __m512 vscale = _mm512_set1_ps(1.0f / std::sqrt(float(hd)));
  for (int64_t t = 0; t < a.n_tok(s); ++t)
    for (int h = 0; h < nh; ++h) {
      const float* q = a.q + ((a.tok0(s) + t) * nh + h) * hd;
      float* o = part + (t * nh + h) * ps;
      for (int c = 0; c < nv; ++c) {
        _mm512_storeu_ps(
            qf + ((t * nh + h) * hdp + 16 * c),
            _mm512_mul_ps(_mm512_maskz_loadu_ps(head_mask(c, nv, hd), q + 16 * c), vscale));
        _mm512_storeu_ps(o + 16 * c, _mm512_setzero_ps());
      }
      o[hdp] = -std::numeric_limits<float>::infinity();
      o[hdp + 1] = 0;
    }
}

// ro[0 .. n) = cache row offsets (elements of the cache's type) of keys j0 .. j0 + n of sequence
// s, walking its block table once (a.row() divides by the block size per key).
inline void fill_row_offsets(const AttnArgs& a, int64_t s, int64_t j0, int n, int64_t* ro) {
  const int32_t* table = a.block_tables + s * a.max_blocks;
  const int64_t kv_dim = a.row_elems();
  int64_t pg = j0 / a.block_size, off = j0 % a.block_size;
  for (int j = 0; j < n; ++j) {
    ro[j] = (int64_t(table[pg]) * a.block_size + off) * kv_dim;
    if (++off == a.block_size) off = 0, ++pg;
  }
}

// Online-softmax step of the block of keys [j0, j0 + nb_all) for every (token, head) row: scores
// (sc, row stride B) become probabilities under the new running maximum; the row's sum and
// accumulated output are rescaled.
inline void softmax_block(const AttnArgs& a, int64_t s, int64_t j0, int nb_all, float* sc,
                          float* part, int B = kDecBlock) {
  const int nh = a.n_heads, hdp = 16 * ((a.hd + 15) / 16), nv = hdp / 16;
  const int64_t ps = attn_part_stride(a.hd);
  for (int64_t t = 0; t < a.n_tok(s); ++t) {
    const int nb = int(std::min<int64_t>(nb_all, a.pos(s, t) + 1 - j0));
    const int js = int(std::max<int64_t>(0, attn_first_key(a, a.pos(s, t)) - j0));
    if (nb <= js) continue;  // no key of this block is visible to token t
    for (int h = 0; h < nh; ++h) {
      float* sh = sc + ((t * nh + h) * B);
      float* o = part + (t * nh + h) * ps;
      __m512 vbm = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
      for (int j = js; j < nb; j += 16) {
        const __mmask16 mk = nb - j >= 16 ? __mmask16(0xffff) : __mmask16((1u << (nb - j)) - 1);
        vbm = _mm512_mask_max_ps(vbm, mk, vbm, _mm512_maskz_loadu_ps(mk, sh + j));
      }
      const float block_max = _mm512_reduce_max_ps(vbm);
      const float new_max = std::max(o[hdp], block_max);
      const float corr = std::exp(o[hdp] - new_max);
      o[hdp] = new_max;
      const __m512 vmax = _mm512_set1_ps(new_max);
      __m512 psum = _mm512_setzero_ps();
      for (int j = js; j < nb; j += 16) {
        const __mmask16 mk = nb - j >= 16 ? __mmask16(0xffff) : __mmask16((1u << (nb - j)) - 1);
        const __m512 p = exp512(_mm512_sub_ps(_mm512_maskz_loadu_ps(mk, sh + j), vmax));
        _mm512_mask_storeu_ps(sh + j, mk, p);
        psum = _mm512_mask_add_ps(psum, mk, psum, p);
      }
      o[hdp + 1] = o[hdp + 1] * corr + _mm512_reduce_add_ps(psum);
      const __m512 vcorr = _mm512_set1_ps(corr);
      for (int c = 0; c < nv; ++c)
        _mm512_storeu_ps(o + 16 * c, _mm512_mul_ps(_mm512_loadu_ps(o + 16 * c), vcorr));
    }
  }
}

// Keys of the 16-key sub-block [j0 + jb, j0 + jb + jn) visible to token t: [lo, hi), relative to
// j0 (empty when lo >= hi).
inline std::pair<int64_t, int64_t> visible(const AttnArgs& a, int64_t s, int64_t t, int64_t j0,
                                           int jb, int jn) {
  return {std::max<int64_t>(jb, attn_first_key(a, a.pos(s, t)) - j0),
          std::min<int64_t>(jb + jn, a.pos(s, t) + 1 - j0)};
}

// Heads in the next tile of a group with `left` heads still to do: the largest power of two
// <= max (16 or 8) that fits.
inline int tile_heads(int left, int max) {
  int h = max;
  while (h > left) h /= 2;
  return h;
}

// Stores a score tile's result (lane i * HG + h: head h's score for key i): key i's HG scores at
// dst + i * kstride.
template <int HG>
inline void store_scores(__m512 r, float* dst, int64_t kstride) {
  if constexpr (HG == 16) {
    _mm512_storeu_ps(dst, r);
  } else if constexpr (HG == 8) {
    _mm256_storeu_ps(dst, _mm512_castps512_ps256(r));
    _mm256_storeu_ps(dst + kstride, _mm512_extractf32x8_ps(r, 1));
  } else {
    alignas(64) float x[16];
    _mm512_store_ps(x, r);
    for (int i = 0; i < 16 / HG; ++i)
      for (int h = 0; h < HG; ++h) dst[i * kstride + h] = x[i * HG + h];
  }
}

// Online-softmax step of the GQA decode, scores laid out key-major (sc[(t * kDecBlock + j) *
// n_heads + h]): the heads sit in the vector lanes, so the block maximum and the sums need no
// horizontal reduction. Same arithmetic per (head, key) as softmax_block.
inline void softmax_block_hl(const AttnArgs& a, int64_t s, int64_t j0, int nb_all, float* sc,
                             float* part) {
  const int nh = a.n_heads, hdp = 16 * ((a.hd + 15) / 16), nv = hdp / 16;
  const int64_t ps = attn_part_stride(a.hd);
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  for (int64_t t = 0; t < a.n_tok(s); ++t) {
    const int nb = int(std::min<int64_t>(nb_all, a.pos(s, t) + 1 - j0));
    const int js = int(std::max<int64_t>(0, attn_first_key(a, a.pos(s, t)) - j0));
    if (nb <= js) continue;  // no key of this block is visible to token t
    float* const st = sc + t * kDecBlock * nh;
    float* const pt = part + t * nh * ps;
    for (int h0 = 0; h0 < nh; h0 += 16) {
      const int hn = std::min(16, nh - h0);
      const __mmask16 mh = hn == 16 ? __mmask16(0xffff) : __mmask16((1u << hn) - 1);
      alignas(64) float mo[16], lo[16];
      for (int i = 0; i < 16; ++i) {
        mo[i] = i < hn ? pt[(h0 + i) * ps + hdp] : kNegInf;
        lo[i] = i < hn ? pt[(h0 + i) * ps + hdp + 1] : 0.0f;
      }
      __m512 bmax = _mm512_set1_ps(kNegInf);
      for (int j = js; j < nb; ++j)
        bmax = _mm512_max_ps(bmax, _mm512_maskz_loadu_ps(mh, st + j * nh + h0));
      const __m512 m_old = _mm512_load_ps(mo);
      const __m512 m_new = _mm512_max_ps(m_old, bmax);  // finite: every head sees a key
      const __mmask16 had = _mm512_cmp_ps_mask(m_old, _mm512_set1_ps(kNegInf), _CMP_NEQ_OQ);
      const __m512 corr = _mm512_maskz_mov_ps(had, exp512(_mm512_sub_ps(m_old, m_new)));
      __m512 psum = _mm512_setzero_ps();
      for (int j = js; j < nb; ++j) {
        float* sj = st + j * nh + h0;
        const __m512 p = exp512(_mm512_sub_ps(_mm512_maskz_loadu_ps(mh, sj), m_new));
        _mm512_mask_storeu_ps(sj, mh, p);
        psum = _mm512_add_ps(psum, p);
      }
      alignas(64) float mn[16], cr[16], ln[16];
      _mm512_store_ps(mn, m_new);
      _mm512_store_ps(cr, corr);
      _mm512_store_ps(ln, _mm512_fmadd_ps(_mm512_load_ps(lo), corr, psum));
      for (int i = 0; i < hn; ++i) {
        float* o = pt + (h0 + i) * ps;
        o[hdp] = mn[i];
        o[hdp + 1] = ln[i];
        const __m512 vc = _mm512_set1_ps(cr[i]);
        for (int c = 0; c < nv; ++c)
          _mm512_storeu_ps(o + 16 * c, _mm512_mul_ps(_mm512_loadu_ps(o + 16 * c), vc));
      }
    }
  }
}

// GQA scores: HG query heads of one group (q: HG rows hdp floats apart) against 16 / HG keys
// (key i's slice of the kv head at k + ro[i], fp16), each key vector converted in a register
// once and used by the HG heads. Lane i * HG + h of the result: head h's score for key i. FULL:
// hd is a multiple of 16 (no masked last vector).
template <KvType KV, int HG, bool FULL>
inline __m512 scores_kv(const float* q, int hdp, const kv_elem<KV>* k, const int64_t* ro, int nv,
                        __mmask16 last, int hd) {
  constexpr int NK = 16 / HG;
  __m512 acc[16];
#pragma GCC unroll 16
  for (int i = 0; i < 16; ++i) acc[i] = _mm512_setzero_ps();
  for (int c = 0; c < nv; ++c) {
    __m512 kc[NK];
#pragma GCC unroll 16
    for (int i = 0; i < NK; ++i)
      kc[i] = FULL || c + 1 < nv ? load16<KV>(k + ro[i] + 16 * c)
                                 : load16<KV>(k + ro[i] + 16 * c, last);
#pragma GCC unroll 16
    for (int h = 0; h < HG; ++h) {
      const __m512 qh = _mm512_loadu_ps(q + h * hdp + 16 * c);
#pragma GCC unroll 16
      for (int i = 0; i < NK; ++i) acc[i * HG + h] = _mm512_fmadd_ps(qh, kc[i], acc[i * HG + h]);
    }
  }
  if constexpr (KV == KvType::i8) {  // key i's scale in its HG lanes
    alignas(64) float sk[16];
    for (int i = 0; i < NK; ++i) std::fill_n(sk + i * HG, HG, slice_scale<KV>(k + ro[i], hd));
    return _mm512_mul_ps(reduce16(acc), _mm512_load_ps(sk));
  }
  return reduce16(acc);
}

// scores_kv and store_scores for hg (1, 2, 4, 8 or 16) heads.
template <KvType KV, bool FULL>
inline void score_tile(int hg, const float* q, int hdp, const kv_elem<KV>* k, const int64_t* ro,
                       int nv, __mmask16 last, int hd, float* dst, int64_t kstride) {
  switch (hg) {
    case 16:
      return store_scores<16>(scores_kv<KV, 16, FULL>(q, hdp, k, ro, nv, last, hd), dst, kstride);
    case 8:
      return store_scores<8>(scores_kv<KV, 8, FULL>(q, hdp, k, ro, nv, last, hd), dst, kstride);
    case 4:
      return store_scores<4>(scores_kv<KV, 4, FULL>(q, hdp, k, ro, nv, last, hd), dst, kstride);
    case 2:
      return store_scores<2>(scores_kv<KV, 2, FULL>(q, hdp, k, ro, nv, last, hd), dst, kstride);
    default:
      return store_scores<1>(scores_kv<KV, 1, FULL>(q, hdp, k, ro, nv, last, hd), dst, kstride);
  }
}

// Scores of HG query heads (q: rows hdp floats apart, scaled) against the keys [lo, hi) of one
// tile of a tiled16 K cache (t: the kv head's hd runs of 16 fp16 keys): head h's score for the
// tile's key i (lo <= i < hi) goes to dst[h * hstride + i - lo]. Each converted run feeds HG
// multiply-adds with q's element broadcast from memory; below 4 heads the dimensions are summed
// in NA interleaved chains (the multiply-add's latency). pk: a K run to prefetch into L2, a line
// every other dimension (or null).
template <int HG, int NA>
inline void scores_tile16(const float* q, int hdp, const uint16_t* t, int hd, float* dst,
                          int64_t hstride, int lo, int hi, const char* pk) {
  const __mmask16 m = __mmask16((1u << (hi - lo)) - 1);  // the lanes stored, from lane lo
  __m512 acc[HG][NA];
#pragma GCC unroll 16
  for (int h = 0; h < HG; ++h)
#pragma GCC unroll 4
    for (int c = 0; c < NA; ++c) acc[h][c] = _mm512_setzero_ps();
  int d = 0;
  for (; d + NA <= hd; d += NA) {
#pragma GCC unroll 4
    for (int c = 0; c < NA; ++c) {
      if (pk && ((d + c) & 1) == 0) _mm_prefetch(pk + 32 * (d + c), _MM_HINT_T2);
      const __m512 k =
          _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(t + 16 * (d + c))));
#pragma GCC unroll 16
      for (int h = 0; h < HG; ++h)
        acc[h][c] = _mm512_fmadd_ps(_mm512_set1_ps(q[h * hdp + d + c]), k, acc[h][c]);
    }
  }
  for (; d < hd; ++d) {
    const __m512 k =
        _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(t + 16 * d)));
#pragma GCC unroll 16
    for (int h = 0; h < HG; ++h)
      acc[h][0] = _mm512_fmadd_ps(_mm512_set1_ps(q[h * hdp + d]), k, acc[h][0]);
  }
#pragma GCC unroll 16
  for (int h = 0; h < HG; ++h) {
    __m512 x = acc[h][0];
#pragma GCC unroll 4
    for (int c = 1; c < NA; ++c) x = _mm512_add_ps(x, acc[h][c]);
    if (lo > 0) x = _mm512_maskz_compress_ps(__mmask16(m << lo), x);  // lanes [lo, hi) to 0..
    _mm512_mask_storeu_ps(dst + h * hstride, m, x);
  }
}

// Scores of the keys [j0, j0 + nb) on a tiled16 K cache (fp16) for every (token, head) row of
// sequence s, keys contiguous: sc[(t * n_heads + h) * B + j - j0] (softmax_block's layout). Tile by
// tile (16 positions: a.row(s, p) of the tile's first position is a multiple of 16), kv head by kv
// head, in address order. Lanes of keys outside [j0, j0 + nb) are not stored. With pf_k, each
// (tile, kv head) prefetches into L2 the K run ~8 KB further on in that order (keys up to k1), a
// line every other dimension of its first score tile; with pf_v, also this tile's V rows of its kv
// head. The GQA decode takes pf_k, and pf_v for its first block (chunk_gqa_tiled). The MHA decode
// (tiles of 128 KB of K at 7B's heads, its V rows prefetched by its own P·V loop) takes pf_k where
// StreamTuning::mha_k_prefetch says (Intel): from DRAM on AMD Zen 4, 7B's heads took 1.09-1.2x the
// time with both prefetches (tinyllama's 0.93-0.96x); on an Intel Xeon K alone made the tiles as
// fast as rows, where without it they took 1.25-1.29x their time, and K with V changed nothing
// (reports/cpu-kernels.md).
inline void scores_tiled(const AttnArgs& a, int64_t s, int64_t j0, int nb, int64_t k1,
                         const float* qf, float* sc, int B, bool pf_k, bool pf_v) {
  const int hd = a.hd, nh = a.n_heads, nkv = a.n_kv_heads, group = nh / nkv;
  const int hdp = 16 * ((hd + 15) / 16);
  const int64_t nt = a.n_tok(s), run = int64_t(hd) * 16, row_bytes = a.row_elems() * 2;
  const int ahead = int(std::max<int64_t>(1, 8192 / (run * 2)));  // runs
  const uint16_t* kc = static_cast<const uint16_t*>(a.k_cache);
  const char* vc = static_cast<const char*>(a.v_cache);
  for (int64_t pt = j0 / 16 * 16; pt < j0 + nb; pt += 16) {
    const int lo = int(std::max(j0, pt) - pt), hi = int(std::min(j0 + nb, pt + 16) - pt);
    const int64_t row0 = a.row(s, pt);
    const uint16_t* tile = kc + a.k_tile(row0 / 16);
    for (int kvh = 0; kvh < nkv; ++kvh) {
      const uint16_t* t = tile + kvh * run;
      // The run `ahead` runs on: this tile's or one further on.
      const int64_t pa = pt + 16 * ((kvh + ahead) / nkv);
      const char* pk = nullptr;  // prefetched line by line in the first score tile's loop
      if (pf_k && pa < k1) {
        const uint16_t* ta = pa == pt ? tile : kc + a.k_tile(a.row(s, pa) / 16);
        pk = reinterpret_cast<const char*>(ta + (kvh + ahead) % nkv * run);
      }
      if (pf_v)
        for (int i = lo; i < hi; ++i)
          for (int64_t l = 0; l < int64_t(hd) * 2; l += 64)
            _mm_prefetch(vc + (row0 + i) * row_bytes + int64_t(kvh) * hd * 2 + l, _MM_HINT_T2);
      for (int64_t tk = 0; tk < nt; ++tk) {
        const auto [vlo, vhi] = visible(a, s, tk, pt, lo, hi - lo);
        if (vlo >= vhi) continue;
        for (int hh = 0; hh < group;) {
          const int hg = tile_heads(group - hh, 16);
          const int64_t r = tk * nh + kvh * group + hh;
          const float* q = qf + r * hdp;
          float* d = sc + r * B + (pt + lo - j0);
          switch (hg) {
            case 16:
              scores_tile16<16, 1>(q, hdp, t, hd, d, B, lo, hi, pk);
              break;
            case 8:
              scores_tile16<8, 1>(q, hdp, t, hd, d, B, lo, hi, pk);
              break;
            case 4:
              scores_tile16<4, 1>(q, hdp, t, hd, d, B, lo, hi, pk);
              break;
            case 2:
              scores_tile16<2, 2>(q, hdp, t, hd, d, B, lo, hi, pk);
              break;
            default:
              scores_tile16<1, 4>(q, hdp, t, hd, d, B, lo, hi, pk);
          }
          pk = nullptr;
          hh += hg;
        }
      }
    }
  }
}

// Lines of the next block's V rows that a P·V loop prefetches into L2 as it goes (base: the kv
// head's slice in the V cache, in bytes; ro: the next block's row offsets, elements; with key j
// of the block, key j of the next, up to n; `lines` 64-byte lines a row). None by default.
struct PvPrefetch {
  const char* base = nullptr;
  const int64_t* ro = nullptr;
  int n = 0, lines = 0;
};

// GQA P·V: HB query heads of one group over n keys (probabilities p[key * pk + head * ph]; on an
// int8 cache already multiplied by each value slice's scale), CB vectors of each head's output (o
// rows ostride apart) held in registers; each key's CB value vectors (at v + ro[key]) are
// converted in registers once for the HB heads. LASTM: the mask of the CB-th vector (the head's
// last, when hd is not a multiple of 16; else all ones).
template <KvType KV, int HB, int CB, bool FULL>
inline void pv_kv(const float* p, int64_t pk, int64_t ph, int n, const kv_elem<KV>* v,
                  const int64_t* ro, float* o, int64_t ostride, __mmask16 lastm,
                  const PvPrefetch& pf = {}) {
  __m512 acc[HB][CB];
#pragma GCC unroll 16
  for (int h = 0; h < HB; ++h)
#pragma GCC unroll 16
    for (int c = 0; c < CB; ++c) acc[h][c] = _mm512_loadu_ps(o + h * ostride + 16 * c);
  for (int j = 0; j < n; ++j) {
    const kv_elem<KV>* vj = v + ro[j];
    if (pf.base && j < pf.n)
      for (int l = 0; l < pf.lines; ++l)
        _mm_prefetch(pf.base + pf.ro[j] * int64_t(sizeof(kv_elem<KV>)) + 64 * l, _MM_HINT_T2);
    __m512 x[CB];
#pragma GCC unroll 16
    for (int c = 0; c < CB; ++c)
      x[c] = FULL || c + 1 < CB ? load16<KV>(vj + 16 * c) : load16<KV>(vj + 16 * c, lastm);
#pragma GCC unroll 16
    for (int h = 0; h < HB; ++h) {
      const __m512 pjh = _mm512_set1_ps(p[j * pk + h * ph]);
#pragma GCC unroll 16
      for (int c = 0; c < CB; ++c) acc[h][c] = _mm512_fmadd_ps(pjh, x[c], acc[h][c]);
    }
  }
#pragma GCC unroll 16
  for (int h = 0; h < HB; ++h)
#pragma GCC unroll 16
    for (int c = 0; c < CB; ++c) _mm512_storeu_ps(o + h * ostride + 16 * c, acc[h][c]);
}

// pv_kv for hb (1, 2, 4 or 8) heads and cb (1, 2, 4 or 8) vectors, hb * cb <= 16.
template <KvType KV, bool FULL>
inline void pv_kv_any(int hb, int cb, const float* p, int64_t pk, int64_t ph, int n,
                      const kv_elem<KV>* v, const int64_t* ro, float* o, int64_t ostride,
                      __mmask16 lastm, const PvPrefetch& pf = {}) {
  switch (hb * 16 + cb) {
    case 8 * 16 + 2:
      return pv_kv<KV, 8, 2, FULL>(p, pk, ph, n, v, ro, o, ostride, lastm, pf);
    case 8 * 16 + 1:
      return pv_kv<KV, 8, 1, FULL>(p, pk, ph, n, v, ro, o, ostride, lastm, pf);
    case 4 * 16 + 4:
      return pv_kv<KV, 4, 4, FULL>(p, pk, ph, n, v, ro, o, ostride, lastm, pf);
    case 4 * 16 + 2:
      return pv_kv<KV, 4, 2, FULL>(p, pk, ph, n, v, ro, o, ostride, lastm, pf);
    case 4 * 16 + 1:
      return pv_kv<KV, 4, 1, FULL>(p, pk, ph, n, v, ro, o, ostride, lastm, pf);
    case 2 * 16 + 8:
      return pv_kv<KV, 2, 8, FULL>(p, pk, ph, n, v, ro, o, ostride, lastm, pf);
    case 2 * 16 + 4:
      return pv_kv<KV, 2, 4, FULL>(p, pk, ph, n, v, ro, o, ostride, lastm, pf);
    case 2 * 16 + 2:
      return pv_kv<KV, 2, 2, FULL>(p, pk, ph, n, v, ro, o, ostride, lastm, pf);
    case 2 * 16 + 1:
      return pv_kv<KV, 2, 1, FULL>(p, pk, ph, n, v, ro, o, ostride, lastm, pf);
    case 1 * 16 + 8:
      return pv_kv<KV, 1, 8, FULL>(p, pk, ph, n, v, ro, o, ostride, lastm, pf);
    case 1 * 16 + 4:
      return pv_kv<KV, 1, 4, FULL>(p, pk, ph, n, v, ro, o, ostride, lastm, pf);
    case 1 * 16 + 2:
      return pv_kv<KV, 1, 2, FULL>(p, pk, ph, n, v, ro, o, ostride, lastm, pf);
    default:
      return pv_kv<KV, 1, 1, FULL>(p, pk, ph, n, v, ro, o, ostride, lastm, pf);
  }
}

// P·V of the GQA decode, token t, the visible keys [lo, hi) of a block (offsets from its start;
// roff: their V rows' offsets), head h's probability for key j at pt[h * ph + j * pk]: each kv
// head's query heads in tiles of up to 8 heads by 16 / heads vectors of the output.
template <KvType KV, bool FULL>
inline void pv_gqa(const AttnArgs& a, int64_t t, int64_t lo, int64_t hi, const int64_t* roff,
                   const float* pt, int64_t pk, int64_t ph, float* part,
                   const int64_t* ro_next = nullptr, int n_next = 0) {
  const int hd = a.hd, nh = a.n_heads, group = nh / a.n_kv_heads, nv = (hd + 15) / 16;
  const __mmask16 last = head_mask(nv - 1, nv, hd);
  const int64_t ps = attn_part_stride(hd);
  for (int kvh = 0; kvh < a.n_kv_heads; ++kvh) {
    for (int hh = 0; hh < group;) {
      const int hb = tile_heads(group - hh, 8);
      const int64_t h = int64_t(kvh) * group + hh, r = t * nh + h;
      for (int c0 = 0; c0 < nv;) {
        int cb = std::min(8, 16 / hb);
        while (cb > nv - c0) cb /= 2;
        const __mmask16 lm = c0 + cb == nv ? last : __mmask16(0xffff);
        PvPrefetch pf;
        if (ro_next && hh == 0) {  // the kv head's passes: the lines of the next V rows that
          // start within the pass's dimensions
          constexpr int64_t es = sizeof(kv_elem<KV>);
          const int64_t b0 = (16 * c0 * es + 63) / 64, b1 = (16 * (c0 + cb) * es + 63) / 64;
          if (b1 > b0)
            pf = {static_cast<const char*>(a.v_cache) + kvh * a.slice_elems() * es + 64 * b0,
                  ro_next, n_next, int(b1 - b0)};
        }
        pv_kv_any<KV, FULL>(hb, cb, pt + h * ph + lo * pk, pk, ph, int(hi - lo),
                            kv_ptr<KV>(a.v_cache) + kvh * a.slice_elems() + 16 * c0, roff + lo,
                            part + r * ps + 16 * c0, ps, lm, pf);
        c0 += cb;
      }
      hh += hb;
    }
  }
}

// The GQA decode on a tiled16 K cache (fp16): per kTiledBlock-key block, scores_tiled (keys in
// the vector lanes: no reduction), softmax_block, then P·V as chunk_gqa_t's, the probabilities
// read key-major per head. The scores prefetch K; the V rows of a block are prefetched by the
// P·V of the block before (a line or two a key as it goes), so the memory serves K while the
// scores run and V while the P·V runs. (Before, each tile's V rows came in a burst with its
// scores, beside K, and nothing was fetched during the P·V: on the Intel Xeon, tinyllama's heads
// from DRAM, 1.08-1.15x as fast at 2,000 positions and 1.07-1.24x at 4,000, level at 500 and hot;
// reports/cpu-kernels.md.)
template <bool FULL>
void chunk_gqa_tiled(const AttnArgs& a, int64_t s, int64_t k0, int64_t k1, float* qfp, float* scp,
                     float* part) {
  constexpr int B = kTiledBlock;
  int64_t roff[2][B];  // this block's V row offsets and the next's
  int cur = 0;
  if (k0 < k1) fill_row_offsets(a, s, k0, int(std::min<int64_t>(B, k1 - k0)), roff[0]);
  for (int64_t j0 = k0; j0 < k1; j0 += B, cur ^= 1) {
    const int nb_all = int(std::min<int64_t>(B, k1 - j0));
    const int nb_next = int(std::clamp<int64_t>(k1 - j0 - B, 0, B));
    if (nb_next > 0) fill_row_offsets(a, s, j0 + B, nb_next, roff[cur ^ 1]);
    // V rows prefetched in a burst with the scores for the first block only; each block's P·V
    // prefetches the next block's as it goes.
    scores_tiled(a, s, j0, nb_all, k1, qfp, scp, B, true, j0 == k0);
    softmax_block(a, s, j0, nb_all, scp, part, B);
    bool next_fetched = false;
    for (int64_t t = 0; t < a.n_tok(s); ++t) {
      const auto [lo, hi] = visible(a, s, t, j0, 0, nb_all);
      if (lo >= hi) continue;
      pv_gqa<KvType::f16, FULL>(a, t, lo, hi, roff[cur], scp + t * a.n_heads * B, 1, B, part,
                                next_fetched ? nullptr : roff[cur ^ 1], nb_next);
      next_fetched = true;
    }
  }
}

// Decode with GQA (tinyllama's 32 query heads on 4 kv heads): per 64-key block, scores of each
// kv head's query heads 16 keys at a time with K converted in registers (each converted vector
// feeding 8 heads' multiply-adds), one softmax step with the heads in the vector lanes, then P·V
// with V converted in registers likewise. Each score tile prefetches into L2 its kv head's slices
// of the K rows kAhead keys on (~8 KB of rows ahead) and of its own V rows: spread over the tiles,
// not in one burst per 16 keys. (Before, K and V were first converted into fp32 copies in L1,
// which cost as much as the scores' arithmetic. From DRAM this kernel ran 1.04-1.09x the copies'
// time with the prefetches in a burst of 256 lines, 0.76-0.91x spread; reports/cpu-kernels.md.)
//
// Dot: where the scores and P·V take another arithmetic (attention_bf16_avx512.cpp's Bf16Dot:
// q in bf16 at qb, rows hd apart; NoDot: the fp32 multiply-adds here).
struct NoDot {
  static constexpr bool enabled = false;
};
template <KvType KV, bool FULL, class Dot = NoDot>
void chunk_gqa_t(const AttnArgs& a, int64_t s, int64_t k0, int64_t k1, float* qfp, float* scp,
                 float* part, const uint16_t* qb = nullptr) {
  constexpr int B = kDecBlock;
  const int64_t row_bytes = a.row_elems() * int64_t(sizeof(kv_elem<KV>));
  const int slice_bytes = int(a.slice_elems() * int64_t(sizeof(kv_elem<KV>)));
  const int kAhead = int(std::clamp<int64_t>(8192 / row_bytes, 4, 32));
  const int hd = a.hd, group = a.n_heads / a.n_kv_heads, nh = a.n_heads;
  const int nv = (hd + 15) / 16, hdp = 16 * nv;
  const __mmask16 last = head_mask(nv - 1, nv, hd);
  const int64_t nt = a.n_tok(s), ps = attn_part_stride(hd);
  int64_t roff[B + 32];
  if constexpr (KV == KvType::f16 && !Dot::enabled)
    if (a.k_tiled) return chunk_gqa_tiled<FULL>(a, s, k0, k1, qfp, scp, part);
  for (int64_t j0 = k0; j0 < k1; j0 += B) {
    const int nb_all = int(std::min<int64_t>(B, k1 - j0));
    const int nro = int(std::min<int64_t>(B + kAhead, k1 - j0));
    fill_row_offsets(a, s, j0, nro, roff);
    for (int j = nro; j < B; ++j) roff[j] = roff[0];  // past the last key: a row that exists
    for (int jb = 0; jb < nb_all; jb += 16) {
      const int jn = std::min(16, nb_all - jb);
      for (int64_t t = 0; t < nt; ++t) {
        const auto [lo, hi] = visible(a, s, t, j0, jb, jn);
        if (lo >= hi) continue;
        for (int kvh = 0; kvh < a.n_kv_heads; ++kvh) {
          const kv_elem<KV>* kk = kv_ptr<KV>(a.k_cache) + kvh * a.slice_elems();
          for (int hh = 0; hh < group;) {
            const int hg = tile_heads(group - hh, 16);
            const int h = kvh * group + hh;
            const float* q = qfp + (t * nh + h) * hdp;
            float* dst = scp + (t * B + jb) * nh + h;
            for (int i = 0; i < 16; i += 16 / hg) {
              const int64_t* ro = roff + jb + i;
              float* d = dst + i * nh;
              if (t == 0 && hh == 0)  // this kv head's slices: K rows kAhead on, V rows now
                for (int x = 0; x < 16 / hg; ++x) {
                  const char* kp = jb + i + x + kAhead < nro
                                       ? reinterpret_cast<const char*>(kk + ro[x + kAhead])
                                       : nullptr;
                  const char* vp = jb + i + x < nb_all
                                       ? reinterpret_cast<const char*>(
                                             kv_ptr<KV>(a.v_cache) + ro[x] + kvh * a.slice_elems())
                                       : nullptr;
                  for (int l = 0; l < slice_bytes; l += 64) {
                    if (kp) _mm_prefetch(kp + l, _MM_HINT_T2);
                    if (vp) _mm_prefetch(vp + l, _MM_HINT_T2);
                  }
                }
              if constexpr (Dot::enabled)
                Dot::score_tile(hg, qb + (t * nh + h) * hd, hd, kk, ro, d, nh);
              else
                score_tile<KV, FULL>(hg, q, hdp, kk, ro, nv, last, hd, d, nh);
            }
            hh += hg;
          }
        }
      }
    }
    softmax_block_hl(a, s, j0, nb_all, scp, part);
    for (int64_t t = 0; t < nt; ++t) {
      const auto [lo, hi] = visible(a, s, t, j0, 0, nb_all);
      if (lo >= hi) continue;
      if constexpr (KV == KvType::i8)  // each key's probabilities times its value slices' scales
        for (int64_t j = lo; j < hi; ++j)
          for (int kvh = 0; kvh < a.n_kv_heads; ++kvh) {
            const float sv =
                slice_scale<KV>(kv_ptr<KV>(a.v_cache) + roff[j] + kvh * a.slice_elems(), hd);
            float* pj = scp + (t * B + j) * nh + kvh * group;
            for (int hh = 0; hh < group; ++hh) pj[hh] *= sv;
          }
      if constexpr (Dot::enabled) {
        const uint32_t* pp = Dot::pairs(scp + (t * B + lo) * nh, nh, int(hi - lo));
        for (int kvh = 0; kvh < a.n_kv_heads; ++kvh)
          for (int hh = 0; hh < group;) {
            const int hb = tile_heads(group - hh, 8);
            const int64_t r = t * nh + int64_t(kvh) * group + hh;
            Dot::pv(hb, hd, pp + (r - t * nh), nh, int(hi - lo),
                    kv_ptr<KV>(a.v_cache) + int64_t(kvh) * hd, roff + lo, part + r * ps, ps);
            hh += hb;
          }
        continue;
      }
      pv_gqa<KV, FULL>(a, t, lo, hi, roff, scp + t * B * nh, nh, 1, part);
    }
  }
}

template <KvType KV>
void chunk_gqa(const AttnArgs& a, int64_t s, int64_t k0, int64_t k1, float* qfp, float* scp,
               float* part) {
  if (a.hd % 16 == 0)
    chunk_gqa_t<KV, true>(a, s, k0, k1, qfp, scp, part);
  else
    chunk_gqa_t<KV, false>(a, s, k0, k1, qfp, scp, part);
}

}  // namespace
}  // namespace latprof::cpu::detail
