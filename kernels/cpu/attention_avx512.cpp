// AVX-512 attention unit: the online-softmax algorithm of attention.cpp, vectorised. For each
// query token, a block of 64 keys of the kv head is converted from fp16 once (vcvtph2ps) and
// used by every query head of the group; the exponentials are evaluated 16 at a time.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

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

// dst[0 .. 16 * nv) = one head's fp16 row src[0 .. hd) in fp32, zero past hd. Head sizes that
// are a multiple of 16 (all common models) take a loop without masks: the masked form's
// per-vector branch was ~1/4 of the decode attention's own time in a profile.
inline void cvt_head(const uint16_t* src, float* dst, int nv, int hd) {
  if (hd == 16 * nv) {
#pragma GCC unroll 8
    for (int c = 0; c < nv; ++c)
      _mm512_storeu_ps(
          dst + 16 * c,
          _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + 16 * c))));
  } else {
    for (int c = 0; c < nv; ++c)
      _mm512_storeu_ps(dst + 16 * c, _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(head_mask(c, nv, hd),
                                                                              src + 16 * c)));
  }
}

}  // namespace

// Prefill (many query tokens of one sequence, one kv head): a tile of query rows (token, head of
// the group) is held transposed, rows in the vector lanes, so that every step is a plain
// multiply-add over lanes and the softmax needs no horizontal reduction:
//   S^T[key][row]  = sum_d K[key][d] * Q^T[d][row]       (K broadcast, Q^T rows loaded)
//   online softmax per lane over the block's keys (masked lanes: p = 0)
//   O^T[d][row]   += sum_key V[key][d] * P^T[key][row]   (V broadcast, P^T rows loaded)
// Each 64-key block of K and V is converted from fp16 once per tile (up to 64 rows), not once
// per query token.
namespace {

constexpr int kKeyBlock = 64;  // keys per online-softmax step

// S^T[i][row] for keys i0..i0+7 (rows of kf) and NRV vectors of rows.
template <int NRV>
inline void tile_scores(const float* qt, int64_t rp, const float* kf, int hdp, int hd, float* st) {
  __m512 acc[8][NRV];
#pragma GCC unroll 8
  for (int j = 0; j < 8; ++j)
    for (int v = 0; v < NRV; ++v) acc[j][v] = _mm512_setzero_ps();
  for (int d = 0; d < hd; ++d) {
    __m512 q[NRV];
    for (int v = 0; v < NRV; ++v) q[v] = _mm512_loadu_ps(qt + d * rp + 16 * v);
#pragma GCC unroll 8
    for (int j = 0; j < 8; ++j) {
      const __m512 k = _mm512_set1_ps(kf[j * hdp + d]);
      for (int v = 0; v < NRV; ++v) acc[j][v] = _mm512_fmadd_ps(k, q[v], acc[j][v]);
    }
  }
#pragma GCC unroll 8
  for (int j = 0; j < 8; ++j)
    for (int v = 0; v < NRV; ++v) _mm512_storeu_ps(st + j * rp + 16 * v, acc[j][v]);
}

// O^T[d0..d0+7][rows] = O^T * corr + sum over nk keys of V[key][d] * P^T[key][rows].
template <int NRV>
inline void tile_pv(const float* st, int64_t rp, const float* vf, int hdp, int nk, float* ot,
                    const float* corr) {
  __m512 acc[8][NRV];
#pragma GCC unroll 8
  for (int dd = 0; dd < 8; ++dd)
    for (int v = 0; v < NRV; ++v)
      acc[dd][v] =
          _mm512_mul_ps(_mm512_loadu_ps(ot + dd * rp + 16 * v), _mm512_loadu_ps(corr + 16 * v));
  for (int i = 0; i < nk; ++i) {
    __m512 p[NRV];
    for (int v = 0; v < NRV; ++v) p[v] = _mm512_loadu_ps(st + i * rp + 16 * v);
#pragma GCC unroll 8
    for (int dd = 0; dd < 8; ++dd) {
      const __m512 x = _mm512_set1_ps(vf[i * hdp + dd]);
      for (int v = 0; v < NRV; ++v) acc[dd][v] = _mm512_fmadd_ps(x, p[v], acc[dd][v]);
    }
  }
#pragma GCC unroll 8
  for (int dd = 0; dd < 8; ++dd)
    for (int v = 0; v < NRV; ++v) _mm512_storeu_ps(ot + dd * rp + 16 * v, acc[dd][v]);
}

// Query tokens [t0, t1) of sequence s with kv head kvh: (t1 - t0) * group rows.
void attention_tile(const AttnArgs& a, int64_t s, int kvh, int64_t t0, int64_t t1) {
  const int hd = a.hd, group = a.n_heads / a.n_kv_heads;
  const int nv = (hd + 15) / 16, hdp = 16 * nv;
  const int64_t kv_dim = int64_t(a.n_kv_heads) * hd;
  const int64_t rows = (t1 - t0) * group, nrv = (rows + 15) / 16, rp = 16 * nrv;
  const float scale = 1.0f / std::sqrt(float(hd));
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  // Scratch 64-byte aligned (every row is a multiple of 16 floats: no load splits a cache line).
  thread_local AlignedFloats qt_buf, ot_buf, st_buf, kf_buf, vf_buf, m_buf, l_buf, c_buf;
  thread_local std::vector<int32_t> pos_buf, first_buf;
  auto scratch = [](AlignedFloats& b, int64_t n) {
    b.reserve(size_t(n));
    return b.p;
  };
  auto filled = [&](AlignedFloats& b, int64_t n, float v) {
    std::fill_n(scratch(b, n), n, v);
    return b.p;
  };
  float* const qt = filled(qt_buf, hdp * rp, 0.0f);
  float* const ot = filled(ot_buf, hdp * rp, 0.0f);
  float* const st = scratch(st_buf, kKeyBlock * rp);
  float* const kf = filled(kf_buf, kKeyBlock * hdp, 0.0f);  // rows past a short block stay finite
  float* const vf = scratch(vf_buf, kKeyBlock * hdp);
  float* const mrow = filled(m_buf, rp, kNegInf);
  float* const lrow = filled(l_buf, rp, 0.0f);
  float* const cr = scratch(c_buf, rp);
  pos_buf.assign(size_t(rp), -1);  // padding lanes see no key
  first_buf.assign(size_t(rp), 0);
  int64_t kmin = std::numeric_limits<int64_t>::max(), kmax = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t t = t0 + r / group, p = a.pos(s, t), first = attn_first_key(a, p);
    pos_buf[size_t(r)] = int32_t(p);
    first_buf[size_t(r)] = int32_t(first);
    kmin = std::min(kmin, first);
    kmax = std::max(kmax, p + 1);
    const float* q = a.q + ((a.tok0(s) + t) * a.n_heads + int64_t(kvh) * group + r % group) * hd;
    for (int d = 0; d < hd; ++d) qt[d * rp + r] = q[d] * scale;
  }
  // Positions of one chunk are consecutive, so every key in [kmin, kmax) is visible to some row
  // of the tile (and was written); the blocks stay aligned to multiples of 64.
  for (int64_t j0 = kmin / kKeyBlock * kKeyBlock; j0 < kmax; j0 += kKeyBlock) {
    const int64_t jb = std::max(j0, kmin), je = std::min(j0 + kKeyBlock, kmax);
    const int nk = int(je - jb);
    for (int i = 0; i < nk; ++i) {
      const uint16_t* src = a.k_cache + a.row(s, jb + i) * kv_dim + int64_t(kvh) * hd;
      cvt_head(src, kf + i * hdp, nv, hd);
    }
    for (int i0 = 0; i0 < nk; i0 += 8) {
      int64_t v = 0;
      for (; v + 2 <= nrv; v += 2)
        tile_scores<2>(qt + 16 * v, rp, kf + i0 * hdp, hdp, hd, st + i0 * rp + 16 * v);
      if (v < nrv) tile_scores<1>(qt + 16 * v, rp, kf + i0 * hdp, hdp, hd, st + i0 * rp + 16 * v);
    }
    // Online softmax per lane: mask, block max, rescale factor, p = exp(s - max), sums.
    for (int64_t v = 0; v < nrv; ++v) {
      const __m512i posv = _mm512_loadu_si512(pos_buf.data() + 16 * v);
      const __m512i firstv = _mm512_loadu_si512(first_buf.data() + 16 * v);
      __m512 bmax = _mm512_set1_ps(kNegInf);
      for (int i = 0; i < nk; ++i) {
        const __m512i kp = _mm512_set1_epi32(int32_t(jb + i));
        const __mmask16 vis =
            _mm512_cmple_epi32_mask(kp, posv) & _mm512_cmpge_epi32_mask(kp, firstv);
        bmax = _mm512_mask_max_ps(bmax, vis, bmax, _mm512_loadu_ps(st + i * rp + 16 * v));
      }
      const __m512 m_old = _mm512_loadu_ps(mrow + 16 * v);
      const __m512 m_new = _mm512_max_ps(m_old, bmax);
      const __mmask16 live = _mm512_cmp_ps_mask(m_new, _mm512_set1_ps(kNegInf), _CMP_NEQ_OQ);
      const __m512 m_sub = _mm512_maskz_mov_ps(live, m_new);  // lanes with no key yet: 0
      const __mmask16 had = _mm512_cmp_ps_mask(m_old, _mm512_set1_ps(kNegInf), _CMP_NEQ_OQ);
      const __m512 corr = _mm512_maskz_mov_ps(had, exp512(_mm512_sub_ps(m_old, m_sub)));
      _mm512_storeu_ps(cr + 16 * v, corr);
      __m512 psum = _mm512_setzero_ps();
      for (int i = 0; i < nk; ++i) {
        const __m512i kp = _mm512_set1_epi32(int32_t(jb + i));
        const __mmask16 vis =
            _mm512_cmple_epi32_mask(kp, posv) & _mm512_cmpge_epi32_mask(kp, firstv);
        float* si = st + i * rp + 16 * v;
        const __m512 p =
            _mm512_maskz_mov_ps(vis, exp512(_mm512_sub_ps(_mm512_loadu_ps(si), m_sub)));
        _mm512_storeu_ps(si, p);
        psum = _mm512_add_ps(psum, p);
      }
      _mm512_storeu_ps(lrow + 16 * v, _mm512_fmadd_ps(_mm512_loadu_ps(lrow + 16 * v), corr, psum));
      _mm512_storeu_ps(mrow + 16 * v, m_new);
    }
    for (int i = 0; i < nk; ++i) {
      const uint16_t* src = a.v_cache + a.row(s, jb + i) * kv_dim + int64_t(kvh) * hd;
      cvt_head(src, vf + i * hdp, nv, hd);
    }
    for (int d0 = 0; d0 < hdp; d0 += 8) {
      int64_t v = 0;
      for (; v + 2 <= nrv; v += 2)
        tile_pv<2>(st + 16 * v, rp, vf + d0, hdp, nk, ot + d0 * rp + 16 * v, cr + 16 * v);
      if (v < nrv)
        tile_pv<1>(st + 16 * v, rp, vf + d0, hdp, nk, ot + d0 * rp + 16 * v, cr + 16 * v);
    }
  }
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t t = t0 + r / group;
    float* out = a.out + ((a.tok0(s) + t) * a.n_heads + int64_t(kvh) * group + r % group) * hd;
    const float inv = 1.0f / lrow[r];
    for (int d = 0; d < hd; ++d) out[d] = ot[d * rp + r] * inv;
  }
}

}  // namespace

void attention_unit_avx512(const AttnArgs& a, int64_t s, int kvh, int64_t t0, int64_t t1) {
  const int group = a.n_heads / a.n_kv_heads;
  const int64_t tile_tokens = std::max<int64_t>(1, kAttnTileRows / group);
  for (int64_t u0 = t0; u0 < t1; u0 += tile_tokens)
    attention_tile(a, s, kvh, u0, std::min(t1, u0 + tile_tokens));
}

namespace {

// o[0 .. 16 * CN) += sum over n keys of p[j] * v[j * vstride + ...], o held in registers. Up to
// CN = 4 (hd <= 64) the even and odd keys go to two sets of accumulators, added at the end: one
// set's CN chains waited on the FMA latency (4 cycles a key), the two fill both FMA pipes.
template <int CN>
inline void pv_rows(const float* p, int n, const float* v, int64_t vstride, float* o) {
  constexpr int S = CN <= 4 ? 2 : 1;  // accumulator sets
  __m512 acc[S][CN];
#pragma GCC unroll 8
  for (int c = 0; c < CN; ++c) {
    acc[0][c] = _mm512_loadu_ps(o + 16 * c);
    if constexpr (S == 2) acc[1][c] = _mm512_setzero_ps();
  }
  int j = 0;
  for (; j + S <= n; j += S) {
#pragma GCC unroll 2
    for (int u = 0; u < S; ++u) {
      const __m512 pj = _mm512_set1_ps(p[j + u]);
      const float* vj = v + (j + u) * vstride;
#pragma GCC unroll 8
      for (int c = 0; c < CN; ++c)
        acc[u][c] = _mm512_fmadd_ps(pj, _mm512_loadu_ps(vj + 16 * c), acc[u][c]);
    }
  }
  for (; j < n; ++j) {
    const __m512 pj = _mm512_set1_ps(p[j]);
    const float* vj = v + j * vstride;
#pragma GCC unroll 8
    for (int c = 0; c < CN; ++c)
      acc[0][c] = _mm512_fmadd_ps(pj, _mm512_loadu_ps(vj + 16 * c), acc[0][c]);
  }
#pragma GCC unroll 8
  for (int c = 0; c < CN; ++c) {
    if constexpr (S == 2) acc[0][c] = _mm512_add_ps(acc[0][c], acc[1][c]);
    _mm512_storeu_ps(o + 16 * c, acc[0][c]);
  }
}

// s[0 .. 16) = the dot products of q (nv vectors) with 16 rows of k (row stride hdp): 16 lane-wise
// accumulators, then one transposing reduction tree (45 shuffles and adds for 16 keys, where one
// horizontal reduction per key took ~9 uops).
inline void scores16(const float* q, const float* k, int nv, int hdp, float* s) {
  __m512 acc[16];
#pragma GCC unroll 16
  for (int j = 0; j < 16; ++j) acc[j] = _mm512_setzero_ps();
  for (int c = 0; c < nv; ++c) {
    const __m512 qc = _mm512_loadu_ps(q + 16 * c);
#pragma GCC unroll 16
    for (int j = 0; j < 16; ++j)
      acc[j] = _mm512_fmadd_ps(qc, _mm512_loadu_ps(k + j * hdp + 16 * c), acc[j]);
  }
  // Level 1: pairs of keys; within each 128-bit lane [a0+a2, b0+b2, a1+a3, b1+b3].
  __m512 b[8];
#pragma GCC unroll 8
  for (int i = 0; i < 8; ++i)
    b[i] = _mm512_add_ps(_mm512_unpacklo_ps(acc[2 * i], acc[2 * i + 1]),
                         _mm512_unpackhi_ps(acc[2 * i], acc[2 * i + 1]));
  // Level 2: four keys per 128-bit lane, one partial sum each.
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
  _mm512_storeu_ps(
      s, _mm512_add_ps(_mm512_shuffle_f32x4(d0, d1, 0x88), _mm512_shuffle_f32x4(d0, d1, 0xDD)));
}

using PvRowsFn = void (*)(const float*, int, const float*, int64_t, float*);
constexpr PvRowsFn kPvRows[8] = {pv_rows<1>, pv_rows<2>, pv_rows<3>, pv_rows<4>,
                                 pv_rows<5>, pv_rows<6>, pv_rows<7>, pv_rows<8>};

}  // namespace

// Decode (few query tokens): keys [k0, k1) of sequence s (k0 a multiple of 64) for every token and
// every head, walking the cache key-major so each key's whole K row and V row (all kv heads,
// contiguous) stream from DRAM in address order, with an online-softmax step per 64-key block
// (the prefill tile's arithmetic differs in order: the two agree to rounding, as the tests check).
// Writes the un-normalised partial state of every (token, head) row to part: o[hdp], then max,
// then sum, stride attn_part_stride(hd).
void attention_chunk_avx512(const AttnArgs& a, int64_t s, int64_t k0, int64_t k1, float* part) {
  constexpr int B = 64, kAhead = 6;  // keys per softmax step; prefetch distance in rows
  const int hd = a.hd, group = a.n_heads / a.n_kv_heads, nh = a.n_heads;
  const int nv = (hd + 15) / 16, hdp = 16 * nv;
  const int64_t kv_dim = int64_t(a.n_kv_heads) * hd, nt = a.n_tok(s), ps = attn_part_stride(hd);
  // Keys per P·V sub-block: up to 16, as many as keep their converted V rows within 16 KB of L1
  // (16 at tinyllama's 4 x 64, 1 at llama-2-7b's 32 x 128: from L2 they ran 30% slower).
  const int kSub =
      int(std::clamp<int64_t>((int64_t(16) << 10) / (int64_t(a.n_kv_heads) * hdp * 4), 1, 16));
  const float scale = 1.0f / std::sqrt(float(hd));
  const __m512 vscale = _mm512_set1_ps(scale);
  thread_local AlignedFloats qf, sc, kb, vb;
  qf.reserve(size_t(nt * nh * hdp));
  sc.reserve(size_t(nt * nh * B));
  kb.reserve(size_t(16 * a.n_kv_heads * hdp));
  vb.reserve(size_t(kSub * a.n_kv_heads * hdp));
  // Raw pointers: thread_local objects are not re-read (TLS address, buffer) in the loops.
  float* const qfp = qf.p;
  float* const scp = sc.p;
  float* const kbp = kb.p;
  float* const vbp = vb.p;
  for (int64_t t = 0; t < nt; ++t)
    for (int h = 0; h < nh; ++h) {
      const float* q = a.q + ((a.tok0(s) + t) * nh + h) * hd;
      float* o = part + (t * nh + h) * ps;
      for (int c = 0; c < nv; ++c) {
        _mm512_storeu_ps(
            qfp + ((t * nh + h) * hdp + 16 * c),
            _mm512_mul_ps(_mm512_maskz_loadu_ps(head_mask(c, nv, hd), q + 16 * c), vscale));
        _mm512_storeu_ps(o + 16 * c, _mm512_setzero_ps());
      }
      o[hdp] = -std::numeric_limits<float>::infinity();
      o[hdp + 1] = 0;
    }
  for (int64_t j0 = k0; j0 < k1; j0 += B) {
    const int nb_all = int(std::min<int64_t>(B, k1 - j0));
    if (group == 1) {
      // Scores without GQA (one query head per kv head, as llama-2-7b): key-major, one pass
      // over the block's K rows, each converted once and used by its one head; one horizontal
      // reduction per (key, head). (The 16-key form below, whose per-kv-head buffer is then 256
      // KB at 7B's 32 x 128, ran 1.4x slower here.)
      for (int j = 0; j < nb_all; ++j) {
        const uint16_t* krow = a.k_cache + a.row(s, j0 + j) * kv_dim;
        // Software prefetch of the row kAhead keys on (through the block table): keeps DRAM
        // busy while this row computes.
        const uint16_t* kahead =
            j + kAhead < nb_all ? a.k_cache + a.row(s, j0 + j + kAhead) * kv_dim : nullptr;
        for (int h = 0; h < a.n_kv_heads; ++h) {
          const uint16_t* src = krow + int64_t(h) * hd;
          if (kahead)
            for (int l = 0; l < hd; l += 32)
              _mm_prefetch(reinterpret_cast<const char*>(kahead + int64_t(h) * hd + l),
                           _MM_HINT_T0);
          cvt_head(src, kbp, nv, hd);
          for (int64_t t = 0; t < nt; ++t) {
            // causal (and windowed): not visible to token t
            if (j0 + j > a.pos(s, t) || j0 + j < attn_first_key(a, a.pos(s, t))) continue;
            const float* qh = qfp + ((t * nh + h) * hdp);
            __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
            int c = 0;
            for (; c + 2 <= nv; c += 2) {
              acc0 = _mm512_fmadd_ps(_mm512_loadu_ps(qh + 16 * c), _mm512_loadu_ps(kbp + (16 * c)),
                                     acc0);
              acc1 = _mm512_fmadd_ps(_mm512_loadu_ps(qh + 16 * c + 16),
                                     _mm512_loadu_ps(kbp + (16 * c + 16)), acc1);
            }
            if (c < nv)
              acc0 = _mm512_fmadd_ps(_mm512_loadu_ps(qh + 16 * c), _mm512_loadu_ps(kbp + (16 * c)),
                                     acc0);
            scp[(t * nh + h) * B + j] = _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1));
          }
        }
      }
    } else {
      // Scores with GQA, 16 keys at a time. The sub-block's K rows are read key-major (whole
      // rows, in address order, each prefetched kAhead rows ahead) and converted once into kb,
      // laid out per kv head ([kv head][16 keys][hdp]); then every query head of the group gets
      // its 16 scores in one vector (scores16: no horizontal reduction per key).
      for (int jb = 0; jb < nb_all; jb += 16) {
        const int jn = std::min(16, nb_all - jb);
        for (int j = 0; j < 16; ++j) {
          if (j < jn) {
            const uint16_t* krow = a.k_cache + a.row(s, j0 + jb + j) * kv_dim;
            const uint16_t* kahead = j0 + jb + j + kAhead < k1
                                         ? a.k_cache + a.row(s, j0 + jb + j + kAhead) * kv_dim
                                         : nullptr;
            for (int kvh = 0; kvh < a.n_kv_heads; ++kvh) {
              const uint16_t* src = krow + int64_t(kvh) * hd;
              if (kahead)
                for (int l = 0; l < hd; l += 32)
                  _mm_prefetch(reinterpret_cast<const char*>(kahead + int64_t(kvh) * hd + l),
                               _MM_HINT_T0);
              float* dst = kbp + (int64_t(kvh) * 16 + j) * hdp;
              cvt_head(src, dst, nv, hd);
            }
          } else {  // past the last key: finite scores that nobody reads
            for (int kvh = 0; kvh < a.n_kv_heads; ++kvh)
              for (int c = 0; c < nv; ++c)
                _mm512_storeu_ps(kbp + (int64_t(kvh) * 16 + j) * hdp + 16 * c, _mm512_setzero_ps());
          }
        }
        for (int64_t t = 0; t < nt; ++t) {
          // no key of the sub-block visible to token t (causal, windowed)
          const int64_t p = a.pos(s, t);
          if (j0 + jb > p || j0 + jb + jn - 1 < attn_first_key(a, p)) continue;
          for (int h = 0; h < nh; ++h)
            scores16(qfp + (t * nh + h) * hdp, kbp + int64_t(h / group) * 16 * hdp, nv, hdp,
                     scp + (t * nh + h) * B + jb);
        }
      }
    }
    // Online-softmax step per (token, head).
    for (int64_t t = 0; t < nt; ++t) {
      const int nb = int(std::min<int64_t>(nb_all, a.pos(s, t) + 1 - j0));
      const int js = int(std::max<int64_t>(0, attn_first_key(a, a.pos(s, t)) - j0));
      if (nb <= js) continue;  // no key of this block is visible to token t
      for (int h = 0; h < nh; ++h) {
        float* sh = scp + ((t * nh + h) * B);
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
    // P·V in sub-blocks of kSub keys: their V rows (all kv heads, in address order) are
    // converted into vb (the row loop is written out like the K loops above: one shared
    // prefetch-and-convert helper for the three ran 1.3x slower in one process, both head
    // layouts; cause not found), then each (token, head) row
    // accumulates the sub-block in registers, in the same key order as before: one load and one
    // store of o per kSub keys. (Per key, each update waited on the previous one's store of o: ~1/6
    // of the decode attention's time.)
    for (int js0 = 0; js0 < nb_all; js0 += kSub) {
      const int jn = std::min(kSub, nb_all - js0);
      for (int j = 0; j < jn; ++j) {
        const int jj = js0 + j;
        const uint16_t* vrow = a.v_cache + a.row(s, j0 + jj) * kv_dim;
        const uint16_t* vahead =
            jj + kAhead < nb_all ? a.v_cache + a.row(s, j0 + jj + kAhead) * kv_dim : nullptr;
        for (int kvh = 0; kvh < a.n_kv_heads; ++kvh) {
          const uint16_t* src = vrow + int64_t(kvh) * hd;
          if (vahead)
            for (int l = 0; l < hd; l += 32)
              _mm_prefetch(reinterpret_cast<const char*>(vahead + int64_t(kvh) * hd + l),
                           _MM_HINT_T0);
          float* dst = vbp + (int64_t(j) * a.n_kv_heads + kvh) * hdp;
          cvt_head(src, dst, nv, hd);
        }
      }
      for (int64_t t = 0; t < nt; ++t) {
        // Keys of this sub-block visible to token t: [lo, hi) (block-relative).
        const int64_t lo = std::max<int64_t>(js0, attn_first_key(a, a.pos(s, t)) - j0);
        const int64_t hi = std::min<int64_t>(js0 + jn, a.pos(s, t) + 1 - j0);
        if (lo >= hi) continue;
        for (int h = 0; h < nh; ++h) {
          const int kvh = h / group;
          const float* ph = scp + (t * nh + h) * B;
          float* o = part + (t * nh + h) * ps;
          const float* v0 = vbp + (int64_t(lo - js0) * a.n_kv_heads + kvh) * hdp;
          const int64_t vstride = int64_t(a.n_kv_heads) * hdp;
          for (int c0 = 0; c0 < nv; c0 += 8) {
            const int n = int(hi - lo);
            kPvRows[std::min(8, nv - c0) - 1](ph + lo, n, v0 + 16 * c0, vstride, o + 16 * c0);
          }
        }
      }
    }
  }
}

}  // namespace latprof::cpu::detail
