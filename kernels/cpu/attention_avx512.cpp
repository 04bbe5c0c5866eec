// AVX-512 attention unit: the online-softmax algorithm of attention.cpp, vectorised. For each
// query token, a block of 64 keys of the kv head is converted to fp32 once (fp16: vcvtph2ps;
// bf16: a shift) and used by every query head of the group; the exponentials are evaluated 16 at
// a time. Every path is a template over the cache's type (KvType); the decode on a bf16 cache
// with AVX512-BF16 dot products is in attention_bf16_avx512.cpp.
#include "kernels/cpu/attention_avx512.hpp"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>
#include <vector>

namespace latprof::cpu::detail {
namespace {

// dst[0 .. 16 * nv) = one head's cache row src[0 .. hd) in fp32, zero past hd. Head sizes that
// are a multiple of 16 (all common models) take a loop without masks: the masked form's
// per-vector branch was ~1/4 of the decode attention's own time in a profile.
template <KvType KV>
inline void cvt_head(const kv_elem<KV>* src, float* dst, int nv, int hd) {
  if constexpr (KV == KvType::i8) {
    const __m512 sc = _mm512_set1_ps(slice_scale<KV>(src, hd));
    for (int c = 0; c < nv; ++c)
      _mm512_storeu_ps(dst + 16 * c,
                       _mm512_mul_ps(load16<KV>(src + 16 * c, head_mask(c, nv, hd)), sc));
  } else if (hd == 16 * nv) {
#pragma GCC unroll 8
    for (int c = 0; c < nv; ++c) _mm512_storeu_ps(dst + 16 * c, load16<KV>(src + 16 * c));
  } else {
    for (int c = 0; c < nv; ++c)
      _mm512_storeu_ps(dst + 16 * c, load16<KV>(src + 16 * c, head_mask(c, nv, hd)));
  }
}

}  // namespace

// Prefill (many query tokens of one sequence, one kv head): a tile of query rows (token, head of
// the group) is held transposed, rows in the vector lanes, so that every step is a plain
// multiply-add over lanes and the softmax needs no horizontal reduction:
//   S^T[key][row]  = sum_d K[key][d] * Q^T[d][row]       (K broadcast, Q^T rows loaded)
//   online softmax per lane over the block's keys (masked lanes: p = 0)
//   O^T[d][row]   += sum_key V[key][d] * P^T[key][row]   (V broadcast, P^T rows loaded)
// Each 64-key block of K and V is converted to fp32 once per tile (up to 64 rows), not once
// per query token.
namespace {

constexpr int kKeyBlock = 64;  // keys per online-softmax step

// Row stride of the keys converted from a tiled16 K cache (kfT[d][key], keys of the 64-key block
// at their offset from its start; up to 7 past its end are read, zeros).
constexpr int kTiledStride = kKeyBlock + 16;

// S^T[i][row] for keys i0..i0+7 (rows of kf, hdp apart; with KT, columns of kf, kTiledStride
// apart) and NRV vectors of rows.
template <int NRV, bool KT = false>
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
      const __m512 k = _mm512_set1_ps(KT ? kf[d * kTiledStride + j] : kf[j * hdp + d]);
      for (int v = 0; v < NRV; ++v) acc[j][v] = _mm512_fmadd_ps(k, q[v], acc[j][v]);
    }
  }
#pragma GCC unroll 8
  for (int j = 0; j < 8; ++j)
    for (int v = 0; v < NRV; ++v) _mm512_storeu_ps(st + j * rp + 16 * v, acc[j][v]);
}

// S^T for the block's nk keys (KT: kf dimension-major, kTiledStride apart; else key rows hdp
// apart) and every vector of rows, 8 keys at a time.
template <bool KT>
inline void block_scores(const float* qt, int64_t rp, int64_t nrv, const float* kf, int hdp, int hd,
                         int nk, float* st) {
  for (int i0 = 0; i0 < nk; i0 += 8) {
    const float* k = kf + (KT ? i0 : int64_t(i0) * hdp);
    int64_t v = 0;
    for (; v + 2 <= nrv; v += 2)
      tile_scores<2, KT>(qt + 16 * v, rp, k, hdp, hd, st + i0 * rp + 16 * v);
    if (v < nrv) tile_scores<1, KT>(qt + 16 * v, rp, k, hdp, hd, st + i0 * rp + 16 * v);
  }
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
template <KvType KV>
void attention_tile(const AttnArgs& a, int64_t s, int kvh, int64_t t0, int64_t t1) {
  const int hd = a.hd, group = a.n_heads / a.n_kv_heads;
  const int nv = (hd + 15) / 16, hdp = 16 * nv;
  const int64_t row_elems = a.row_elems(), slice = int64_t(kvh) * a.slice_elems();
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
  // Rows past a short block stay finite.
  float* const kf = filled(kf_buf, std::max<int64_t>(kKeyBlock, kTiledStride) * hdp, 0.0f);
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
    if (KV == KvType::f16 && a.k_tiled) {
      // kf[d * kTiledStride + (p - j0)]: each 16-position tile's run of a dimension converted as
      // one vector, the positions outside [jb, je) zero.
      const uint16_t* kc = static_cast<const uint16_t*>(a.k_cache) + int64_t(kvh) * hd * 16;
      for (int64_t p0 = jb / 16 * 16; p0 < je; p0 += 16) {
        const int64_t lo = std::max(jb, p0) - p0, hi = std::min(je, p0 + 16) - p0;
        const __mmask16 m = __mmask16(((1u << (hi - lo)) - 1) << lo);
        const uint16_t* t = kc + a.k_tile(a.row(s, p0) / 16);
        float* dst = kf + (p0 - j0);
        for (int d = 0; d < hd; ++d)
          _mm512_storeu_ps(dst + d * kTiledStride,
                           _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, t + 16 * d)));
      }
      block_scores<true>(qt, rp, nrv, kf + (jb - j0), hdp, hd, nk, st);
    } else {
      for (int i = 0; i < nk; ++i) {
        cvt_head<KV>(kv_ptr<KV>(a.k_cache) + a.row(s, jb + i) * row_elems + slice, kf + i * hdp, nv,
                     hd);
      }
      block_scores<false>(qt, rp, nrv, kf, hdp, hd, nk, st);
    }
    // Online softmax per lane: mask, block max, rescale factor, p = exp(s - max), sums.
    for (int64_t v = 0; v < nrv; ++v) {
      const __m512i posv = _mm512_loadu_si512(pos_buf.data() + 16 * v);
      const __m512i firstv = _mm512_loadu_si512(first_buf.data() + 16 * v);
      // Four partial maxima: one chain of vmaxps through the block's keys waited on its latency
      // (~11% of the tile's own time in a profile).
      __m512 bm[4];
      for (__m512& b : bm) b = _mm512_set1_ps(kNegInf);
      for (int i = 0; i < nk; ++i) {
        const __m512i kp = _mm512_set1_epi32(int32_t(jb + i));
        const __mmask16 vis =
            _mm512_cmple_epi32_mask(kp, posv) & _mm512_cmpge_epi32_mask(kp, firstv);
        bm[i & 3] =
            _mm512_mask_max_ps(bm[i & 3], vis, bm[i & 3], _mm512_loadu_ps(st + i * rp + 16 * v));
      }
      const __m512 bmax = _mm512_max_ps(_mm512_max_ps(bm[0], bm[1]), _mm512_max_ps(bm[2], bm[3]));
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
      cvt_head<KV>(kv_ptr<KV>(a.v_cache) + a.row(s, jb + i) * row_elems + slice, vf + i * hdp, nv,
                   hd);
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
  if (attention_amx_applies(a)) {  // attention_amx_bf16_avx512.cpp
    const int64_t amx_tokens = std::max<int64_t>(1, kAttnAmxRows / group);
    for (int64_t u0 = t0; u0 < t1; u0 += amx_tokens)
      attention_tile_amx(a, s, kvh, u0, std::min(t1, u0 + amx_tokens));
    return;
  }
  const int64_t tile_tokens = std::max<int64_t>(1, kAttnTileRows / group);
  for (int64_t u0 = t0; u0 < t1; u0 += tile_tokens) {
    const int64_t u1 = std::min(t1, u0 + tile_tokens);
    if (a.kv == KvType::bf16)
      attention_tile<KvType::bf16>(a, s, kvh, u0, u1);
    else if (a.kv == KvType::i8)
      attention_tile<KvType::i8>(a, s, kvh, u0, u1);
    else
      attention_tile<KvType::f16>(a, s, kvh, u0, u1);
  }
}

namespace {

// Decode without GQA (llama-2-7b's 32 x 128), key-major: each cache row (all heads, contiguous,
// 8 KB at 7B) is read whole and in address order, converted in registers, once for the scores
// (16 heads' dot products per reduce16) and once for P·V (every head's running output stays in
// L1 and is loaded and stored per key), the rows two ahead prefetched into L2. From DRAM on Zen 4
// 0.82-0.94x the time of the walk it replaced (16-key sub-blocks head by head: each head's slice
// of 16 rows is 16 runs of 256 bytes 8 KB apart, an order a plain read takes at ~0.8x of a linear
// one): reports/cpu-kernels.md. On a tiled16 K cache the scores are scores_tiled's (each head's
// run of a 16-key tile, the keys in the lanes, no reduction), also in address order, K prefetched
// where StreamTuning::mha_k_prefetch says.
template <KvType KV>
void chunk_mha(const AttnArgs& a, int64_t s, int64_t k0, int64_t k1, float* qf, float* sc,
               float* part) {
  constexpr int B = kDecBlock;
  const int hd = a.hd, nh = a.n_heads, nv = (hd + 15) / 16, hdp = 16 * nv;
  const int64_t nt = a.n_tok(s), ps = attn_part_stride(hd);
  const __mmask16 last = head_mask(nv - 1, nv, hd);
  const int64_t se = a.slice_elems();
  const int slice_bytes = int(se * int64_t(sizeof(kv_elem<KV>)));
  const bool tiled = KV == KvType::f16 && a.k_tiled;
  const bool pf_k = tiled && stream_tuning().mha_k_prefetch;
  int64_t ro[B + 2];
  for (int64_t j0 = k0; j0 < k1; j0 += B) {
    const int nb_all = int(std::min<int64_t>(B, k1 - j0));
    const int npf = int(std::min<int64_t>(B + 2, k1 - j0));  // rows with offsets (2 to prefetch)
    fill_row_offsets(a, s, j0, npf, ro);
    // On a tiled K, each head's runs of a 16-key tile: no reduction.
    if (tiled) scores_tiled(a, s, j0, nb_all, k1, qf, sc, B, pf_k, false);
    for (int j = 0; j < nb_all && !tiled; ++j) {
      const kv_elem<KV>* krow = kv_ptr<KV>(a.k_cache) + ro[j];
      const kv_elem<KV>* kpf = j + 2 < npf ? kv_ptr<KV>(a.k_cache) + ro[j + 2] : nullptr;
      for (int64_t t = 0; t < nt; ++t) {
        for (int h0 = 0; h0 < nh; h0 += 16) {
          const int hn = std::min(16, nh - h0);
          __m512 acc[16];
#pragma GCC unroll 16
          for (int i = 0; i < 16; ++i) acc[i] = _mm512_setzero_ps();
          for (int i = 0; i < hn; ++i) {
            const kv_elem<KV>* kh = krow + (h0 + i) * se;
            const float* q = qf + (t * nh + h0 + i) * hdp;
            if (kpf && t == 0)
              for (int l = 0; l < slice_bytes; l += 64)
                _mm_prefetch(reinterpret_cast<const char*>(kpf + (h0 + i) * se) + l, _MM_HINT_T2);
            __m512 x = _mm512_setzero_ps();
            int c = 0;
            for (; c + 1 < nv; ++c)
              x = _mm512_fmadd_ps(_mm512_loadu_ps(q + 16 * c), load16<KV>(kh + 16 * c), x);
            acc[i] = _mm512_fmadd_ps(_mm512_loadu_ps(q + 16 * c), load16<KV>(kh + 16 * c, last), x);
          }
          alignas(64) float r[16];
          _mm512_store_ps(r, reduce16(acc));
          for (int i = 0; i < hn; ++i)
            sc[(t * nh + h0 + i) * B + j] = r[i] * slice_scale<KV>(krow + (h0 + i) * se, hd);
        }
      }
    }
    softmax_block(a, s, j0, nb_all, sc, part);
    for (int j = 0; j < nb_all; ++j) {
      const kv_elem<KV>* vrow = kv_ptr<KV>(a.v_cache) + ro[j];
      const kv_elem<KV>* vpf = j + 2 < npf ? kv_ptr<KV>(a.v_cache) + ro[j + 2] : nullptr;
      for (int64_t t = 0; t < nt; ++t) {
        const auto [lo, hi] = visible(a, s, t, j0, j, 1);
        if (lo >= hi) continue;
        for (int h = 0; h < nh; ++h) {
          const kv_elem<KV>* vh = vrow + h * se;
          if (vpf && t == 0)
            for (int l = 0; l < slice_bytes; l += 64)
              _mm_prefetch(reinterpret_cast<const char*>(vpf + h * se) + l, _MM_HINT_T2);
          const __m512 p = _mm512_set1_ps(sc[(t * nh + h) * B + j] * slice_scale<KV>(vh, hd));
          float* o = part + (t * nh + h) * ps;
          int c = 0;
          for (; c + 1 < nv; ++c)
            _mm512_storeu_ps(o + 16 * c, _mm512_fmadd_ps(p, load16<KV>(vh + 16 * c),
                                                         _mm512_loadu_ps(o + 16 * c)));
          _mm512_storeu_ps(o + 16 * c, _mm512_fmadd_ps(p, load16<KV>(vh + 16 * c, last),
                                                       _mm512_loadu_ps(o + 16 * c)));
        }
      }
    }
  }
}

}  // namespace

// Decode (few query tokens): keys [k0, k1) of sequence s for every token and
// every head, with an online-softmax step per 64-key block (the prefill tile's arithmetic differs
// in order: the two agree to rounding, as the tests check). Writes the un-normalised partial
// state of every (token, head) row to part: o[hdp], then max, then sum, stride
// attn_part_stride(hd).
void attention_chunk_avx512(const AttnArgs& a, int64_t s, int64_t k0, int64_t k1, float* part) {
  const int hdp = 16 * ((a.hd + 15) / 16);
  const int64_t rows = a.n_tok(s) * a.n_heads;
  thread_local AlignedFloats qf, sc;
  qf.reserve(size_t(rows * hdp));
  sc.reserve(size_t(rows * std::max(kDecBlock, kTiledBlock)));
  if (a.dot_bf16) return attention_chunk_bf16_avx512(a, s, k0, k1, part);
  if (a.dot_i8) return attention_chunk_i8_avx512(a, s, k0, k1, part);
  chunk_init(a, s, qf.p, part);
  const bool mha = a.n_heads == a.n_kv_heads;
  if (a.kv == KvType::bf16)
    (mha ? chunk_mha<KvType::bf16> : chunk_gqa<KvType::bf16>)(a, s, k0, k1, qf.p, sc.p, part);
  else if (a.kv == KvType::i8)
    (mha ? chunk_mha<KvType::i8> : chunk_gqa<KvType::i8>)(a, s, k0, k1, qf.p, sc.p, part);
  else
    (mha ? chunk_mha<KvType::f16> : chunk_gqa<KvType::f16>)(a, s, k0, k1, qf.p, sc.p, part);
}

}  // namespace latprof::cpu::detail
