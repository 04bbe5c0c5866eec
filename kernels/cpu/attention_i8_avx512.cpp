// The GQA decode on an int8 cache with AVX512-VNNI (AttnArgs::dot_i8): the scores as int8 dot
// products (vpdpbusd), keys in the vector lanes; P·V as int16 dot products (vpdpwssd) where hd is
// a multiple of 64, else in fp32 as on the other caches.
//
// Each kv head's 16-key sub-block is loaded as 16 rows of 16 dwords (64 bytes of a key's slice:
// 4 dimensions a dword) and transposed, so that vector c holds dimensions 4c .. 4c + 3 of the 16
// keys. A query head's scores for the 16 keys are then 16 vpdpbusd per 64 dimensions, its q
// dword broadcast: no horizontal sums (the fp32 path's reduce16 cost ~2.8 operations a score
// beside its 4 multiply-adds), and the transposition is shared by the group's heads. q is
// rounded to int8 per (token, head) row, scale max |q| / 127, as llama.cpp's q8_0 K cache rounds
// q to q8_0. vpdpbusd multiplies unsigned by signed bytes: the keys are read as k + 128 (the
// sign bit flipped) and 128 · sum(q) taken off each sum. Score = (sum - 128 sum q) · scale_q ·
// scale_k, exact in int32 before the two fp32 products.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/cpu/attention_avx512.hpp"
#include "kernels/cpu/vnni_avx512.hpp"

namespace latprof::cpu::detail {
namespace {

// r[0 .. 16): 16 rows of 16 dwords -> r[c] lane i = row i's dword c.
__attribute__((always_inline)) inline void transpose16x16(__m512i* r) {
  __m512i t[16];
#pragma GCC unroll 8
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
  }
  // r[4i + m], 128-bit lane L: rows 4i .. 4i + 3 at dword 4L + m.
#pragma GCC unroll 4
  for (int i = 0; i < 4; ++i) {
    r[4 * i] = _mm512_unpacklo_epi64(t[4 * i], t[4 * i + 2]);
    r[4 * i + 1] = _mm512_unpackhi_epi64(t[4 * i], t[4 * i + 2]);
    r[4 * i + 2] = _mm512_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]);
    r[4 * i + 3] = _mm512_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);
  }
  // Gather lane L of r[m], r[4 + m], r[8 + m], r[12 + m] into dword 4L + m's vector.
#pragma GCC unroll 4
  for (int m = 0; m < 4; ++m) {
    const __m512i a = _mm512_shuffle_i32x4(r[m], r[4 + m], 0x88);
    const __m512i b = _mm512_shuffle_i32x4(r[m], r[4 + m], 0xDD);
    const __m512i c = _mm512_shuffle_i32x4(r[8 + m], r[12 + m], 0x88);
    const __m512i d = _mm512_shuffle_i32x4(r[8 + m], r[12 + m], 0xDD);
    t[m] = _mm512_shuffle_i32x4(a, c, 0x88);       // L = 0
    t[8 + m] = _mm512_shuffle_i32x4(a, c, 0xDD);   // L = 2
    t[4 + m] = _mm512_shuffle_i32x4(b, d, 0x88);   // L = 1
    t[12 + m] = _mm512_shuffle_i32x4(b, d, 0xDD);  // L = 3
  }
#pragma GCC unroll 16
  for (int i = 0; i < 16; ++i) r[i] = t[i];
}

// Up to 8 query rows' scores (int32 sums, keys in the lanes) for the 16 keys whose kv-head slices
// start at k + ro[i]: NQ rows of q8 (qstride bytes apart, zero past hd), hd / 4 dwords each.
template <int NQ>
inline void scores_vnni(const uint8_t* q8, int64_t qstride, const int8_t* k, const int64_t* ro,
                        int nd, __m512i* acc) {
  const __m512i flip = _mm512_set1_epi8(char(0x80));
#pragma GCC unroll 8
  for (int r = 0; r < NQ; ++r) acc[r] = _mm512_setzero_si512();
  for (int g = 0; 16 * g < nd; ++g) {  // 64 bytes (16 dwords) of each key at a time
    const int nc = std::min(16, nd - 16 * g);
    const __mmask16 m = nc == 16 ? __mmask16(0xffff) : __mmask16((1u << nc) - 1);
    __m512i kt[16];
#pragma GCC unroll 16
    for (int i = 0; i < 16; ++i)
      kt[i] = _mm512_xor_si512(_mm512_maskz_loadu_epi32(m, k + ro[i] + 64 * g), flip);
    transpose16x16(kt);
    for (int c = 0; c < nc; ++c) {
#pragma GCC unroll 8
      for (int r = 0; r < NQ; ++r) {
        int32_t qd;
        std::memcpy(&qd, q8 + r * qstride + 64 * g + 4 * c, sizeof qd);
        acc[r] = dpbusd(acc[r], kt[c], _mm512_set1_epi32(qd));
      }
    }
  }
}

void scores_vnni_any(int nq, const uint8_t* q8, int64_t qstride, const int8_t* k, const int64_t* ro,
                     int nd, __m512i* acc) {
  switch (nq) {
    case 8:
      return scores_vnni<8>(q8, qstride, k, ro, nd, acc);
    case 4:
      return scores_vnni<4>(q8, qstride, k, ro, nd, acc);
    case 2:
      return scores_vnni<2>(q8, qstride, k, ro, nd, acc);
    default:
      return scores_vnni<1>(q8, qstride, k, ro, nd, acc);
  }
}

// P·V in int16 (vpdpwssd), for head sizes that are a multiple of 64: each (token, head) row's
// probabilities of a block, times each key's value-slice scale, rounded to int16 against their
// maximum (scale max / 32767: 2^-16 of the largest, where int8 q costs the scores 2^-8), taken
// two keys at a time against the two keys' values interleaved and widened to int16. Sums over a
// 64-key block stay below 2^31 (32 x 2 x 32767 x 127). The unpacking leaves a row's outputs in an
// order of its own within each 64 dimensions: 16-lane group G (G = 0 .. 3) holds dimensions
// kGroupBase[G] + l for lanes l < 8 and kGroupBase[G] + l + 8 above; unpermute_rows restores the
// order at the chunk's end (the online softmax's rescaling is lane-wise and does not mind).
constexpr int kGroupBase[4] = {0, 8, 32, 40};

// HB rows (q16 rows B uint16 apart, keys in pairs; per-row scales sp) over np key pairs whose
// value slices start at v + ro[2i], v + ro[2i + 1]; GP: groups 2 GP and 2 GP + 1 of the 64 values
// at v. Adds into o (HB rows ostride apart, this chunk's 64 lanes).
template <int HB, int GP>
inline void pv_i16(const uint16_t* q16, int np, const int8_t* v, const int64_t* ro, float* o,
                   int64_t ostride, const float* sp) {
  constexpr int B = kDecBlock;
  __m512i acc[HB][2];
#pragma GCC unroll 8
  for (int h = 0; h < HB; ++h) acc[h][0] = acc[h][1] = _mm512_setzero_si512();
  for (int i = 0; i < np; ++i) {
    const __m512i a = _mm512_loadu_si512(v + ro[2 * i]);
    const __m512i b = _mm512_loadu_si512(v + ro[2 * i + 1]);
    const __m512i lo = _mm512_unpacklo_epi8(a, b), hi = _mm512_unpackhi_epi8(a, b);
    const __m512i x0 = _mm512_cvtepi8_epi16(GP == 0 ? _mm512_castsi512_si256(lo)
                                                    : _mm512_extracti64x4_epi64(lo, 1));
    const __m512i x1 = _mm512_cvtepi8_epi16(GP == 0 ? _mm512_castsi512_si256(hi)
                                                    : _mm512_extracti64x4_epi64(hi, 1));
#pragma GCC unroll 8
    for (int h = 0; h < HB; ++h) {
      int32_t pair;
      std::memcpy(&pair, q16 + h * B + 2 * i, sizeof pair);
      const __m512i pb = _mm512_set1_epi32(pair);
      acc[h][0] = dpwssd(acc[h][0], x0, pb);
      acc[h][1] = dpwssd(acc[h][1], x1, pb);
    }
  }
#pragma GCC unroll 8
  for (int h = 0; h < HB; ++h)
    for (int k = 0; k < 2; ++k) {
      float* dst = o + h * ostride + 16 * (2 * GP + k);
      _mm512_storeu_ps(dst, _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc[h][k]), _mm512_set1_ps(sp[h]),
                                            _mm512_loadu_ps(dst)));
    }
}

template <int GP>
void pv_i16_any(int hb, const uint16_t* q16, int np, const int8_t* v, const int64_t* ro, float* o,
                int64_t ostride, const float* sp) {
  switch (hb) {
    case 8:
      return pv_i16<8, GP>(q16, np, v, ro, o, ostride, sp);
    case 4:
      return pv_i16<4, GP>(q16, np, v, ro, o, ostride, sp);
    case 2:
      return pv_i16<2, GP>(q16, np, v, ro, o, ostride, sp);
    default:
      return pv_i16<1, GP>(q16, np, v, ro, o, ostride, sp);
  }
}

// Rows' outputs (hd a multiple of 64, rows stride floats apart) from pv_i16's order to
// dimension order.
void unpermute_rows(float* o, int64_t rows, int64_t stride, int hd) {
  alignas(64) float x[64];
  for (int64_t r = 0; r < rows; ++r)
    for (int c = 0; c < hd; c += 64) {
      float* y = o + r * stride + c;
      std::memcpy(x, y, sizeof x);
      for (int g = 0; g < 4; ++g)
        for (int l = 0; l < 16; ++l) y[kGroupBase[g] + (l < 8 ? l : l + 8)] = x[16 * g + l];
    }
}

}  // namespace

void attention_chunk_i8_avx512(const AttnArgs& a, int64_t s, int64_t k0, int64_t k1, float* part) {
  constexpr int B = kDecBlock;
  const int hd = a.hd, nh = a.n_heads, group = nh / a.n_kv_heads;
  const int nv = (hd + 15) / 16, hdp = 16 * nv, nd = hd / 4;  // hd % 4 == 0
  const int64_t nt = a.n_tok(s), rows = nt * nh, ps = attn_part_stride(hd);
  const int64_t qstride = 64 * ((hd + 63) / 64);  // bytes of a q8 row, zero past hd
  const int64_t se = a.slice_elems();             // hd + 4 bytes
  const int8_t* const kc = kv_ptr<KvType::i8>(a.k_cache);
  const int8_t* const vc = kv_ptr<KvType::i8>(a.v_cache);
  thread_local AlignedFloats qf, sc, qs;
  thread_local std::vector<uint8_t> q8_buf;
  thread_local std::vector<int32_t> qsum_buf;
  qf.reserve(size_t(rows * hdp));
  sc.reserve(size_t(rows * B));
  qs.reserve(size_t(rows));
  q8_buf.assign(size_t(rows * qstride), 0);
  qsum_buf.resize(size_t(rows));
  chunk_init(a, s, qf.p, part);  // q scaled by 1 / sqrt(hd)
  const bool pv16 = hd % 64 == 0;
  thread_local std::vector<uint16_t> q16_buf;
  q16_buf.resize(size_t(rows * B));
  uint16_t* const q16 = q16_buf.data();
  thread_local std::vector<float> sp_buf;  // per head of a group: its int16 probabilities' scale
  sp_buf.resize(size_t(group));
  float* const sp = sp_buf.data();
  uint8_t* const q8 = q8_buf.data();
  for (int64_t r = 0; r < rows; ++r) {
    const float* x = qf.p + r * hdp;
    const float amax = row_max_abs(x, hd);
    const float scale = amax / 127.0f;
    int32_t sum = 0;
    for (int d = 0; d < hd; ++d) {
      const int8_t v =
          scale > 0 ? int8_t(std::clamp(std::nearbyint(x[d] / scale), -127.0f, 127.0f)) : 0;
      q8[r * qstride + d] = uint8_t(v);
      sum += v;
    }
    qs.p[r] = scale;
    qsum_buf[size_t(r)] = 128 * sum;
  }
  const int64_t row_bytes = a.row_elems();
  const int kAhead = int(std::clamp<int64_t>(8192 / row_bytes, 4, 32));
  int64_t roff[B + 32];
  for (int64_t j0 = k0; j0 < k1; j0 += B) {
    const int nb_all = int(std::min<int64_t>(B, k1 - j0));
    const int nro = int(std::min<int64_t>(B + kAhead, k1 - j0));
    fill_row_offsets(a, s, j0, nro, roff);
    // Past the last key (to the block's end, and one more for P·V's pairs): a row that exists.
    for (int j = nro; j <= B; ++j) roff[j] = roff[0];
    for (int jb = 0; jb < nb_all; jb += 16) {
      for (int kvh = 0; kvh < a.n_kv_heads; ++kvh) {
        const int8_t* kk = kc + kvh * se;
        for (int i = 0; i < 16; ++i) {  // this kv head's K slices kAhead keys on, V slices now
          const int x = jb + i;
          if (x + kAhead < nro)
            for (int64_t l = 0; l < se; l += 64)
              _mm_prefetch(reinterpret_cast<const char*>(kk + roff[x + kAhead] + l), _MM_HINT_T2);
          if (x < nb_all)
            for (int64_t l = 0; l < se; l += 64)
              _mm_prefetch(reinterpret_cast<const char*>(vc + roff[x] + kvh * se + l), _MM_HINT_T2);
        }
        alignas(64) float sk[16];
        for (int i = 0; i < 16; ++i) sk[i] = slice_scale<KvType::i8>(kk + roff[jb + i], hd);
        const __m512 vsk = _mm512_load_ps(sk);
        // Query rows (token, head of this group), up to 8 at a time.
        for (int64_t t = 0; t < nt; ++t) {
          const auto [lo, hi] = visible(a, s, t, j0, jb, std::min(16, nb_all - jb));
          if (lo >= hi) continue;
          for (int hh = 0; hh < group;) {
            const int nq = tile_heads(group - hh, 8);
            const int64_t r0 = t * nh + int64_t(kvh) * group + hh;
            __m512i acc[8];
            scores_vnni_any(nq, q8 + r0 * qstride, qstride, kk, roff + jb, nd, acc);
            for (int q = 0; q < nq; ++q) {
              const __m512i dot =
                  _mm512_sub_epi32(acc[q], _mm512_set1_epi32(qsum_buf[size_t(r0 + q)]));
              const __m512 sv = _mm512_mul_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(dot), vsk),
                                              _mm512_set1_ps(qs.p[r0 + q]));
              _mm512_storeu_ps(sc.p + (r0 + q) * B + jb, sv);
            }
            hh += nq;
          }
        }
      }
    }
    softmax_block(a, s, j0, nb_all, sc.p, part);
    for (int64_t t = 0; t < nt; ++t) {
      const auto [lo, hi] = visible(a, s, t, j0, 0, nb_all);
      if (lo >= hi) continue;
      for (int kvh = 0; kvh < a.n_kv_heads; ++kvh) {
        alignas(64) float sv[B];
        for (int64_t j = lo; j < hi; ++j)
          sv[j] = slice_scale<KvType::i8>(vc + roff[j] + kvh * se, hd);
        const int64_t r0 = t * nh + int64_t(kvh) * group;
        if (pv16) {
          // Each row's probabilities times the value scales, rounded to int16 against their
          // maximum; keys past hi (to the pair's end) 0.
          const int n = int(hi - lo), np = (n + 1) / 2;
          for (int hh = 0; hh < group; ++hh) {
            const float* p = sc.p + (r0 + hh) * B + lo;
            uint16_t* q = q16 + (r0 + hh) * B;
            __m512 vmax = _mm512_setzero_ps();
            for (int j = 0; j < n; j += 16) {
              const __mmask16 m = n - j >= 16 ? __mmask16(0xffff) : __mmask16((1u << (n - j)) - 1);
              vmax = _mm512_max_ps(vmax, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, p + j),
                                                       _mm512_maskz_loadu_ps(m, sv + lo + j)));
            }
            const float mx = _mm512_reduce_max_ps(vmax);
            sp[hh] = mx / 32767.0f;
            const __m512 inv = _mm512_set1_ps(mx > 0 ? 32767.0f / mx : 0.0f);
            for (int j = 0; j < 2 * np; j += 16) {
              const __mmask16 m = n - j >= 16 ? __mmask16(0xffff)
                                  : n > j     ? __mmask16((1u << (n - j)) - 1)
                                              : __mmask16(0);
              const __m512 x = _mm512_mul_ps(_mm512_mul_ps(_mm512_maskz_loadu_ps(m, p + j),
                                                           _mm512_maskz_loadu_ps(m, sv + lo + j)),
                                             inv);
              _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + j),
                                  _mm512_cvtepi32_epi16(_mm512_cvtps_epi32(x)));
            }
          }
          for (int hh = 0; hh < group;) {
            const int hb = tile_heads(group - hh, 8);
            for (int c = 0; c < hd; c += 64) {
              const int8_t* v = vc + kvh * se + c;
              float* o = part + (r0 + hh) * ps + c;
              pv_i16_any<0>(hb, q16 + (r0 + hh) * B, np, v, roff + lo, o, ps, sp + hh);
              pv_i16_any<1>(hb, q16 + (r0 + hh) * B, np, v, roff + lo, o, ps, sp + hh);
            }
            hh += hb;
          }
          continue;
        }
        // The probabilities times each key's value-slice scale, in fp32.
        for (int hh = 0; hh < group; ++hh) {
          float* p = sc.p + (r0 + hh) * B;
          for (int64_t j = lo; j < hi; j += 16) {
            const __mmask16 m = hi - j >= 16 ? __mmask16(0xffff) : __mmask16((1u << (hi - j)) - 1);
            _mm512_mask_storeu_ps(
                p + j, m,
                _mm512_mul_ps(_mm512_maskz_loadu_ps(m, p + j), _mm512_maskz_loadu_ps(m, sv + j)));
          }
        }
        for (int hh = 0; hh < group;) {
          const int hb = tile_heads(group - hh, 8);
          const int64_t r = r0 + hh;
          for (int c0 = 0; c0 < nv;) {
            int cb = std::min(8, 16 / hb);
            while (cb > nv - c0) cb /= 2;
            const __mmask16 lm = c0 + cb == nv ? head_mask(nv - 1, nv, hd) : __mmask16(0xffff);
            pv_kv_any<KvType::i8, false>(hb, cb, sc.p + r * B + lo, 1, B, int(hi - lo),
                                         vc + kvh * se + 16 * c0, roff + lo,
                                         part + r * ps + 16 * c0, ps, lm);
            c0 += cb;
          }
          hh += hb;
        }
      }
    }
  }
  if (pv16) unpermute_rows(part, rows, ps, hd);
}

}  // namespace latprof::cpu::detail
