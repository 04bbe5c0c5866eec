// The decode attention on a bf16 KV cache with AVX512-BF16: vdpbf16ps multiplies 32 bf16 pairs
// and adds them in pairs into 16 fp32 lanes, one instruction where fp32 takes two multiply-adds
// (and, from an fp16 cache, a conversion). q and the softmax probabilities are rounded to bf16,
// K and V are used as stored, every sum is fp32. The walk over keys, the prefetches and the
// softmax are attention_avx512.hpp's chunk_gqa_t; this file supplies its arithmetic (Bf16Dot)
// and is the only one compiled with -mavx512bf16 (CMakeLists.txt).
#include <immintrin.h>

#include <vector>

#include "kernels/cpu/attention_avx512.hpp"

namespace latprof::cpu::detail {
namespace {

inline __m512bh as_bh(__m512i x) {
  return reinterpret_cast<__m512bh&>(x);
}

struct Bf16Dot {
  static constexpr bool enabled = true;

  // HG heads (q rows hd apart, bf16) against 16 / HG keys (key i's slice at k + ro[i]): lane
  // i * HG + h of the result is head h's score for key i. hd % 32 == 0.
  template <int HG>
  static __m512 scores(const uint16_t* qb, int hd, const uint16_t* k, const int64_t* ro) {
    constexpr int NK = 16 / HG;
    __m512 acc[16];
#pragma GCC unroll 16
    for (int i = 0; i < 16; ++i) acc[i] = _mm512_setzero_ps();
    for (int c = 0; c < hd; c += 32) {
      __m512bh kc[NK];
#pragma GCC unroll 16
      for (int i = 0; i < NK; ++i) kc[i] = as_bh(_mm512_loadu_si512(k + ro[i] + c));
#pragma GCC unroll 16
      for (int h = 0; h < HG; ++h) {
        const __m512bh qh = as_bh(_mm512_loadu_si512(qb + h * hd + c));
#pragma GCC unroll 16
        for (int i = 0; i < NK; ++i) acc[i * HG + h] = _mm512_dpbf16_ps(acc[i * HG + h], qh, kc[i]);
      }
    }
    return reduce16(acc);
  }

  static void score_tile(int hg, const uint16_t* qb, int hd, const uint16_t* k, const int64_t* ro,
                         float* dst, int64_t kstride) {
    switch (hg) {
      case 16:
        return store_scores<16>(scores<16>(qb, hd, k, ro), dst, kstride);
      case 8:
        return store_scores<8>(scores<8>(qb, hd, k, ro), dst, kstride);
      case 4:
        return store_scores<4>(scores<4>(qb, hd, k, ro), dst, kstride);
      case 2:
        return store_scores<2>(scores<2>(qb, hd, k, ro), dst, kstride);
      default:
        return store_scores<1>(scores<1>(qb, hd, k, ro), dst, kstride);
    }
  }

  // The probabilities of n keys (p[key * nh + head], fp32) as bf16 pairs: result[jp * nh + h]
  // holds head h's probabilities of keys 2 jp (low half) and 2 jp + 1 (high half; 0 past n).
  static const uint32_t* pairs(const float* p, int nh, int n) {
    thread_local std::vector<uint32_t> buf;
    buf.resize(size_t((n + 1) / 2) * size_t(nh));
    alignas(64) static const uint16_t kInterleave[32] = {0,  16, 1,  17, 2,  18, 3,  19, 4,  20, 5,
                                                         21, 6,  22, 7,  23, 8,  24, 9,  25, 10, 26,
                                                         11, 27, 12, 28, 13, 29, 14, 30, 15, 31};
    const __m512i idx = _mm512_load_si512(kInterleave);
    for (int jp = 0; 2 * jp < n; ++jp) {
      const float* p0 = p + int64_t(2 * jp) * nh;
      for (int h0 = 0; h0 < nh; h0 += 16) {
        const int hn = std::min(16, nh - h0);
        const __mmask16 mh = hn == 16 ? __mmask16(0xffff) : __mmask16((1u << hn) - 1);
        const __m512 a = _mm512_maskz_loadu_ps(mh, p0 + h0);
        const __m512 b =
            2 * jp + 1 < n ? _mm512_maskz_loadu_ps(mh, p0 + nh + h0) : _mm512_setzero_ps();
        const __m512bh ab = _mm512_cvtne2ps_pbh(b, a);  // keys 2 jp in the low 16, 2 jp + 1 high
        _mm512_mask_storeu_epi32(
            buf.data() + int64_t(jp) * nh + h0, mh,
            _mm512_permutexvar_epi16(idx, reinterpret_cast<const __m512i&>(ab)));
      }
    }
    return buf.data();
  }

  // HB heads' outputs (rows ostride apart), C32 chunks of 32 dims each, over n keys two at a
  // time: the two keys' value rows are interleaved in 16-bit pairs within each 128-bit lane
  // (vpunpcklwd / vpunpckhwd), so each chunk's accumulators hold dims in that lane order (lo:
  // 0-3, 8-11, 16-19, 24-27; hi: the other 16), put back in order when stored.
  template <int HB, int C32>
  static void pv_t(const uint32_t* pp, int nh, int n, const uint16_t* v, const int64_t* ro,
                   float* o, int64_t ostride) {
    alignas(64) static const int32_t kToLo[16] = {0,  1,  2,  3,  8,  9,  10, 11,
                                                  16, 17, 18, 19, 24, 25, 26, 27};
    alignas(64) static const int32_t kToHi[16] = {4,  5,  6,  7,  12, 13, 14, 15,
                                                  20, 21, 22, 23, 28, 29, 30, 31};
    alignas(64) static const int32_t kBack0[16] = {0, 1, 2, 3, 16, 17, 18, 19,
                                                   4, 5, 6, 7, 20, 21, 22, 23};
    alignas(64) static const int32_t kBack1[16] = {8,  9,  10, 11, 24, 25, 26, 27,
                                                   12, 13, 14, 15, 28, 29, 30, 31};
    const __m512i to_lo = _mm512_load_si512(kToLo), to_hi = _mm512_load_si512(kToHi);
    __m512 lo[HB][C32], hi[HB][C32];
#pragma GCC unroll 8
    for (int h = 0; h < HB; ++h)
#pragma GCC unroll 8
      for (int c = 0; c < C32; ++c) {
        const float* oh = o + h * ostride + 32 * c;
        const __m512 o0 = _mm512_loadu_ps(oh), o1 = _mm512_loadu_ps(oh + 16);
        lo[h][c] = _mm512_permutex2var_ps(o0, to_lo, o1);
        hi[h][c] = _mm512_permutex2var_ps(o0, to_hi, o1);
      }
    for (int jp = 0; 2 * jp < n; ++jp) {
      const uint16_t* v0 = v + ro[2 * jp];
      const uint16_t* v1 = 2 * jp + 1 < n ? v + ro[2 * jp + 1] : nullptr;
      __m512i xl[C32], xh[C32];
#pragma GCC unroll 8
      for (int c = 0; c < C32; ++c) {
        const __m512i a = _mm512_loadu_si512(v0 + 32 * c);
        const __m512i b = v1 ? _mm512_loadu_si512(v1 + 32 * c) : _mm512_setzero_si512();
        xl[c] = _mm512_unpacklo_epi16(a, b);
        xh[c] = _mm512_unpackhi_epi16(a, b);
      }
#pragma GCC unroll 8
      for (int h = 0; h < HB; ++h) {
        const __m512bh ph = as_bh(_mm512_set1_epi32(int(pp[int64_t(jp) * nh + h])));
#pragma GCC unroll 8
        for (int c = 0; c < C32; ++c) {
          lo[h][c] = _mm512_dpbf16_ps(lo[h][c], ph, as_bh(xl[c]));
          hi[h][c] = _mm512_dpbf16_ps(hi[h][c], ph, as_bh(xh[c]));
        }
      }
    }
    const __m512i back0 = _mm512_load_si512(kBack0), back1 = _mm512_load_si512(kBack1);
#pragma GCC unroll 8
    for (int h = 0; h < HB; ++h)
#pragma GCC unroll 8
      for (int c = 0; c < C32; ++c) {
        float* oh = o + h * ostride + 32 * c;
        _mm512_storeu_ps(oh, _mm512_permutex2var_ps(lo[h][c], back0, hi[h][c]));
        _mm512_storeu_ps(oh + 16, _mm512_permutex2var_ps(lo[h][c], back1, hi[h][c]));
      }
  }

  // pv_t over all hd / 32 chunks for hb (1, 2, 4 or 8) heads, at most 16 accumulators at a time.
  static void pv(int hb, int hd, const uint32_t* pp, int nh, int n, const uint16_t* v,
                 const int64_t* ro, float* o, int64_t ostride) {
    const int n32 = hd / 32;
    for (int c0 = 0; c0 < n32;) {
      int cb = 8 / hb;
      while (cb > n32 - c0) cb /= 2;
      const uint16_t* vc = v + 32 * c0;
      float* oc = o + 32 * c0;
      switch (hb * 16 + cb) {
        case 8 * 16 + 1:
          pv_t<8, 1>(pp, nh, n, vc, ro, oc, ostride);
          break;
        case 4 * 16 + 2:
          pv_t<4, 2>(pp, nh, n, vc, ro, oc, ostride);
          break;
        case 4 * 16 + 1:
          pv_t<4, 1>(pp, nh, n, vc, ro, oc, ostride);
          break;
        case 2 * 16 + 4:
          pv_t<2, 4>(pp, nh, n, vc, ro, oc, ostride);
          break;
        case 2 * 16 + 2:
          pv_t<2, 2>(pp, nh, n, vc, ro, oc, ostride);
          break;
        case 2 * 16 + 1:
          pv_t<2, 1>(pp, nh, n, vc, ro, oc, ostride);
          break;
        case 1 * 16 + 8:
          pv_t<1, 8>(pp, nh, n, vc, ro, oc, ostride);
          break;
        case 1 * 16 + 4:
          pv_t<1, 4>(pp, nh, n, vc, ro, oc, ostride);
          break;
        case 1 * 16 + 2:
          pv_t<1, 2>(pp, nh, n, vc, ro, oc, ostride);
          break;
        default:
          pv_t<1, 1>(pp, nh, n, vc, ro, oc, ostride);
          break;
      }
      c0 += cb;
    }
  }
};

}  // namespace

void attention_chunk_bf16_avx512(const AttnArgs& a, int64_t s, int64_t k0, int64_t k1,
                                 float* part) {
  const int hd = a.hd;  // a multiple of 32: hdp == hd
  const int64_t rows = a.n_tok(s) * a.n_heads;
  thread_local AlignedFloats qf, sc;
  thread_local std::vector<uint16_t> qb;
  qf.reserve(size_t(rows * hd));
  sc.reserve(size_t(rows * kDecBlock));
  qb.resize(size_t(rows * hd));
  chunk_init(a, s, qf.p, part);
  for (int64_t i = 0; i < rows * hd; i += 32) {
    const __m512bh x =
        _mm512_cvtne2ps_pbh(_mm512_loadu_ps(qf.p + i + 16), _mm512_loadu_ps(qf.p + i));
    _mm512_storeu_si512(qb.data() + i, reinterpret_cast<const __m512i&>(x));
  }
  chunk_gqa_t<KvType::bf16, true, Bf16Dot>(a, s, k0, k1, qf.p, sc.p, part, qb.data());
}

}  // namespace latprof::cpu::detail
