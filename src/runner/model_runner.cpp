#include "runner/model_runner.hpp"

#include <algorithm>

#include "core/error.hpp"
#include "runner/forward.hpp"

namespace latprof {

ModelRunner::ModelRunner(LoadedModel& m, Profiler& prof, const SamplingParams& sampling)
    : m_(m), prof_(prof), sampling_(sampling) {}

std::vector<int32_t> ModelRunner::execute(const engine::StepBatch& b) {
  Backend& be = m_.backend();
  const EngineShape& e = m_.shape();
  const int64_t T = b.num_tokens(), S = b.num_seqs(), L = int64_t(b.logits_rows.size());
  LATPROF_ASSERT(T <= e.max_step_tokens && S <= e.max_seqs && b.max_blocks <= e.max_blocks() &&
                     b.block_size == e.block_size,
                 "a step larger than the model was set up for");
  // The step buffer's layout: fixed offsets from the capacities, so its addresses never change.
  const int64_t cT = e.max_step_tokens, cS = e.max_seqs, mb = e.max_blocks();
  const int64_t o_pos = cT, o_slots = 2 * cT, o_seq = 3 * cT, o_qs = 4 * cT, o_ctx = o_qs + cS + 1,
                o_logits = o_ctx + cS, o_tables = o_logits + cS;
  const int64_t used = o_tables + S * mb;
  staging_.resize(size_t(m_.step_buf_ints));
  int32_t* h = staging_.data();
  std::copy(b.tokens.begin(), b.tokens.end(), h);
  std::copy(b.positions.begin(), b.positions.end(), h + o_pos);
  std::copy(b.slots.begin(), b.slots.end(), h + o_slots);
  std::copy(b.seq_of_token.begin(), b.seq_of_token.end(), h + o_seq);
  std::copy(b.query_start.begin(), b.query_start.end(), h + o_qs);
  std::copy(b.context_lens.begin(), b.context_lens.end(), h + o_ctx);
  std::copy(b.logits_rows.begin(), b.logits_rows.end(), h + o_logits);
  std::fill(h + o_tables, h + used, -1);
  for (int64_t s = 0; s < S; ++s)
    std::copy_n(b.block_tables.begin() + std::ptrdiff_t(s * b.max_blocks), b.max_blocks,
                h + o_tables + s * mb);

  // Every sequence decodes one token: a shape that repeats, so it may be captured and replayed.
  const bool decode_only = T == S;
  StepDesc st;
  st.n_tokens = T;
  st.n_seqs = S;
  st.n_logits = L;
  st.block_size = e.block_size;
  st.max_blocks = mb;
  int64_t max_q = 0, max_ctx = 0;
  for (int64_t s = 0; s < S; ++s) {
    max_q = std::max<int64_t>(max_q, b.query_start[size_t(s) + 1] - b.query_start[size_t(s)]);
    max_ctx = std::max<int64_t>(max_ctx, b.context_lens[size_t(s)]);
  }
  st.max_query_len = decode_only ? 1 : max_q;
  st.max_context_len = decode_only ? mb * e.block_size : max_ctx;
  int32_t* d = m_.step_buf;
  st.tokens = d;
  st.positions = d + o_pos;
  st.slots = d + o_slots;
  st.seq_of_token = d + o_seq;
  st.query_start = d + o_qs;
  st.context_lens = d + o_ctx;
  st.logits_rows = d + o_logits;
  st.block_tables = d + o_tables;

  if (before_step) before_step(b);
  be.copy_to_device(d, h, size_t(used) * sizeof(int32_t));
  const bool graph = decode_only && be.graph_enabled();
  const bool saved = prof_.op_events();
  if (graph) prof_.set_op_events(false);  // events inside a replayed graph are not meaningful
  StepTimes times;
  be.take_sync_time();  // what came before the step is not the step's
  times.ev_forward0 = be.record_event();
  be.run_step(graph ? S : -1, [&] { forward(m_, prof_, st, on_layer); });
  times.ev_forward1 = be.record_event();
  prof_.set_op_events(saved);
  std::vector<SampleKey> keys(static_cast<size_t>(L));
  for (int64_t i = 0; i < L; ++i)
    keys[size_t(i)] = {b.sample_streams[size_t(i)], b.sample_index[size_t(i)]};
  prof_.set_context(Stage::sample, prof_.step());
  {
    auto s = prof_.op(Op::sample);
    be.sample(m_.logits, L, m_.config().vocab_size, sampling_, keys.data(), m_.sampled);
  }
  times.ev_sample1 = be.record_event();
  std::vector<int32_t> out(static_cast<size_t>(L));
  be.copy_to_host(out.data(), m_.sampled, size_t(L) * sizeof(int32_t));
  be.synchronize();
  times.forward_ms = be.elapsed_ms(times.ev_forward0, times.ev_forward1);
  times.sample_ms = be.elapsed_ms(times.ev_forward1, times.ev_sample1);
  times.replayed = graph;
  times.sync = be.take_sync_time();
  history_.push_back(times);
  return out;
}

}  // namespace latprof
