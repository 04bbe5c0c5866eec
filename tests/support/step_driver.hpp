#pragma once
// Drives a LoadedModel with rectangular steps, as the tests of the forward pass need: n_seq
// sequences of n_new tokens each at positions pos0.., through the engine's executor
// (ModelRunner), with each sequence's KV blocks assigned contiguously. The logits of each
// sequence's last token are left in m.logits [n_seq, vocab]; the greedy tokens are returned.
#include <cstdint>
#include <vector>

#include "engine/step.hpp"
#include "runner/model.hpp"
#include "runner/model_runner.hpp"
#include "runner/profiler.hpp"

namespace latprof::test {

// An engine shape for n_seq sequences of at most max_new tokens per step and ctx positions.
inline EngineShape rect_shape(int64_t n_seq, int64_t max_new, int64_t ctx, int64_t block = 16) {
  EngineShape e;
  e.block_size = block;
  e.max_model_len = ctx;
  e.kv_blocks = n_seq * e.max_blocks();
  e.max_step_tokens = n_seq * max_new;
  e.max_seqs = n_seq;
  return e;
}

class StepDriver {
 public:
  explicit StepDriver(LoadedModel& m, SamplingParams sp = {})
      : m_(m), prof_(m.backend()), runner_(m, prof_, sp) {}

  std::vector<int32_t> step(const std::vector<int32_t>& tokens, int64_t n_seq, int64_t n_new,
                            int64_t pos0) {
    const EngineShape& e = m_.shape();
    const int64_t mb = e.max_blocks();
    engine::StepBatch b;
    b.block_size = e.block_size;
    b.max_blocks = mb;
    b.query_start.push_back(0);
    for (int64_t s = 0; s < n_seq; ++s) {
      for (int64_t t = 0; t < n_new; ++t) {
        const int64_t p = pos0 + t;
        b.tokens.push_back(tokens[size_t(s * n_new + t)]);
        b.positions.push_back(int32_t(p));
        b.seq_of_token.push_back(int32_t(s));
        b.slots.push_back(int32_t((s * mb + p / e.block_size) * e.block_size + p % e.block_size));
      }
      b.query_start.push_back(int32_t(b.tokens.size()));
      b.context_lens.push_back(int32_t(pos0 + n_new));
      for (int64_t k = 0; k < mb; ++k) b.block_tables.push_back(int32_t(s * mb + k));
      b.logits_rows.push_back(int32_t(b.tokens.size() - 1));
      b.sample_streams.push_back(s);
      b.sample_index.push_back(pos0);
      b.request_ids.push_back(s);
    }
    return runner_.execute(b);
  }
  Profiler& profiler() { return prof_; }

 private:
  LoadedModel& m_;
  Profiler prof_;
  ModelRunner runner_;
};

}  // namespace latprof::test
