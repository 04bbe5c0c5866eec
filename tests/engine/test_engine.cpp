// The engine loop on a simulated clock and a fake executor: arrivals are honoured, every request
// is a consistent timeline, steps are recorded, and the flattened step batch addresses the right
// KV rows.
#include <gtest/gtest.h>

#include <set>

#include "core/error.hpp"
#include "engine/engine.hpp"

namespace latprof::engine {
namespace {

// A step costs 1 ms + 0.1 ms per token on a clock that only moves when something runs.
struct SimClock {
  double t = 0;
  Clock clock() {
    return {[this] { return t; }, [this](double ms) { t = std::max(t, ms); }};
  }
};

class FakeExecutor : public Executor {
 public:
  explicit FakeExecutor(SimClock& c) : c_(c) {}
  std::vector<int32_t> execute(const StepBatch& b) override {
    check(b);
    c_.t += 1.0 + 0.1 * double(b.num_tokens());
    std::vector<int32_t> out;
    for (int32_t row : b.logits_rows)
      out.push_back((b.tokens[size_t(row)] * 31 + b.positions[size_t(row)] * 7 + 3) % 1000);
    batches.push_back(b);
    return out;
  }
  std::vector<StepBatch> batches;

 private:
  // Every token's slot is the one its block table gives for its position.
  static void check(const StepBatch& b) {
    ASSERT_EQ(b.query_start.size(), size_t(b.num_seqs() + 1));
    ASSERT_EQ(b.query_start.back(), b.num_tokens());
    std::set<int32_t> slots;
    for (int64_t s = 0; s < b.num_seqs(); ++s) {
      for (int32_t i = b.query_start[size_t(s)]; i < b.query_start[size_t(s) + 1]; ++i) {
        EXPECT_EQ(b.seq_of_token[size_t(i)], s);
        const int32_t pos = b.positions[size_t(i)];
        EXPECT_LT(pos, b.context_lens[size_t(s)]);
        const int32_t block = b.block_tables[size_t(s * b.max_blocks + pos / b.block_size)];
        ASSERT_GE(block, 0);
        EXPECT_EQ(b.slots[size_t(i)], block * b.block_size + pos % b.block_size);
        EXPECT_TRUE(slots.insert(b.slots[size_t(i)]).second) << "two tokens write one KV row";
      }
      // The last token of each sequence is its context's last position.
      EXPECT_EQ(b.positions[size_t(b.query_start[size_t(s) + 1] - 1)] + 1,
                b.context_lens[size_t(s)]);
    }
  }
  SimClock& c_;
};

std::vector<int32_t> prompt(int64_t n, int32_t seed) {
  std::vector<int32_t> p;
  for (int64_t i = 0; i < n; ++i) p.push_back(int32_t((seed * 131 + i * 17) % 1000));
  return p;
}

TEST(Engine, ArrivalsStepsAndTimelinesAreConsistent) {
  SimClock sc;
  FakeExecutor ex(sc);
  BlockPool pool(64, 16);
  Engine e({48, 8, 1024}, pool, ex, sc.clock());
  std::vector<std::string> seen;
  e.on_token = [&](int64_t id, int32_t tok) {
    seen.push_back(std::to_string(id) + ":" + std::to_string(tok));
  };
  // Three at once, one later while they run, one long after everything has finished.
  for (int i = 0; i < 3; ++i) e.submit(i, prompt(30 + 10 * i, i), 6, 0.0);
  e.submit(3, prompt(20, 3), 4, 5.0);
  e.submit(4, prompt(10, 4), 3, 500.0);
  e.run();
  EXPECT_EQ(pool.num_free(), pool.num_blocks());
  int64_t tokens_out = 0;
  for (const auto& [id, t] : e.timelines()) {
    EXPECT_GE(t.queued_ms, t.arrival_ms) << id;
    EXPECT_GE(t.first_scheduled_ms, t.queued_ms) << id;
    ASSERT_EQ(int64_t(t.token_ms.size()), t.output_tokens) << id;
    EXPECT_GT(t.token_ms.front(), t.first_scheduled_ms);
    EXPECT_TRUE(std::is_sorted(t.token_ms.begin(), t.token_ms.end()));
    EXPECT_GE(t.finished_ms, t.token_ms.back());
    tokens_out += t.output_tokens;
  }
  EXPECT_EQ(int64_t(seen.size()), tokens_out);
  // The late request found the engine idle: it was queued exactly at its arrival.
  EXPECT_DOUBLE_EQ(e.timelines().at(4).queued_ms, 500.0);
  int64_t prefill = 0, decode = 0;
  for (const StepRecord& s : e.steps()) {
    EXPECT_LE(s.prefill_tokens + s.decode_tokens, 48);
    EXPECT_EQ(s.seqs, int64_t(s.request_ids.size()));
    EXPECT_GE(s.end_ms, s.start_ms + s.execute_ms);
    EXPECT_GE(s.kv_usage, 0.0);
    EXPECT_LE(s.kv_usage, 1.0);
    prefill += s.prefill_tokens;
    decode += s.decode_tokens;
  }
  // Every prompt token is prefilled once (no preemption here) and each later token decoded once.
  EXPECT_EQ(prefill, 30 + 40 + 50 + 20 + 10);
  EXPECT_EQ(decode, tokens_out - 5);
  EXPECT_EQ(e.steps().size(), ex.batches.size());
}

TEST(Engine, SameTokensWhetherAloneOrBatchedOrPreempted) {
  auto run = [](int64_t blocks, int n, int64_t budget) {
    SimClock sc;
    FakeExecutor ex(sc);
    BlockPool pool(blocks, 4);
    Engine e({budget, 16, 256}, pool, ex, sc.clock());
    std::map<int64_t, std::vector<int32_t>> out;
    e.on_token = [&](int64_t id, int32_t tok) { out[id].push_back(tok); };
    for (int i = 0; i < n; ++i) e.submit(i, prompt(9 + i, i), 5, 0.0);
    e.run();
    int64_t preempted = 0;
    for (const auto& s : e.steps()) preempted += s.preempted;
    return std::make_pair(out, preempted);
  };
  const auto roomy = run(256, 4, 1024);
  EXPECT_EQ(roomy.second, 0);
  const auto tight = run(10, 4, 8);  // chunked prefill and preemptions
  EXPECT_GT(tight.second, 0);
  EXPECT_EQ(roomy.first, tight.first);
  for (int i = 0; i < 4; ++i) {
    const auto alone = run(256, i + 1, 1024).first.at(i);
    EXPECT_EQ(alone, roomy.first.at(i)) << i;
  }
}

TEST(Engine, RefusesARequestThatCanNeverRunBeforeRunning) {
  SimClock sc;
  FakeExecutor ex(sc);
  BlockPool pool(2, 16);
  Engine e({64, 4, 1000}, pool, ex, sc.clock());
  EXPECT_THROW(e.submit(1, prompt(40, 1), 8, 0.0), UsageError);  // 47 positions > 32
  e.submit(2, prompt(20, 2), 8, 0.0);
  e.run();
  EXPECT_EQ(e.timelines().at(2).token_ms.size(), 8u);
}

}  // namespace
}  // namespace latprof::engine
