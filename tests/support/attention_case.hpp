#pragma once
// The attention cases of the CUDA kernel tests, on a GPU (tests/gpu/test_gpu_ops.cpp) and under
// the emulation (tests/cuemu/kernels_test.cpp): a ragged step over a paged cache (paged_batch.hpp)
// with its printed name, its inputs and the cache it starts from, and its CPU reference
// (cpu::kv_store_paged + cpu::attention_paged, the specification). Header-only.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "kernels/cpu/kernels.hpp"
#include "tests/support/paged_batch.hpp"
#include "tests/support/tolerance.hpp"

namespace latprof::test {

struct AttnCase {
  std::vector<PagedSeq> seqs;
  int heads, kv, hd;
  int64_t block_size;
  int64_t window = 0;       // sliding window; 0: none
  int64_t max_context = 0;  // positions the tables address (the decode grid); 0: the longest
};

inline void PrintTo(const AttnCase& c, std::ostream* os) {
  *os << "seqs";
  for (const auto& q : c.seqs) *os << " " << q.pos0 << "+" << q.n_new;
  *os << " heads " << c.heads << "/" << c.kv << " hd " << c.hd << " block " << c.block_size
      << " window " << c.window;
}

inline std::string attn_case_name(const ::testing::TestParamInfo<AttnCase>& i) {
  const AttnCase& c = i.param;
  int64_t rows = 0, maxq = 0;
  for (const auto& q : c.seqs) {
    rows += q.n_new;
    maxq = std::max(maxq, q.n_new);
  }
  return std::string(maxq == 1 ? "decode" : "mixed") + "_seqs" + std::to_string(c.seqs.size()) +
         "_rows" + std::to_string(rows) + "_pos" + std::to_string(c.seqs[0].pos0) + "_h" +
         std::to_string(c.heads) + "kv" + std::to_string(c.kv) + "_d" + std::to_string(c.hd) +
         "_b" + std::to_string(c.block_size) +
         (c.window > 0 ? "_w" + std::to_string(c.window) : "");
}

// One case's host inputs: its step (seeded by the case's shape), fp16-representable q
// [rows, heads * hd] and k in [-2, 2], v in [-1, 1] [rows, kv * hd], and the cache the step starts
// from, [cache_rows, kv * hd] fp16 each: random rows in [-1, 1] in the owned blocks (the positions
// before each sequence's start), fp16 NaN 0x7e7e in the spare ones (a read of a block the
// sequence does not own fails).
struct AttnInputs {
  PagedBatch pb;
  int64_t rows = 0, q_dim = 0, kv_dim = 0;
  std::vector<float> q, k, v;
  std::vector<uint16_t> k_cache, v_cache;
};

inline AttnInputs attn_inputs(const AttnCase& c) {
  AttnInputs in;
  in.pb = make_paged_batch(c.seqs, c.block_size, c.max_context, uint64_t(c.hd * 31 + c.heads));
  const PagedBatch& pb = in.pb;
  in.rows = pb.n_tokens;
  in.q_dim = int64_t(c.heads) * c.hd;
  in.kv_dim = int64_t(c.kv) * c.hd;
  in.k_cache = to_half(random_vector(size_t(pb.cache_rows() * in.kv_dim), 8, -1, 1));
  in.v_cache = to_half(random_vector(size_t(pb.cache_rows() * in.kv_dim), 9, -1, 1));
  for (int64_t blk = 0; blk < pb.num_blocks; ++blk)
    if (!pb.owned[size_t(blk)]) {
      const size_t r0 = size_t(blk * pb.block_size * in.kv_dim);
      const size_t n = size_t(pb.block_size * in.kv_dim);
      std::fill_n(in.k_cache.begin() + std::ptrdiff_t(r0), n, uint16_t(0x7e7e));
      std::fill_n(in.v_cache.begin() + std::ptrdiff_t(r0), n, uint16_t(0x7e7e));
    }
  in.q = round_f16(random_vector(size_t(in.rows * in.q_dim), 10, -2, 2));
  in.k = round_f16(random_vector(size_t(in.rows * in.kv_dim), 11, -2, 2));
  in.v = round_f16(random_vector(size_t(in.rows * in.kv_dim), 12, -1, 1));
  return in;
}

// The CPU reference of one step: the new K and V rows [n_tokens, kv_heads * hd] stored by slot
// into the host caches (in place), and out [n_tokens, heads * hd] the attention of q over them.
inline void cpu_attention(const PagedBatch& pb, const std::vector<float>& q,
                          const std::vector<float>& k, const std::vector<float>& v, int heads,
                          int kvh, int hd, int64_t window, std::vector<uint16_t>& k_cache,
                          std::vector<uint16_t>& v_cache, std::vector<float>& out) {
  cpu::kv_store_paged(k.data(), v.data(), pb.n_tokens, pb.slots.data(), kvh, hd, cpu::KvType::f16,
                      k_cache.data(), v_cache.data());
  const cpu::RaggedBatch rb{pb.n_seqs,           pb.query_start.data(),
                            pb.positions.data(), pb.block_tables.data(),
                            pb.max_blocks,       pb.block_size};
  out.assign(size_t(pb.n_tokens * heads * hd), 0.f);
  cpu::attention_paged(q.data(), cpu::KvType::f16, k_cache.data(), v_cache.data(), rb, heads, kvh,
                       hd, window, out.data());
}

}  // namespace latprof::test
