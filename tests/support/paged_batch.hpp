#pragma once
// A ragged engine step over a paged KV cache, for the attention tests of the CUDA kernels
// (tests/cuemu/kernels_test.cpp, tests/gpu/test_gpu_ops.cpp): sequences given by their first new
// position and their number of new tokens, flattened sequence by sequence; the blocks each one
// needs are drawn from a shuffled pool (so neighbouring positions rarely live in neighbouring
// blocks), tables hold -1 past a sequence's blocks, and a few spare blocks belong to nobody.
// Header-only; the arrays are those of latprof::StepDesc.
#include <algorithm>
#include <cstdint>
#include <random>
#include <utility>
#include <vector>

namespace latprof::test {

struct PagedSeq {
  int64_t pos0 = 0;   // positions [0, pos0) are in the cache already
  int64_t n_new = 0;  // query rows of this step: positions [pos0, pos0 + n_new)
};

struct PagedBatch {
  int64_t block_size = 0, max_blocks = 0, num_blocks = 0;
  int64_t n_tokens = 0, n_seqs = 0, max_query_len = 0, max_context_len = 0;
  std::vector<int32_t> query_start;   // [n_seqs + 1]
  std::vector<int32_t> positions;     // [n_tokens]
  std::vector<int32_t> slots;         // [n_tokens]: cache row of each new token
  std::vector<int32_t> seq_of_token;  // [n_tokens]
  std::vector<int32_t> context_lens;  // [n_seqs]
  std::vector<int32_t> block_tables;  // [n_seqs, max_blocks], -1 past a sequence's blocks
  std::vector<char> owned;            // [num_blocks]: 1 when a sequence owns the block
  int64_t cache_rows() const { return num_blocks * block_size; }
  // The cache row of position p of sequence s.
  int64_t row(int64_t s, int64_t p) const {
    return int64_t(block_tables[size_t(s * max_blocks + p / block_size)]) * block_size +
           p % block_size;
  }
};

// max_context: positions per sequence the tables can address (max_blocks * block_size, rounded
// up); at least the longest context of the step. The pool holds the blocks the sequences need
// plus spare_blocks, or num_blocks when that is larger (a cache of a fixed size).
inline PagedBatch make_paged_batch(const std::vector<PagedSeq>& seqs, int64_t block_size,
                                   int64_t max_context, uint64_t seed, int64_t spare_blocks = 3,
                                   int64_t num_blocks = 0) {
  PagedBatch b;
  b.block_size = block_size;
  b.n_seqs = int64_t(seqs.size());
  int64_t need = 0;
  for (const PagedSeq& s : seqs) {
    const int64_t ctx = s.pos0 + s.n_new;
    max_context = std::max(max_context, ctx);
    need += (ctx + block_size - 1) / block_size;
  }
  b.max_blocks = (max_context + block_size - 1) / block_size;
  b.num_blocks = std::max(need + spare_blocks, num_blocks);
  // Fisher-Yates with mt19937_64 (its output is specified, so every platform draws the same).
  std::vector<int32_t> pool(static_cast<size_t>(b.num_blocks));
  for (size_t i = 0; i < pool.size(); ++i) pool[i] = int32_t(i);
  std::mt19937_64 rng(seed);
  for (size_t i = pool.size(); i > 1; --i) std::swap(pool[i - 1], pool[size_t(rng() % i)]);
  b.owned.assign(pool.size(), 0);
  size_t next = 0;
  b.block_tables.assign(size_t(b.n_seqs * b.max_blocks), -1);
  b.query_start.push_back(0);
  for (int64_t s = 0; s < b.n_seqs; ++s) {
    const PagedSeq& q = seqs[size_t(s)];
    const int64_t ctx = q.pos0 + q.n_new;
    for (int64_t k = 0; k < (ctx + block_size - 1) / block_size; ++k) {
      b.block_tables[size_t(s * b.max_blocks + k)] = pool[next];
      b.owned[size_t(pool[next++])] = 1;
    }
    for (int64_t t = 0; t < q.n_new; ++t) {
      b.positions.push_back(int32_t(q.pos0 + t));
      b.slots.push_back(int32_t(b.row(s, q.pos0 + t)));
      b.seq_of_token.push_back(int32_t(s));
    }
    b.query_start.push_back(int32_t(b.positions.size()));
    b.context_lens.push_back(int32_t(ctx));
    b.max_query_len = std::max(b.max_query_len, q.n_new);
    b.max_context_len = std::max(b.max_context_len, ctx);
  }
  b.n_tokens = int64_t(b.positions.size());
  return b;
}

}  // namespace latprof::test
