// KV-cache store and causal grouped-query attention. The portable path below is also the
// readable reference: for every query row, an online (streaming) softmax over blocks of keys, so
// nothing larger than one block of scores is ever materialised. attention_avx512.cpp has the
// same algorithm vectorised, attention_avx2.cpp the same blocked for AVX2-only CPUs.
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "core/half.hpp"
#include "kernels/cpu/internal.hpp"

namespace latprof::cpu {

namespace detail {

// Here, not in the AMX file, whose instruction set only AMX CPUs have.
bool attention_amx_applies(const AttnArgs& a) {
  return a.kv == KvType::f16 && a.hd % 32 == 0 && a.hd <= 256 && amx_f16_active();
}

namespace {

// dst[0 .. hd) = the K (k) or V cache's slice of (row, kv head kvh) in fp32.
void widen_slice(const AttnArgs& a, bool k, int64_t row, int kvh, float* dst) {
  const void* cache = k ? a.k_cache : a.v_cache;
  if (k && a.k_tiled) {  // fp16, 16 apart
    const uint16_t* x = static_cast<const uint16_t*>(cache) +
                        k_cache_index(KLayout::tiled16, row, int64_t(kvh) * a.hd, a.kv_dim());
    for (int d = 0; d < a.hd; ++d) dst[d] = half_to_float(x[16 * d]);
    return;
  }
  const int64_t at = row * a.row_elems() + kvh * a.slice_elems();
  if (a.kv == KvType::i8) {
    const int8_t* x = static_cast<const int8_t*>(cache) + at;
    float scale;
    std::memcpy(&scale, x + a.hd, sizeof scale);
    for (int d = 0; d < a.hd; ++d) dst[d] = float(x[d]) * scale;
  } else {
    const uint16_t* x = static_cast<const uint16_t*>(cache) + at;
    for (int d = 0; d < a.hd; ++d)
      dst[d] = a.kv == KvType::bf16 ? bf16_to_float(x[d]) : half_to_float(x[d]);
  }
}

std::atomic<bool> g_kv_dot{true};

}  // namespace

bool i8_dot_allowed() {
  return g_kv_dot && has_vnni();
}

void attention_unit_scalar(const AttnArgs& a, int64_t s, int kvh, int64_t t0, int64_t t1) {
  constexpr int64_t kBlock = 64;  // keys per online-softmax step
  const int hd = a.hd;
  const int group = a.n_heads / a.n_kv_heads;
  const float scale = 1.0f / std::sqrt(float(hd));
  std::vector<float> o(static_cast<size_t>(hd)), sc(static_cast<size_t>(kBlock)),
      x(static_cast<size_t>(hd));
  for (int64_t t = t0; t < t1; ++t) {
    const int64_t n_keys = a.pos(s, t) + 1;  // causal: positions [first, pos]
    const int64_t first = attn_first_key(a, a.pos(s, t));
    for (int hh = 0; hh < group; ++hh) {
      const int h = kvh * group + hh;
      const int64_t row = (a.tok0(s) + t) * a.n_heads + h;
      const float* q = a.q + row * hd;
      float run_max = -std::numeric_limits<float>::infinity(), run_sum = 0;
      std::fill(o.begin(), o.end(), 0.0f);
      // Blocks stay aligned to multiples of kBlock (as in the AVX-512 paths); a window clips the
      // first one: keys [j0 + js, j0 + nb).
      for (int64_t j0 = first / kBlock * kBlock; j0 < n_keys; j0 += kBlock) {
        const int64_t nb = std::min(kBlock, n_keys - j0), js = std::max<int64_t>(0, first - j0);
        float block_max = -std::numeric_limits<float>::infinity();
        for (int64_t j = js; j < nb; ++j) {
          widen_slice(a, true, a.row(s, j0 + j), kvh, x.data());
          float dot = 0;
          for (int d = 0; d < hd; ++d) dot += q[d] * x[size_t(d)];
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
          widen_slice(a, false, a.row(s, j0 + j), kvh, x.data());
          for (int d = 0; d < hd; ++d) o[size_t(d)] += p * x[size_t(d)];
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

void allow_kv_dot(bool allow) {
  detail::g_kv_dot = allow;
}

bool bf16_kv_dot_in_use() {
  return active_isa() == Isa::avx512 && detail::g_kv_dot && has_avx512_bf16() &&
         stream_tuning().bf16_kv_dot;
}

namespace {

// One slice of hd values to int8 and its scale: scale = max |x| / 127, values x / scale rounded
// to the nearest (ties to even). A slice of zeros (or of values so small that the scale is 0)
// stores scale 0 and zeros; a slice with a value that is not finite stores a NaN scale and zeros
// (it reads back as NaN, as an fp16 cache would hold a NaN or an infinity).
void quantize_slice(const float* x, int hd, int8_t* dst) {
  float amax = 0;
  bool finite = true;
  for (int d = 0; d < hd; ++d) {
    finite = finite && std::isfinite(x[d]);
    amax = std::max(amax, std::fabs(x[d]));
  }
  const float scale = finite ? amax / 127.0f : std::numeric_limits<float>::quiet_NaN();
  for (int d = 0; d < hd; ++d)
    dst[d] = finite && scale > 0 ? int8_t(std::clamp(std::nearbyint(x[d] / scale), -127.0f, 127.0f))
                                 : int8_t(0);
  std::memcpy(dst + hd, &scale, sizeof scale);
}

}  // namespace

void kv_store_paged(const float* k, const float* v, int64_t rows, const int32_t* slots,
                    int n_kv_heads, int hd, KvType kv, void* k_cache, void* v_cache, KLayout kl) {
  const int64_t kv_dim = int64_t(n_kv_heads) * hd;
  const bool tiled = kl == KLayout::tiled16 && kv == KvType::f16;
  const bool f16c = active_isa() != Isa::scalar;
  detail::parallel_for(rows, rows * kv_dim > 65536, [&](int64_t r) {
    if (kv == KvType::i8) {
      const int64_t slice = kv_slice_bytes(kv, hd), dst = int64_t(slots[r]) * n_kv_heads * slice;
      for (int h = 0; h < n_kv_heads; ++h) {
        quantize_slice(k + r * kv_dim + h * hd, hd,
                       static_cast<int8_t*>(k_cache) + dst + h * slice);
        quantize_slice(v + r * kv_dim + h * hd, hd,
                       static_cast<int8_t*>(v_cache) + dst + h * slice);
      }
      return;
    }
    uint16_t* const kc = static_cast<uint16_t*>(k_cache);
    uint16_t* const vc = static_cast<uint16_t*>(v_cache);
    const int64_t dst = int64_t(slots[r]) * kv_dim;
    if (kv == KvType::bf16) {
      for (int64_t i = 0; i < kv_dim; ++i) {
        kc[dst + i] = float_to_bf16(k[r * kv_dim + i]);
        vc[dst + i] = float_to_bf16(v[r * kv_dim + i]);
      }
    } else if (tiled) {  // K's elements 16 apart in the row's tile; V by rows
      uint16_t* kt = kc + k_cache_index(kl, slots[r], 0, kv_dim);
      if (f16c) {
        thread_local std::vector<uint16_t> kh;
        kh.resize(size_t(kv_dim));
        detail::f32_to_f16_f16c(k + r * kv_dim, kh.data(), kv_dim);
        for (int64_t i = 0; i < kv_dim; ++i) kt[16 * i] = kh[size_t(i)];
        detail::f32_to_f16_f16c(v + r * kv_dim, vc + dst, kv_dim);
      } else {
        for (int64_t i = 0; i < kv_dim; ++i) {
          kt[16 * i] = float_to_half(k[r * kv_dim + i]);
          vc[dst + i] = float_to_half(v[r * kv_dim + i]);
        }
      }
    } else if (f16c) {
      detail::f32_to_f16_f16c(k + r * kv_dim, kc + dst, kv_dim);
      detail::f32_to_f16_f16c(v + r * kv_dim, vc + dst, kv_dim);
    } else {
      for (int64_t i = 0; i < kv_dim; ++i) {
        kc[dst + i] = float_to_half(k[r * kv_dim + i]);
        vc[dst + i] = float_to_half(v[r * kv_dim + i]);
      }
    }
  });
}

void attention_paged(const float* q, KvType kv, const void* k_cache, const void* v_cache,
                     const RaggedBatch& b, int n_heads, int n_kv_heads, int hd, int64_t window,
                     float* out, KLayout kl) {
  if (b.n_seqs <= 0) return;
  // vdpbf16ps or vpdpbusd for the GQA decode (where the multiply-adds bound it); MHA decodes
  // widen the cache.
  const bool gqa = n_heads != n_kv_heads && active_isa() == Isa::avx512;
  const bool dot = gqa && kv == KvType::bf16 && hd % 32 == 0 && bf16_kv_dot_in_use();
  const bool dot8 = gqa && kv == KvType::i8 && hd % 4 == 0 && detail::i8_dot_allowed();
  const detail::AttnArgs a{q,
                           k_cache,
                           v_cache,
                           b.query_start,
                           b.positions,
                           b.block_tables,
                           b.max_blocks,
                           b.block_size,
                           n_heads,
                           n_kv_heads,
                           hd,
                           out,
                           window,
                           kv,
                           dot,
                           dot8,
                           kl == KLayout::tiled16 && kv == KvType::f16};
  // Sequences with few query tokens (decodes) stream their cache once, split over keys; the
  // others (prefill chunks) are cut into units of query tokens per kv head.
  constexpr int64_t kFewTokens = 4;
  // On AVX2 only without GQA: there a unit of one head reads its pieces of the cache rows, far
  // apart, and the chunks walk whole rows (llama-2-7b's heads 1.03-1.29x as fast on AMD Zen 3);
  // with GQA a unit of a kv head and its group ran faster than chunks (tinyllama's 0.77-0.87x
  // split; reports/cpu-kernels.md).
  const bool split =
      (active_isa() == Isa::avx512 || (active_isa() == Isa::avx2 && n_heads == n_kv_heads)) &&
      hd <= 512;
  // The bookkeeping below lives in the calling thread's vectors, kept from call to call: a decode
  // calls this once a layer, and allocating them anew took ~2 us of a ~50 us call (tinyllama-1.1b,
  // context 544, AMD Zen 4). The names are references, so that the parallel regions' threads use
  // the caller's vectors, not their own thread_local ones.
  thread_local std::vector<int64_t> few_tl, many_tl;
  auto &few = few_tl, &many = many_tl;
  few.clear();
  many.clear();
  for (int64_t s = 0; s < b.n_seqs; ++s)
    if (a.n_tok(s) > 0) (split && a.n_tok(s) <= kFewTokens ? few : many).push_back(s);

  if (!few.empty()) {
    // Split the keys of each such sequence into chunks (several per thread at long context, for
    // balance), walk each chunk key-major over whole cache rows, then merge the chunks'
    // online-softmax states. Keys of sequence s: from the first key its first token sees (a
    // sliding window starts past 0) to its last token's position.
    struct Unit {
      int64_t s, k0, k1, part;
    };
    thread_local std::vector<Unit> units_tl;
    thread_local std::vector<int64_t> first_unit_tl;
    auto& units = units_tl;
    auto& first_unit = first_unit_tl;
    units.clear();
    first_unit.assign(few.size() + 1, 0);
    auto key_range = [&](int64_t s) {
      return std::pair<int64_t, int64_t>{detail::attn_first_key(a, a.pos(s, 0)),
                                         a.pos(s, a.n_tok(s) - 1) + 1};
    };
    int64_t keys_all = 0;
    for (int64_t s : few) {
      const auto [kb, ke] = key_range(s);
      keys_all += ke - kb;
    }
    // Chunks of at least kMinKeys keys, a multiple of the threads (up to 16 per thread, for balance
    // at very long contexts), cut evenly at multiples of 16 keys. Each chunk starts its walk (the
    // prefetch ahead of it cold) and sets up and merges every head's state. With chunks of >= 256
    // KB of K and V before (6 of ~333 keys on 2 threads at tinyllama's heads and context 2,000;
    // 8-32 of 64-125 keys at 7B's, contexts 512-4,000) a decode took 1.09x the time of one chunk
    // per thread at tinyllama's heads, 1.07-1.10x at 7B's at 2,000-4,000 and 1.19x at 512
    // (reports/cpu-kernels.md). Whole 64-key blocks per chunk, before that, left one thread 8
    // blocks and the other 4 at context 712.
    const int64_t threads = omp_get_max_threads();
    constexpr int64_t kGrain = 16, kMinKeys = 1024;
    const int64_t chunks_all =
        threads * std::clamp<int64_t>(keys_all / (threads * kMinKeys), 1, 16);
    const int64_t ps = detail::attn_part_stride(hd);
    int64_t part_floats = 0;
    for (size_t i = 0; i < few.size(); ++i) {
      const int64_t s = few[i];
      first_unit[i] = int64_t(units.size());
      const auto [kb, ke] = key_range(s);
      const int64_t rows = a.n_tok(s) * n_heads, n = ke - kb;
      // This sequence's share of the chunks, its keys cut at multiples of kGrain.
      const int64_t nc = std::clamp<int64_t>((chunks_all * n + keys_all / 2) / keys_all, 1,
                                             (n + kGrain - 1) / kGrain);
      int64_t k0 = kb;
      for (int64_t c = 1; c <= nc; ++c) {
        const int64_t k1 = c == nc ? ke : kb + n * c / nc / kGrain * kGrain;
        if (k1 <= k0) continue;
        units.push_back({s, k0, k1, part_floats});
        part_floats += rows * ps;
        k0 = k1;
      }
    }
    first_unit[few.size()] = int64_t(units.size());
    // Each unit's partial state goes to the memory of the thread that computes it (its own
    // buffer, at the unit's offset): written into the calling thread's buffer, the other thread's
    // chunk took ~5 us longer (its ~10 KB of state crossing to the other core line by line).
    thread_local std::vector<float*> state;
    state.assign(units.size(), nullptr);
    float** const st = state.data();
    const int hdp = int(ps - 16);
    // Output rows of the merge: (sequence among `few`, token row within it).
    thread_local std::vector<std::pair<int64_t, int64_t>> rows_of_tl;
    auto& rows_of = rows_of_tl;
    rows_of.clear();
    for (size_t i = 0; i < few.size(); ++i)
      for (int64_t r = 0; r < a.n_tok(few[i]) * n_heads; ++r) rows_of.emplace_back(int64_t(i), r);
    detail::SyncRegion sync;
#pragma omp parallel
    {
      sync.start();
#pragma omp for schedule(dynamic, 1) nowait
      for (int64_t u = 0; u < int64_t(units.size()); ++u) {
        const Unit& un = units[size_t(u)];
        thread_local detail::AlignedFloats mine;
        mine.reserve(size_t(part_floats));
        st[u] = mine.p + un.part;
        if (active_isa() == Isa::avx512)
          detail::attention_chunk_avx512(a, un.s, un.k0, un.k1, st[u]);
        else
          detail::attention_chunk_avx2(a, un.s, un.k0, un.k1, st[u]);
      }
      sync.barrier();  // every chunk's partial state is written before the merge
#pragma omp for schedule(static) nowait
      for (int64_t x = 0; x < int64_t(rows_of.size()); ++x) {
        const auto [i, rr] = rows_of[size_t(x)];
        const int64_t s = few[size_t(i)];
        const int64_t u0 = first_unit[size_t(i)], nc = first_unit[size_t(i) + 1] - u0;
        float m = -std::numeric_limits<float>::infinity();
        for (int64_t c = 0; c < nc; ++c) m = std::max(m, st[u0 + c][rr * ps + hdp]);
        float o[512], l = 0;
        float* dst = out + (a.tok0(s) * n_heads + rr) * hd;
        std::fill(o, o + hd, 0.0f);
        for (int64_t c = 0; c < nc; ++c) {
          const float* pc = st[u0 + c] + rr * ps;
          const float w = std::exp(pc[hdp] - m);  // 0 for a chunk no key of which is visible
          if (w == 0) continue;
          l += w * pc[hdp + 1];
          for (int d = 0; d < hd; ++d) o[d] += w * pc[d];
        }
        const float inv = 1.0f / l;
        for (int d = 0; d < hd; ++d) dst[d] = o[d] * inv;
      }
      sync.done();
    }
    sync.finish();
  }

  if (!many.empty()) {
    auto* unit = detail::attention_unit_scalar;
    if (active_isa() == Isa::avx512)
      unit = detail::attention_unit_avx512;
    else if (active_isa() == Isa::avx2)
      unit = detail::attention_unit_avx2;
    // Work units: (sequence, kv head, chunk of query tokens). A one-token unit streams its slice
    // of the K/V cache once for the whole head group. On AVX-512 a unit is one tile of the
    // transposed kernel, 64 query rows (64 tokens without GQA, 16 with 4 heads per kv head):
    // 16-token units left 7B's tiles a quarter full.
    // On AVX2 a unit is up to 64 query rows too (its scaled q and output accumulators, 32 KB
    // each at hd 128, stay in L2 beside the key block).
    // With the AMX tiles, a unit is one of their tiles, up to 512 query rows.
    const int64_t group = n_heads / n_kv_heads;
    const int64_t kTokens =
        active_isa() == Isa::avx512
            ? std::max<int64_t>(16, (detail::attention_amx_applies(a) ? detail::kAttnAmxRows
                                                                      : detail::kAttnTileRows) /
                                        group)
        : active_isa() == Isa::avx2 ? std::max<int64_t>(1, detail::kAttnTileRows / group)
                                    : 16;
    struct Unit {
      int64_t s;
      int kvh;
      int64_t t0, t1;
    };
    std::vector<Unit> units;
    for (int64_t s : many) {
      const int64_t nt = a.n_tok(s), chunks = (nt + kTokens - 1) / kTokens;
      // Head-major, so the threads work through one kv head's chunks together and its K and V
      // (2 MB at 7B's 4,096 positions) are read from DRAM once, not once per chunk; within a
      // head, later chunks (more keys) first, for the balance at the end.
      for (int kvh = 0; kvh < n_kv_heads; ++kvh)
        for (int64_t c = chunks - 1; c >= 0; --c)
          units.push_back({s, kvh, c * kTokens, std::min(nt, (c + 1) * kTokens)});
    }
    detail::SyncRegion sync;
#pragma omp parallel
    {
      sync.start();
#pragma omp for schedule(dynamic, 1) nowait
      for (int64_t u = 0; u < int64_t(units.size()); ++u) {
        const Unit& un = units[size_t(u)];
        unit(a, un.s, un.kvh, un.t0, un.t1);
      }
      sync.done();
    }
    sync.finish();
  }
}

}  // namespace latprof::cpu
