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
      const uint16_t* src = cache + (s * a.ctx_cap + j0 + j) * kv_dim + int64_t(kvh) * hd;
      for (int c = 0; c < nv; ++c)
        _mm512_storeu_ps(dst + j * hdp + 16 * c, _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(
                                                     head_mask(c, nv, hd), src + 16 * c)));
    }
  };

  for (int64_t t = t0; t < t1; ++t) {
    const int64_t n_keys = a.pos0 + t + 1;  // causal: positions [0, pos0 + t]
    const int64_t row0 = (s * a.n_new + t) * a.n_heads + int64_t(kvh) * group;
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
    for (int64_t j0 = 0; j0 < n_keys; j0 += B) {
      const int nb = int(std::min<int64_t>(B, n_keys - j0));
      convert_block(a.k_cache, j0, nb, kf.data());
      for (int hh = 0; hh < group; ++hh) {
        const float* qh = &qf[size_t(hh * hdp)];
        float* sh = &sc[size_t(hh * B)];
        float block_max = -std::numeric_limits<float>::infinity();
        for (int j = 0; j < nb; ++j) {
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
        for (int j = 0; j < nb; j += 16) {
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
      convert_block(a.v_cache, j0, nb, vf.data());
      for (int hh = 0; hh < group; ++hh) {
        const float* ph = &sc[size_t(hh * B)];
        for (int c0 = 0; c0 < nv; c0 += 8) {  // up to 8 accumulators (hd <= 128 in one pass)
          const int cn = std::min(8, nv - c0);
          __m512 acc[8];
          for (int c = 0; c < cn; ++c)
            acc[c] = _mm512_loadu_ps(&o[size_t(hh * hdp + 16 * (c0 + c))]);
          for (int j = 0; j < nb; ++j) {
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

}  // namespace latprof::cpu::detail
