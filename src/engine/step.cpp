#include "engine/step.hpp"

#include <algorithm>

#include "core/error.hpp"

namespace latprof::engine {

StepBatch build_step(const StepPlan& plan, const Scheduler& s) {
  StepBatch b;
  const int64_t bs = s.pool().block_size();
  b.block_size = bs;
  const size_t n_tokens = size_t(plan.total_tokens());
  b.tokens.reserve(n_tokens);
  b.positions.reserve(n_tokens);
  b.seq_of_token.reserve(n_tokens);
  b.slots.reserve(n_tokens);
  b.query_start.push_back(0);
  for (const ScheduledSeq& q : plan.seqs) {
    const Request& r = s.request(q.request_id);
    b.max_blocks = std::max<int64_t>(b.max_blocks, int64_t(r.blocks.size()));
  }
  b.block_tables.assign(plan.seqs.size() * size_t(b.max_blocks), -1);
  for (size_t i = 0; i < plan.seqs.size(); ++i) {
    const ScheduledSeq& q = plan.seqs[i];
    const Request& r = s.request(q.request_id);
    LATPROF_ASSERT(int64_t(r.blocks.size()) * bs >= q.start + q.num_tokens,
                   "request " + std::to_string(r.id) + " has too few blocks for its step");
    for (int64_t p = q.start; p < q.start + q.num_tokens; ++p) {
      b.tokens.push_back(r.token_at(p));
      b.positions.push_back(int32_t(p));
      b.seq_of_token.push_back(int32_t(i));
      b.slots.push_back(int32_t(int64_t(r.blocks[size_t(p / bs)]) * bs + p % bs));
    }
    b.query_start.push_back(int32_t(b.tokens.size()));
    b.context_lens.push_back(int32_t(q.start + q.num_tokens));
    std::copy(r.blocks.begin(), r.blocks.end(),
              b.block_tables.begin() + std::ptrdiff_t(i * size_t(b.max_blocks)));
    if (q.sample) {
      b.logits_rows.push_back(int32_t(b.tokens.size() - 1));
      b.sample_streams.push_back(r.id);
      b.sample_index.push_back(int64_t(r.output.size()));
    }
    b.request_ids.push_back(q.request_id);
  }
  return b;
}

}  // namespace latprof::engine
