#pragma once
// One engine step as flat host arrays, the form a backend uploads and its kernels read (the
// "varlen" convention of FlashAttention and vLLM): the step's tokens flattened sequence by
// sequence, each with its position and KV slot; per sequence its token range, context length
// and block table; the rows whose logits are needed.
#include <cstdint>
#include <vector>

#include "engine/scheduler.hpp"

namespace latprof::engine {

struct StepBatch {
  int64_t block_size = 0;
  std::vector<int32_t> tokens;          // [T] token ids
  std::vector<int32_t> positions;       // [T] absolute position of each token in its sequence
  std::vector<int32_t> seq_of_token;    // [T] index of the token's sequence in this step
  std::vector<int32_t> slots;           // [T] KV row: block * block_size + position % block_size
  std::vector<int32_t> query_start;     // [S + 1] tokens of sequence s: [query_start[s], [s + 1])
  std::vector<int32_t> context_lens;    // [S] positions in the cache after this step
  int64_t max_blocks = 0;               // row length of block_tables
  std::vector<int32_t> block_tables;    // [S, max_blocks]; unused entries hold -1
  std::vector<int32_t> logits_rows;     // token rows whose logits are sampled, in plan order
  std::vector<int64_t> sample_streams;  // [n_logits] the request each sampled row belongs to
  std::vector<int64_t> sample_index;    // [n_logits] index of the token it samples in its request
  std::vector<int64_t> request_ids;     // [S]

  int64_t num_tokens() const { return int64_t(tokens.size()); }
  int64_t num_seqs() const { return int64_t(request_ids.size()); }
  // Sequence i's tokens in this step, and its positions cached before them.
  int64_t new_tokens(int64_t i) const {
    return query_start[size_t(i) + 1] - query_start[size_t(i)];
  }
  int64_t past(int64_t i) const { return context_lens[size_t(i)] - new_tokens(i); }
  // Per sequence: whether one of its rows is sampled (false for a chunk of a prompt before its
  // last).
  std::vector<bool> samples() const {
    std::vector<bool> s(size_t(num_seqs()), false);
    for (int32_t row : logits_rows) s[size_t(seq_of_token[size_t(row)])] = true;
    return s;
  }
};

// Flattens `plan` (after schedule(), before complete()) with the scheduler's token ids and
// block tables.
StepBatch build_step(const StepPlan& plan, const Scheduler& s);

}  // namespace latprof::engine
