// AVX-512 attention unit: the online-softmax algorithm of attention.cpp, vectorised. For each
// query token, a block of 64 keys of the kv head is converted from fp16 once (vcvtph2ps) and
// used by every query head of the group; the exponentials are evaluated 16 at a time.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>
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

// Scaled queries (qf, rows padded to hdp) and the zeroed partial state of every (token, head) row
// of sequence s.
void chunk_init(const AttnArgs& a, int64_t s, float* qf, float* part) {
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

// ro[0 .. n) = cache row offsets (elements) of keys j0 .. j0 + n of sequence s, walking its block
// table once (a.row() divides by the block size per key).
void fill_row_offsets(const AttnArgs& a, int64_t s, int64_t j0, int n, int64_t* ro) {
  const int32_t* table = a.block_tables + s * a.max_blocks;
  const int64_t kv_dim = int64_t(a.n_kv_heads) * a.hd;
  int64_t pg = j0 / a.block_size, off = j0 % a.block_size;
  for (int j = 0; j < n; ++j) {
    ro[j] = (int64_t(table[pg]) * a.block_size + off) * kv_dim;
    if (++off == a.block_size) off = 0, ++pg;
  }
}

// Online-softmax step of the block of keys [j0, j0 + nb_all) for every (token, head) row: scores
// (sc, row stride kDecBlock) become probabilities under the new running maximum; the row's sum
// and accumulated output are rescaled.
void softmax_block(const AttnArgs& a, int64_t s, int64_t j0, int nb_all, float* sc, float* part) {
  const int nh = a.n_heads, hdp = 16 * ((a.hd + 15) / 16), nv = hdp / 16;
  const int64_t ps = attn_part_stride(a.hd);
  for (int64_t t = 0; t < a.n_tok(s); ++t) {
    const int nb = int(std::min<int64_t>(nb_all, a.pos(s, t) + 1 - j0));
    const int js = int(std::max<int64_t>(0, attn_first_key(a, a.pos(s, t)) - j0));
    if (nb <= js) continue;  // no key of this block is visible to token t
    for (int h = 0; h < nh; ++h) {
      float* sh = sc + ((t * nh + h) * kDecBlock);
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

// Decode without GQA (llama-2-7b's 32 x 128), key-major: each cache row (all heads, contiguous,
// 8 KB at 7B) is read whole and in address order, converted in registers, once for the scores
// (16 heads' dot products per reduce16) and once for P·V (every head's running output stays in
// L1 and is loaded and stored per key), the rows two ahead prefetched into L2. From DRAM on Zen 4
// 0.82-0.94x the time of the walk it replaced (16-key sub-blocks head by head: each head's slice
// of 16 rows is 16 runs of 256 bytes 8 KB apart, an order a plain read takes at ~0.8x of a linear
// one): reports/cpu-kernels.md.
void chunk_mha(const AttnArgs& a, int64_t s, int64_t k0, int64_t k1, float* qf, float* sc,
               float* part) {
  constexpr int B = kDecBlock;
  const int hd = a.hd, nh = a.n_heads, nv = (hd + 15) / 16, hdp = 16 * nv;
  const int64_t nt = a.n_tok(s), ps = attn_part_stride(hd);
  const __mmask16 last = head_mask(nv - 1, nv, hd);
  int64_t ro[B + 2];
  for (int64_t j0 = k0; j0 < k1; j0 += B) {
    const int nb_all = int(std::min<int64_t>(B, k1 - j0));
    const int npf = int(std::min<int64_t>(B + 2, k1 - j0));  // rows with offsets (2 to prefetch)
    fill_row_offsets(a, s, j0, npf, ro);
    for (int j = 0; j < nb_all; ++j) {
      const uint16_t* krow = a.k_cache + ro[j];
      const uint16_t* kpf = j + 2 < npf ? a.k_cache + ro[j + 2] : nullptr;
      for (int64_t t = 0; t < nt; ++t) {
        for (int h0 = 0; h0 < nh; h0 += 16) {
          const int hn = std::min(16, nh - h0);
          __m512 acc[16];
#pragma GCC unroll 16
          for (int i = 0; i < 16; ++i) acc[i] = _mm512_setzero_ps();
          for (int i = 0; i < hn; ++i) {
            const uint16_t* kh = krow + int64_t(h0 + i) * hd;
            const float* q = qf + (t * nh + h0 + i) * hdp;
            if (kpf && t == 0)
              for (int l = 0; l < hd; l += 32)
                _mm_prefetch(reinterpret_cast<const char*>(kpf + int64_t(h0 + i) * hd + l),
                             _MM_HINT_T2);
            __m512 x = _mm512_setzero_ps();
            int c = 0;
            for (; c + 1 < nv; ++c)
              x = _mm512_fmadd_ps(_mm512_loadu_ps(q + 16 * c),
                                  _mm512_cvtph_ps(_mm256_loadu_si256(
                                      reinterpret_cast<const __m256i*>(kh + 16 * c))),
                                  x);
            acc[i] =
                _mm512_fmadd_ps(_mm512_loadu_ps(q + 16 * c),
                                _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(last, kh + 16 * c)), x);
          }
          alignas(64) float r[16];
          _mm512_store_ps(r, reduce16(acc));
          for (int i = 0; i < hn; ++i) sc[(t * nh + h0 + i) * B + j] = r[i];
        }
      }
    }
    softmax_block(a, s, j0, nb_all, sc, part);
    for (int j = 0; j < nb_all; ++j) {
      const uint16_t* vrow = a.v_cache + ro[j];
      const uint16_t* vpf = j + 2 < npf ? a.v_cache + ro[j + 2] : nullptr;
      for (int64_t t = 0; t < nt; ++t) {
        const auto [lo, hi] = visible(a, s, t, j0, j, 1);
        if (lo >= hi) continue;
        for (int h = 0; h < nh; ++h) {
          const uint16_t* vh = vrow + int64_t(h) * hd;
          if (vpf && t == 0)
            for (int l = 0; l < hd; l += 32)
              _mm_prefetch(reinterpret_cast<const char*>(vpf + int64_t(h) * hd + l), _MM_HINT_T2);
          const __m512 p = _mm512_set1_ps(sc[(t * nh + h) * B + j]);
          float* o = part + (t * nh + h) * ps;
          int c = 0;
          for (; c + 1 < nv; ++c)
            _mm512_storeu_ps(o + 16 * c,
                             _mm512_fmadd_ps(p,
                                             _mm512_cvtph_ps(_mm256_loadu_si256(
                                                 reinterpret_cast<const __m256i*>(vh + 16 * c))),
                                             _mm512_loadu_ps(o + 16 * c)));
          _mm512_storeu_ps(
              o + 16 * c,
              _mm512_fmadd_ps(p, _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(last, vh + 16 * c)),
                              _mm512_loadu_ps(o + 16 * c)));
        }
      }
    }
  }
}

// GQA scores: HG query heads of one group (q: HG rows hdp floats apart) against 16 / HG keys
// (key i's slice of the kv head at k + ro[i], fp16), each key vector converted in a register
// once and used by the HG heads. Lane i * HG + h of the result: head h's score for key i. FULL:
// hd is a multiple of 16 (no masked last vector).
template <int HG, bool FULL>
inline __m512 scores_f16(const float* q, int hdp, const uint16_t* k, const int64_t* ro, int nv,
                         __mmask16 last) {
  constexpr int NK = 16 / HG;
  __m512 acc[16];
#pragma GCC unroll 16
  for (int i = 0; i < 16; ++i) acc[i] = _mm512_setzero_ps();
  for (int c = 0; c < nv; ++c) {
    __m512 kc[NK];
#pragma GCC unroll 16
    for (int i = 0; i < NK; ++i)
      kc[i] = _mm512_cvtph_ps(
          FULL || c + 1 < nv
              ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(k + ro[i] + 16 * c))
              : _mm256_maskz_loadu_epi16(last, k + ro[i] + 16 * c));
#pragma GCC unroll 16
    for (int h = 0; h < HG; ++h) {
      const __m512 qh = _mm512_loadu_ps(q + h * hdp + 16 * c);
#pragma GCC unroll 16
      for (int i = 0; i < NK; ++i) acc[i * HG + h] = _mm512_fmadd_ps(qh, kc[i], acc[i * HG + h]);
    }
  }
  return reduce16(acc);
}

// Stores scores_f16's result: key i's HG scores at dst + i * kstride.
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

// scores_f16 and store_scores for hg (1, 2, 4, 8 or 16) heads.
template <bool FULL>
inline void score_tile(int hg, const float* q, int hdp, const uint16_t* k, const int64_t* ro,
                       int nv, __mmask16 last, float* dst, int64_t kstride) {
  switch (hg) {
    case 16:
      return store_scores<16>(scores_f16<16, FULL>(q, hdp, k, ro, nv, last), dst, kstride);
    case 8:
      return store_scores<8>(scores_f16<8, FULL>(q, hdp, k, ro, nv, last), dst, kstride);
    case 4:
      return store_scores<4>(scores_f16<4, FULL>(q, hdp, k, ro, nv, last), dst, kstride);
    case 2:
      return store_scores<2>(scores_f16<2, FULL>(q, hdp, k, ro, nv, last), dst, kstride);
    default:
      return store_scores<1>(scores_f16<1, FULL>(q, hdp, k, ro, nv, last), dst, kstride);
  }
}

// Heads in the next tile of a group with `left` heads still to do: the largest power of two
// <= max (16 or 8) that fits.
inline int tile_heads(int left, int max) {
  int h = max;
  while (h > left) h /= 2;
  return h;
}

// GQA P·V: HB query heads of one group over n keys (probabilities p[key * pk + head]), CB vectors
// of each head's output (o rows ostride apart) held in registers; each key's CB value vectors
// (at v + ro[key], fp16) are converted in registers once for the HB heads. LASTM: the mask of the
// CB-th vector (the head's last, when hd is not a multiple of 16; else all ones).
template <int HB, int CB, bool FULL>
inline void pv_f16(const float* p, int64_t pk, int n, const uint16_t* v, const int64_t* ro,
                   float* o, int64_t ostride, __mmask16 lastm) {
  __m512 acc[HB][CB];
#pragma GCC unroll 16
  for (int h = 0; h < HB; ++h)
#pragma GCC unroll 16
    for (int c = 0; c < CB; ++c) acc[h][c] = _mm512_loadu_ps(o + h * ostride + 16 * c);
  for (int j = 0; j < n; ++j) {
    const uint16_t* vj = v + ro[j];
    __m512 x[CB];
#pragma GCC unroll 16
    for (int c = 0; c < CB; ++c)
      x[c] = _mm512_cvtph_ps(FULL || c + 1 < CB
                                 ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(vj + 16 * c))
                                 : _mm256_maskz_loadu_epi16(lastm, vj + 16 * c));
#pragma GCC unroll 16
    for (int h = 0; h < HB; ++h) {
      const __m512 ph = _mm512_set1_ps(p[j * pk + h]);
#pragma GCC unroll 16
      for (int c = 0; c < CB; ++c) acc[h][c] = _mm512_fmadd_ps(ph, x[c], acc[h][c]);
    }
  }
#pragma GCC unroll 16
  for (int h = 0; h < HB; ++h)
#pragma GCC unroll 16
    for (int c = 0; c < CB; ++c) _mm512_storeu_ps(o + h * ostride + 16 * c, acc[h][c]);
}

// pv_f16 for hb (1, 2, 4 or 8) heads and cb (1, 2, 4 or 8) vectors, hb * cb <= 16.
template <bool FULL>
inline void pv_f16_any(int hb, int cb, const float* p, int64_t pk, int n, const uint16_t* v,
                       const int64_t* ro, float* o, int64_t ostride, __mmask16 lastm) {
  switch (hb * 16 + cb) {
    case 8 * 16 + 2:
      return pv_f16<8, 2, FULL>(p, pk, n, v, ro, o, ostride, lastm);
    case 8 * 16 + 1:
      return pv_f16<8, 1, FULL>(p, pk, n, v, ro, o, ostride, lastm);
    case 4 * 16 + 4:
      return pv_f16<4, 4, FULL>(p, pk, n, v, ro, o, ostride, lastm);
    case 4 * 16 + 2:
      return pv_f16<4, 2, FULL>(p, pk, n, v, ro, o, ostride, lastm);
    case 4 * 16 + 1:
      return pv_f16<4, 1, FULL>(p, pk, n, v, ro, o, ostride, lastm);
    case 2 * 16 + 8:
      return pv_f16<2, 8, FULL>(p, pk, n, v, ro, o, ostride, lastm);
    case 2 * 16 + 4:
      return pv_f16<2, 4, FULL>(p, pk, n, v, ro, o, ostride, lastm);
    case 2 * 16 + 2:
      return pv_f16<2, 2, FULL>(p, pk, n, v, ro, o, ostride, lastm);
    case 2 * 16 + 1:
      return pv_f16<2, 1, FULL>(p, pk, n, v, ro, o, ostride, lastm);
    case 1 * 16 + 8:
      return pv_f16<1, 8, FULL>(p, pk, n, v, ro, o, ostride, lastm);
    case 1 * 16 + 4:
      return pv_f16<1, 4, FULL>(p, pk, n, v, ro, o, ostride, lastm);
    case 1 * 16 + 2:
      return pv_f16<1, 2, FULL>(p, pk, n, v, ro, o, ostride, lastm);
    default:
      return pv_f16<1, 1, FULL>(p, pk, n, v, ro, o, ostride, lastm);
  }
}

// Online-softmax step of the GQA decode, scores laid out key-major (sc[(t * kDecBlock + j) *
// n_heads + h]): the heads sit in the vector lanes, so the block maximum and the sums need no
// horizontal reduction. Same arithmetic per (head, key) as softmax_block.
void softmax_block_hl(const AttnArgs& a, int64_t s, int64_t j0, int nb_all, float* sc,
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

// Decode with GQA (tinyllama's 32 query heads on 4 kv heads): per 64-key block, scores of each
// kv head's query heads 16 keys at a time with K converted in registers (each converted vector
// feeding 8 heads' multiply-adds), one softmax step with the heads in the vector lanes, then P·V
// with V converted in registers likewise. Each score tile prefetches into L2 its kv head's slices
// of the K rows kAhead keys on (~8 KB of rows ahead) and of its own V rows: spread over the tiles,
// not in one burst per 16 keys. (Before, K and V were first converted into fp32 copies in L1,
// which cost as much as the scores' arithmetic. From DRAM this kernel ran 1.04-1.09x the copies'
// time with the prefetches in a burst of 256 lines, 0.76-0.91x spread; reports/cpu-kernels.md.)
template <bool FULL>
void chunk_gqa_t(const AttnArgs& a, int64_t s, int64_t k0, int64_t k1, float* qfp, float* scp,
                 float* part) {
  constexpr int B = kDecBlock;
  const int64_t row_bytes = int64_t(a.n_kv_heads) * a.hd * 2;
  const int kAhead = int(std::clamp<int64_t>(8192 / row_bytes, 4, 32));
  const int hd = a.hd, group = a.n_heads / a.n_kv_heads, nh = a.n_heads;
  const int nv = (hd + 15) / 16, hdp = 16 * nv;
  const __mmask16 last = head_mask(nv - 1, nv, hd);
  const int64_t nt = a.n_tok(s), ps = attn_part_stride(hd);
  int64_t roff[B + 32];
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
          const uint16_t* kk = a.k_cache + int64_t(kvh) * hd;
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
                                       ? reinterpret_cast<const char*>(a.v_cache + ro[x] + kvh * hd)
                                       : nullptr;
                  for (int l = 0; l < 2 * hd; l += 64) {
                    if (kp) _mm_prefetch(kp + l, _MM_HINT_T2);
                    if (vp) _mm_prefetch(vp + l, _MM_HINT_T2);
                  }
                }
              score_tile<FULL>(hg, q, hdp, kk, ro, nv, last, d, nh);
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
      for (int kvh = 0; kvh < a.n_kv_heads; ++kvh) {
        for (int hh = 0; hh < group;) {
          const int hb = tile_heads(group - hh, 8);
          const int64_t r = t * nh + int64_t(kvh) * group + hh;
          for (int c0 = 0; c0 < nv;) {
            int cb = std::min(8, 16 / hb);
            while (cb > nv - c0) cb /= 2;
            const __mmask16 lm = c0 + cb == nv ? last : __mmask16(0xffff);
            pv_f16_any<FULL>(hb, cb, scp + (t * B + lo) * nh + (r - t * nh), nh, int(hi - lo),
                             a.v_cache + int64_t(kvh) * hd + 16 * c0, roff + lo,
                             part + r * ps + 16 * c0, ps, lm);
            c0 += cb;
          }
          hh += hb;
        }
      }
    }
  }
}

void chunk_gqa(const AttnArgs& a, int64_t s, int64_t k0, int64_t k1, float* qfp, float* scp,
               float* part) {
  if (a.hd % 16 == 0)
    chunk_gqa_t<true>(a, s, k0, k1, qfp, scp, part);
  else
    chunk_gqa_t<false>(a, s, k0, k1, qfp, scp, part);
}

}  // namespace

// Decode (few query tokens): keys [k0, k1) of sequence s (k0 a multiple of 64) for every token and
// every head, with an online-softmax step per 64-key block (the prefill tile's arithmetic differs
// in order: the two agree to rounding, as the tests check). Writes the un-normalised partial
// state of every (token, head) row to part: o[hdp], then max, then sum, stride
// attn_part_stride(hd).
void attention_chunk_avx512(const AttnArgs& a, int64_t s, int64_t k0, int64_t k1, float* part) {
  const int hdp = 16 * ((a.hd + 15) / 16);
  const int64_t rows = a.n_tok(s) * a.n_heads;
  thread_local AlignedFloats qf, sc;
  qf.reserve(size_t(rows * hdp));
  sc.reserve(size_t(rows * kDecBlock));
  chunk_init(a, s, qf.p, part);
  if (a.n_heads == a.n_kv_heads)
    chunk_mha(a, s, k0, k1, qf.p, sc.p, part);
  else
    chunk_gqa(a, s, k0, k1, qf.p, sc.p, part);
}

}  // namespace latprof::cpu::detail
