// AVX-512 attention unit: the online-softmax algorithm of attention.cpp, vectorised. For each
// query token, a block of 64 keys of the kv head is converted from fp16 once (vcvtph2ps) and
// used by every query head of the group; the exponentials are evaluated 16 at a time.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/cpu/internal.hpp"

// GCC 12 reports _mm512_undefined_*() inside the intrinsics headers as uninitialised (a known
// false positive once the intrinsics are inlined).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace latprof::cpu::detail {
namespace {

// exp(x): range reduction x = n ln2 + r, |r| <= ln2/2, degree-6 Taylor polynomial (relative
// error ~2e-7), 2^n applied with vscalefps. NaN propagates; below -87.3 the result is ~1e-38.
inline __m512 exp512(__m512 x) {
  x = _mm512_max_ps(_mm512_set1_ps(-87.3f), x);  // max(c, NaN) = NaN: keeps NaN visible
  x = _mm512_min_ps(_mm512_set1_ps(88.3f), x);
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.0f / 720);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  return _mm512_scalef_ps(p, n);
}

inline __mmask16 head_mask(int c, int nv, int hd) {
  const int rem = hd - 16 * (nv - 1);
  return c < nv - 1 || rem == 16 ? __mmask16(0xffff) : __mmask16((1u << rem) - 1);
}

}  // namespace

void attention_unit_avx512(const AttnArgs& a, int64_t s, int kvh, int64_t t0, int64_t t1) {
  constexpr int B = 64;  // keys per online-softmax step
  const int hd = a.hd, group = a.n_heads / a.n_kv_heads;
  const int nv = (hd + 15) / 16, hdp = 16 * nv;  // head padded to whole vectors (zeros)
  const int64_t kv_dim = int64_t(a.n_kv_heads) * hd;
  const float scale = 1.0f / std::sqrt(float(hd));
  std::vector<float> kf(size_t(B * hdp)), vf(size_t(B * hdp)), qf(size_t(group * hdp)),
      o(size_t(group * hdp)), sc(size_t(group * B)), mx(static_cast<size_t>(group)),
      sum(static_cast<size_t>(group));
  const __m512 vscale = _mm512_set1_ps(scale);

  auto convert_block = [&](const uint16_t* cache, int64_t j0, int nb, float* dst) {
    for (int j = 0; j < nb; ++j) {
      const uint16_t* src = cache + a.row(s, j0 + j) * kv_dim + int64_t(kvh) * hd;
      for (int c = 0; c < nv; ++c)
        _mm512_storeu_ps(dst + j * hdp + 16 * c, _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(
                                                     head_mask(c, nv, hd), src + 16 * c)));
    }
  };

  for (int64_t t = t0; t < t1; ++t) {
    const int64_t n_keys = a.pos(s, t) + 1;  // causal: positions [first, pos]
    const int64_t first = attn_first_key(a, a.pos(s, t));
    const int64_t row0 = (a.tok0(s) + t) * a.n_heads + int64_t(kvh) * group;
    for (int hh = 0; hh < group; ++hh) {
      const float* q = a.q + (row0 + hh) * hd;
      for (int c = 0; c < nv; ++c) {
        _mm512_storeu_ps(
            &qf[size_t(hh * hdp + 16 * c)],
            _mm512_mul_ps(_mm512_maskz_loadu_ps(head_mask(c, nv, hd), q + 16 * c), vscale));
        _mm512_storeu_ps(&o[size_t(hh * hdp + 16 * c)], _mm512_setzero_ps());
      }
      mx[size_t(hh)] = -std::numeric_limits<float>::infinity();
      sum[size_t(hh)] = 0;
    }
    // Blocks aligned to multiples of B; a sliding window clips the first: keys [j0 + js, j0 + nb).
    for (int64_t j0 = first / B * B; j0 < n_keys; j0 += B) {
      const int nb = int(std::min<int64_t>(B, n_keys - j0));
      const int js = int(std::max<int64_t>(0, first - j0));
      convert_block(a.k_cache, j0 + js, nb - js, kf.data() + js * hdp);
      for (int hh = 0; hh < group; ++hh) {
        const float* qh = &qf[size_t(hh * hdp)];
        float* sh = &sc[size_t(hh * B)];
        float block_max = -std::numeric_limits<float>::infinity();
        for (int j = js; j < nb; ++j) {
          __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
          const float* kj = &kf[size_t(j * hdp)];
          int c = 0;
          for (; c + 2 <= nv; c += 2) {
            acc0 =
                _mm512_fmadd_ps(_mm512_loadu_ps(qh + 16 * c), _mm512_loadu_ps(kj + 16 * c), acc0);
            acc1 = _mm512_fmadd_ps(_mm512_loadu_ps(qh + 16 * c + 16),
                                   _mm512_loadu_ps(kj + 16 * c + 16), acc1);
          }
          if (c < nv)
            acc0 =
                _mm512_fmadd_ps(_mm512_loadu_ps(qh + 16 * c), _mm512_loadu_ps(kj + 16 * c), acc0);
          sh[j] = _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1));
          block_max = std::max(block_max, sh[j]);
        }
        // Online softmax: rescale the running sums to the new maximum, add this block.
        const float new_max = std::max(mx[size_t(hh)], block_max);
        const float corr = std::exp(mx[size_t(hh)] - new_max);  // 0 on the first block
        mx[size_t(hh)] = new_max;
        const __m512 vmax = _mm512_set1_ps(new_max);
        __m512 psum = _mm512_setzero_ps();
        for (int j = js; j < nb; j += 16) {
          const __mmask16 mk = nb - j >= 16 ? __mmask16(0xffff) : __mmask16((1u << (nb - j)) - 1);
          const __m512 p = exp512(_mm512_sub_ps(_mm512_maskz_loadu_ps(mk, sh + j), vmax));
          _mm512_mask_storeu_ps(sh + j, mk, p);
          psum = _mm512_mask_add_ps(psum, mk, psum, p);
        }
        sum[size_t(hh)] = sum[size_t(hh)] * corr + _mm512_reduce_add_ps(psum);
        const __m512 vcorr = _mm512_set1_ps(corr);
        for (int c = 0; c < nv; ++c) {
          float* oc = &o[size_t(hh * hdp + 16 * c)];
          _mm512_storeu_ps(oc, _mm512_mul_ps(_mm512_loadu_ps(oc), vcorr));
        }
      }
      convert_block(a.v_cache, j0 + js, nb - js, vf.data() + js * hdp);
      for (int hh = 0; hh < group; ++hh) {
        const float* ph = &sc[size_t(hh * B)];
        for (int c0 = 0; c0 < nv; c0 += 8) {  // up to 8 accumulators (hd <= 128 in one pass)
          const int cn = std::min(8, nv - c0);
          __m512 acc[8];
          for (int c = 0; c < cn; ++c)
            acc[c] = _mm512_loadu_ps(&o[size_t(hh * hdp + 16 * (c0 + c))]);
          for (int j = js; j < nb; ++j) {
            const __m512 pj = _mm512_set1_ps(ph[j]);
            const float* vj = &vf[size_t(j * hdp + 16 * c0)];
            for (int c = 0; c < cn; ++c)
              acc[c] = _mm512_fmadd_ps(pj, _mm512_loadu_ps(vj + 16 * c), acc[c]);
          }
          for (int c = 0; c < cn; ++c)
            _mm512_storeu_ps(&o[size_t(hh * hdp + 16 * (c0 + c))], acc[c]);
        }
      }
    }
    for (int hh = 0; hh < group; ++hh) {
      const __m512 inv = _mm512_set1_ps(1.0f / sum[size_t(hh)]);
      float* out = a.out + (row0 + hh) * hd;
      for (int c = 0; c < nv; ++c)
        _mm512_mask_storeu_ps(out + 16 * c, head_mask(c, nv, hd),
                              _mm512_mul_ps(_mm512_loadu_ps(&o[size_t(hh * hdp + 16 * c)]), inv));
    }
  }
}

// Decode (few query tokens): keys [k0, k1) of sequence s (k0 a multiple of 64) for every token and
// every head, walking the cache key-major so each key's whole K row and V row (all kv heads,
// contiguous) stream from DRAM in address order. Per 64-key block the arithmetic of each query row
// is that of attention_unit_avx512 (same dot-product order, same online-softmax step), so a
// single-chunk call reproduces it bit for bit. Writes the un-normalised partial state of every
// (token, head) row to part: o[hdp], then max, then sum, stride attn_part_stride(hd).
void attention_chunk_avx512(const AttnArgs& a, int64_t s, int64_t k0, int64_t k1, float* part) {
  constexpr int B = 64, kAhead = 6;  // keys per softmax step; prefetch distance in rows
  const int hd = a.hd, group = a.n_heads / a.n_kv_heads, nh = a.n_heads;
  const int nv = (hd + 15) / 16, hdp = 16 * nv;
  const int64_t kv_dim = int64_t(a.n_kv_heads) * hd, nt = a.n_tok(s), ps = attn_part_stride(hd);
  const float scale = 1.0f / std::sqrt(float(hd));
  const __m512 vscale = _mm512_set1_ps(scale);
  thread_local std::vector<float> qf, sc, kb;
  qf.resize(size_t(nt * nh * hdp));
  sc.resize(size_t(nt * nh * B));
  kb.resize(size_t(hdp));
  // Raw pointers: thread_local objects are not re-read (TLS address, vector data) in the loops.
  float* const qfp = qf.data();
  float* const scp = sc.data();
  float* const kbp = kb.data();
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
    // Scores, key-major: one pass over the block's K rows.
    for (int j = 0; j < nb_all; ++j) {
      const uint16_t* krow = a.k_cache + a.row(s, j0 + j) * kv_dim;
      // Software prefetch of the row kAhead keys on (through the block table): keeps DRAM busy
      // while this row computes.
      const uint16_t* kahead =
          j + kAhead < nb_all ? a.k_cache + a.row(s, j0 + j + kAhead) * kv_dim : nullptr;
      for (int kvh = 0; kvh < a.n_kv_heads; ++kvh) {
        const uint16_t* src = krow + int64_t(kvh) * hd;
        if (kahead)
          for (int l = 0; l < hd; l += 32)
            _mm_prefetch(reinterpret_cast<const char*>(kahead + int64_t(kvh) * hd + l),
                         _MM_HINT_T0);
        for (int c = 0; c < nv; ++c)
          _mm512_storeu_ps(kbp + (16 * c), _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(
                                               head_mask(c, nv, hd), src + 16 * c)));
        for (int64_t t = 0; t < nt; ++t) {
          // causal (and windowed): not visible to token t
          if (j0 + j > a.pos(s, t) || j0 + j < attn_first_key(a, a.pos(s, t))) continue;
          for (int hh = 0; hh < group; ++hh) {
            const int h = kvh * group + hh;
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
    }
    // Online-softmax step per (token, head), exactly as in attention_unit_avx512.
    for (int64_t t = 0; t < nt; ++t) {
      const int nb = int(std::min<int64_t>(nb_all, a.pos(s, t) + 1 - j0));
      const int js = int(std::max<int64_t>(0, attn_first_key(a, a.pos(s, t)) - j0));
      if (nb <= js) continue;  // no key of this block is visible to token t
      for (int h = 0; h < nh; ++h) {
        float* sh = scp + ((t * nh + h) * B);
        float* o = part + (t * nh + h) * ps;
        float block_max = -std::numeric_limits<float>::infinity();
        for (int j = js; j < nb; ++j) block_max = std::max(block_max, sh[j]);
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
    // P·V, key-major: one pass over the block's V rows; each V slice converted once.
    for (int j = 0; j < nb_all; ++j) {
      const uint16_t* vrow = a.v_cache + a.row(s, j0 + j) * kv_dim;
      const uint16_t* vahead =
          j + kAhead < nb_all ? a.v_cache + a.row(s, j0 + j + kAhead) * kv_dim : nullptr;
      for (int kvh = 0; kvh < a.n_kv_heads; ++kvh) {
        const uint16_t* src = vrow + int64_t(kvh) * hd;
        if (vahead)
          for (int l = 0; l < hd; l += 32)
            _mm_prefetch(reinterpret_cast<const char*>(vahead + int64_t(kvh) * hd + l),
                         _MM_HINT_T0);
        for (int c = 0; c < nv; ++c)
          _mm512_storeu_ps(kbp + (16 * c), _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(
                                               head_mask(c, nv, hd), src + 16 * c)));
        for (int64_t t = 0; t < nt; ++t) {
          if (j0 + j > a.pos(s, t) || j0 + j < attn_first_key(a, a.pos(s, t))) continue;
          for (int hh = 0; hh < group; ++hh) {
            const int h = kvh * group + hh;
            const __m512 pj = _mm512_set1_ps(scp[(t * nh + h) * B + j]);
            float* o = part + (t * nh + h) * ps;
            for (int c = 0; c < nv; ++c)
              _mm512_storeu_ps(o + 16 * c, _mm512_fmadd_ps(pj, _mm512_loadu_ps(kbp + (16 * c)),
                                                           _mm512_loadu_ps(o + 16 * c)));
          }
        }
      }
    }
  }
}

}  // namespace latprof::cpu::detail
