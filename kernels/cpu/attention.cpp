// KV-cache store and causal grouped-query attention. The portable path below is also the
// readable reference: for every query row, an online (streaming) softmax over blocks of keys, so
// nothing larger than one block of scores is ever materialised. attention_avx512.cpp has the
// same algorithm vectorised. (AVX2-only CPUs use this path.)
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/half.hpp"
#include "kernels/cpu/internal.hpp"

namespace latprof::cpu {
namespace detail {

void attention_unit_scalar(const AttnArgs& a, int64_t s, int kvh, int64_t t0, int64_t t1) {
  constexpr int64_t kBlock = 64;  // keys per online-softmax step
  const int hd = a.hd;
  const int group = a.n_heads / a.n_kv_heads;
  const int64_t kv_dim = int64_t(a.n_kv_heads) * hd;
  const float scale = 1.0f / std::sqrt(float(hd));
  std::vector<float> o(static_cast<size_t>(hd)), sc(static_cast<size_t>(kBlock));
  for (int64_t t = t0; t < t1; ++t) {
    const int64_t n_keys = a.pos0 + t + 1;  // causal: positions [first, pos0 + t]
    const int64_t first = attn_first_key(a, a.pos0 + t);
    for (int hh = 0; hh < group; ++hh) {
      const int h = kvh * group + hh;
      const int64_t row = (s * a.n_new + t) * a.n_heads + h;
      const float* q = a.q + row * hd;
      float run_max = -std::numeric_limits<float>::infinity(), run_sum = 0;
      std::fill(o.begin(), o.end(), 0.0f);
      // Blocks stay aligned to multiples of kBlock (as in the AVX-512 paths); a window clips the
      // first one: keys [j0 + js, j0 + nb).
      for (int64_t j0 = first / kBlock * kBlock; j0 < n_keys; j0 += kBlock) {
        const int64_t nb = std::min(kBlock, n_keys - j0), js = std::max<int64_t>(0, first - j0);
        float block_max = -std::numeric_limits<float>::infinity();
        for (int64_t j = js; j < nb; ++j) {
          const uint16_t* k = a.k_cache + (s * a.ctx_cap + j0 + j) * kv_dim + int64_t(kvh) * hd;
          float dot = 0;
          for (int d = 0; d < hd; ++d) dot += q[d] * half_to_float(k[d]);
          sc[size_t(j)] = dot * scale;
          block_max = std::max(block_max, sc[size_t(j)]);
        }
        // Rescale what was accumulated under the old maximum (exp(-inf) = 0 on the first block).
        const float new_max = std::max(run_max, block_max);
        const float corr = std::exp(run_max - new_max);
        run_sum *= corr;
        for (int d = 0; d < hd; ++d) o[size_t(d)] *= corr;
        for (int64_t j = js; j < nb; ++j) {
          const float p = std::exp(sc[size_t(j)] - new_max);
          run_sum += p;
          const uint16_t* v = a.v_cache + (s * a.ctx_cap + j0 + j) * kv_dim + int64_t(kvh) * hd;
          for (int d = 0; d < hd; ++d) o[size_t(d)] += p * half_to_float(v[d]);
        }
        run_max = new_max;
      }
      float* out = a.out + row * hd;
      const float inv = 1.0f / run_sum;
      for (int d = 0; d < hd; ++d) out[d] = o[size_t(d)] * inv;
    }
  }
}

}  // namespace detail

void kv_store(const float* k, const float* v, int64_t n_seq, int64_t n_new, int64_t pos0,
              int64_t ctx_cap, int64_t kv_dim, uint16_t* k_cache, uint16_t* v_cache) {
  const bool f16c = active_isa() != Isa::scalar;
#pragma omp parallel for schedule(static) if (n_seq * n_new * kv_dim > 65536)
  for (int64_t r = 0; r < n_seq * n_new; ++r) {
    const int64_t s = r / n_new, t = r % n_new;
    const int64_t dst = (s * ctx_cap + pos0 + t) * kv_dim;
    if (f16c) {
      detail::f32_to_f16_f16c(k + r * kv_dim, k_cache + dst, kv_dim);
      detail::f32_to_f16_f16c(v + r * kv_dim, v_cache + dst, kv_dim);
    } else {
      for (int64_t i = 0; i < kv_dim; ++i) {
        k_cache[dst + i] = float_to_half(k[r * kv_dim + i]);
        v_cache[dst + i] = float_to_half(v[r * kv_dim + i]);
      }
    }
  }
}

void attention(const float* q, const uint16_t* k_cache, const uint16_t* v_cache, int64_t n_seq,
               int64_t n_new, int64_t pos0, int64_t ctx_cap, int n_heads, int n_kv_heads, int hd,
               float* out, int64_t window) {
  if (n_seq <= 0 || n_new <= 0) return;
  const detail::AttnArgs a{q,       k_cache,    v_cache, n_new, pos0,  ctx_cap,
                           n_heads, n_kv_heads, hd,      out,   window};
  if (active_isa() == Isa::avx512 && n_new <= 4 && hd <= 512) {
    // Decode: few tokens, so the cost is streaming K and V once. Split the keys of each sequence
    // into chunks of 64-key blocks (many per thread, for balance), walk each chunk key-major
    // over whole cache rows, then merge the chunks' online-softmax states.
    constexpr int64_t kBlock = 64;
    // Blocks [b0, b0 + blocks): from the first key the first new token sees (a sliding window
    // starts past 0) to the last new token.
    const int64_t b0 = detail::attn_first_key(a, pos0) / kBlock;
    const int64_t blocks = (pos0 + n_new + kBlock - 1) / kBlock - b0;
    const int64_t per_chunk =
        std::max<int64_t>(1, n_seq * blocks / (16 * int64_t(omp_get_max_threads())));
    const int64_t nc = (blocks + per_chunk - 1) / per_chunk, ck = per_chunk * kBlock;
    const int64_t ps = detail::attn_part_stride(hd), rows = n_new * n_heads;
    thread_local std::vector<float> part;
    part.resize(size_t(n_seq * nc * rows * ps));
    float* const pp = part.data();  // (part itself is this thread's: not visible by name below)
    const int hdp = int(ps - 16);
#pragma omp parallel
    {
#pragma omp for schedule(dynamic, 1)
      for (int64_t u = 0; u < n_seq * nc; ++u) {
        const int64_t s = u / nc, c = u % nc;
        const int64_t k0 = b0 * kBlock + c * ck;
        detail::attention_chunk_avx512(a, s, k0, std::min(pos0 + n_new, k0 + ck),
                                       pp + u * rows * ps);
      }
#pragma omp for schedule(static)
      for (int64_t r = 0; r < n_seq * rows; ++r) {
        const int64_t s = r / rows, rr = r % rows;
        const float* p0 = pp + (s * nc * rows + rr) * ps;
        float m = -std::numeric_limits<float>::infinity();
        for (int64_t c = 0; c < nc; ++c) m = std::max(m, p0[c * rows * ps + hdp]);
        float o[512], l = 0;
        float* dst = out + r * hd;
        std::fill(o, o + hd, 0.0f);
        for (int64_t c = 0; c < nc; ++c) {
          const float* pc = p0 + c * rows * ps;
          const float w = std::exp(pc[hdp] - m);  // 0 for a chunk no key of which is visible
          if (w == 0) continue;
          l += w * pc[hdp + 1];
          for (int d = 0; d < hd; ++d) o[d] += w * pc[d];
        }
        const float inv = 1.0f / l;
        for (int d = 0; d < hd; ++d) dst[d] = o[d] * inv;
      }
    }
    return;
  }
  auto* unit =
      active_isa() == Isa::avx512 ? detail::attention_unit_avx512 : detail::attention_unit_scalar;
  // Work units: (sequence, kv head, chunk of query tokens). Decode has one token per unit, so
  // each unit streams its slice of the K/V cache once for the whole head group.
  constexpr int64_t kTokens = 16;
  const int64_t chunks = (n_new + kTokens - 1) / kTokens;
  const int64_t units = n_seq * n_kv_heads * chunks;
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t u = 0; u < units; ++u) {
    // Later chunks attend to more keys: hand them out first for a better balance.
    const int64_t c = chunks - 1 - u % chunks;
    const int64_t sk = u / chunks;
    unit(a, sk / n_kv_heads, int(sk % n_kv_heads), c * kTokens, std::min(n_new, (c + 1) * kTokens));
  }
}

}  // namespace latprof::cpu
