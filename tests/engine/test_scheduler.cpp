// The continuous-batching scheduler and KV block pool on a fake model: budgets, first come
// first served, chunked prefill, preemption by recompute, no leaks, no starvation, refusals.
#include <gtest/gtest.h>

#include <map>
#include <numeric>
#include <set>

#include "core/error.hpp"
#include "engine/block_pool.hpp"
#include "engine/scheduler.hpp"

namespace latprof::engine {
namespace {

// The fake model's next token: a hash of every token of the sequence so far, so a request that
// is preempted and recomputed must produce the same tokens as one that never was.
int32_t fake_next(const Request& r) {
  uint64_t h = 1469598103934665603ull;
  for (int64_t p = 0; p < r.num_tokens(); ++p) h = (h ^ uint64_t(r.token_at(p))) * 1099511628211ull;
  return int32_t(h % 32000);
}

std::vector<int32_t> prompt(int64_t n, int32_t seed) {
  std::vector<int32_t> p(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) p[size_t(i)] = int32_t((seed * 7919 + i * 31) % 32000);
  return p;
}

struct Trace {
  std::vector<StepPlan> steps;
  std::vector<int64_t> finish_order;
};

// Runs the scheduler to completion, checking the invariants of every step.
Trace drive(Scheduler& s, int max_steps = 100000) {
  Trace t;
  for (int i = 0; i < max_steps && s.has_work(); ++i) {
    StepPlan p = s.schedule();
    EXPECT_LE(p.total_tokens(), s.config().max_batched_tokens);
    EXPECT_LE(int64_t(p.seqs.size()), s.config().max_seqs);
    std::set<int64_t> ids;
    std::vector<int32_t> sampled;
    for (const auto& q : p.seqs) {
      EXPECT_TRUE(ids.insert(q.request_id).second) << "request twice in one step";
      const Request& r = s.request(q.request_id);
      EXPECT_EQ(q.start, r.num_computed);
      EXPECT_LE(q.start + q.num_tokens, r.num_tokens());
      // Its blocks cover every position this step writes.
      EXPECT_GE(int64_t(r.blocks.size()) * s.pool().block_size(), q.start + q.num_tokens);
      if (q.sample) sampled.push_back(fake_next(r));
    }
    if (p.empty() && !p.preempted.empty()) {
      t.steps.push_back(p);
      continue;
    }
    EXPECT_FALSE(p.empty()) << "no progress with work left";
    const auto done = s.complete(p, sampled);
    t.finish_order.insert(t.finish_order.end(), done.begin(), done.end());
    t.steps.push_back(std::move(p));
  }
  EXPECT_FALSE(s.has_work()) << "did not finish";
  return t;
}

// What each request generates when it runs alone with plenty of room.
std::vector<int32_t> alone(const std::vector<int32_t>& p, int64_t max_tokens) {
  BlockPool pool(1024, 16);
  Scheduler s({4096, 8, 100000}, pool);
  s.add(0, p, max_tokens);
  drive(s);
  return s.request(0).output;
}

TEST(BlockPool, AllocatesFreesAndRefusesWhatItCannotHold) {
  BlockPool pool(4, 16);
  EXPECT_EQ(pool.blocks_for(0), 0);
  EXPECT_EQ(pool.blocks_for(16), 1);
  EXPECT_EQ(pool.blocks_for(17), 2);
  std::vector<int32_t> a, b;
  ASSERT_TRUE(pool.allocate(3, a));
  EXPECT_EQ(a, (std::vector<int32_t>{0, 1, 2}));
  EXPECT_DOUBLE_EQ(pool.usage(), 0.75);
  EXPECT_FALSE(pool.allocate(2, b));  // all or nothing
  EXPECT_TRUE(b.empty());
  EXPECT_EQ(pool.num_free(), 1);
  pool.release(a);
  EXPECT_TRUE(a.empty());
  EXPECT_EQ(pool.num_free(), 4);
  std::vector<int32_t> fake{3};
  EXPECT_THROW(pool.release(fake), std::logic_error);  // never allocated: a double free
  EXPECT_THROW(BlockPool(4, 0), UsageError);
  EXPECT_THROW(BlockPool(4, 12), UsageError);
  EXPECT_THROW(BlockPool(0, 16), UsageError);
}

TEST(Scheduler, ChunkedPrefillSamplesOnlyAfterTheLastChunk) {
  BlockPool pool(64, 16);
  Scheduler s({32, 4, 4096}, pool);
  s.add(7, prompt(100, 1), 3);
  const Trace t = drive(s);
  ASSERT_EQ(t.steps.size(), 4u + 2u);  // chunks 32, 32, 32, 4, then two decodes
  const int64_t chunks[] = {32, 32, 32, 4};
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(t.steps[size_t(i)].prefill_tokens, chunks[i]);
    EXPECT_EQ(t.steps[size_t(i)].seqs[0].sample, i == 3);
  }
  EXPECT_EQ(t.steps[4].decode_tokens, 1);
  EXPECT_EQ(s.request(7).output, alone(prompt(100, 1), 3));
  EXPECT_EQ(pool.num_free(), pool.num_blocks());
}

TEST(Scheduler, DecodesFirstThenPrefillChunksIntoTheBudgetLeft) {
  BlockPool pool(256, 16);
  Scheduler s({64, 16, 4096}, pool);
  for (int i = 0; i < 16; ++i) s.add(i, prompt(40, i), 20);
  const Trace t = drive(s);
  bool mixed = false;
  for (const auto& p : t.steps) {
    mixed |= p.prefill_tokens > 0 && p.decode_tokens > 0;
    // Within a step every decode comes before every prefill chunk of a new request.
    bool seen_prefill = false;
    for (const auto& q : p.seqs) {
      if (q.prefill)
        seen_prefill = true;
      else
        EXPECT_FALSE(seen_prefill) << "a decode after a prefill chunk";
    }
  }
  EXPECT_TRUE(mixed);
  for (int i = 0; i < 16; ++i) EXPECT_EQ(s.request(i).output, alone(prompt(40, i), 20)) << i;
  EXPECT_EQ(pool.num_free(), pool.num_blocks());
}

TEST(Scheduler, FirstComeFirstServedAndTheSequenceCap) {
  BlockPool pool(256, 16);
  Scheduler s({4096, 3, 4096}, pool);
  for (int i = 0; i < 9; ++i) s.add(i, prompt(10, i), 5);
  std::vector<int64_t> admitted;
  std::set<int64_t> seen;
  const Trace t = drive(s);
  for (const auto& p : t.steps) {
    EXPECT_LE(p.seqs.size(), 3u);
    for (const auto& q : p.seqs)
      if (seen.insert(q.request_id).second) admitted.push_back(q.request_id);
  }
  std::vector<int64_t> order(9);
  std::iota(order.begin(), order.end(), 0);
  EXPECT_EQ(admitted, order);
  EXPECT_EQ(t.finish_order, order);
}

TEST(Scheduler, PreemptsTheMostRecentlyStartedAndRecomputesIt) {
  // 8 blocks of 4 tokens; each request needs up to 3 blocks (8 prompt + 4 output - 1 = 11
  // positions), so four of them cannot all grow: someone must be preempted.
  BlockPool pool(8, 4);
  Scheduler s({64, 8, 64}, pool);
  for (int i = 0; i < 4; ++i) s.add(i, prompt(8, 100 + i), 4);
  const Trace t = drive(s);
  ASSERT_GT(s.preemptions(), 0);
  // The first preemption hits the request that started last.
  for (const auto& p : t.steps)
    if (!p.preempted.empty()) {
      EXPECT_EQ(p.preempted.front(), 3);
      break;
    }
  int64_t per_request = 0;
  for (int i = 0; i < 4; ++i) {
    per_request += s.request(i).preemptions;
    // Recompute gives the same tokens as a run that was never preempted.
    EXPECT_EQ(s.request(i).output, alone(prompt(8, 100 + i), 4)) << i;
  }
  EXPECT_EQ(per_request, s.preemptions());
  EXPECT_EQ(pool.num_free(), pool.num_blocks()) << "blocks leaked";
}

TEST(Scheduler, NoStarvationUnderConstantPressure) {
  // A pool that holds about two requests at a time, twenty requests queued at once.
  BlockPool pool(12, 8);
  Scheduler s({32, 16, 256}, pool);
  for (int i = 0; i < 20; ++i) s.add(i, prompt(20 + i % 5, i), 15 + i % 7);
  const Trace t = drive(s, 20000);
  EXPECT_EQ(t.finish_order.size(), 20u);
  for (int i = 0; i < 20; ++i) EXPECT_EQ(int64_t(s.request(i).output.size()), 15 + i % 7) << i;
  EXPECT_EQ(pool.num_free(), pool.num_blocks());
}

TEST(Scheduler, RefusesWhatCouldNeverRun) {
  BlockPool pool(4, 16);  // 64 positions in all
  EXPECT_THROW(Scheduler({0, 4, 100}, pool), UsageError);
  EXPECT_THROW(Scheduler({16, 0, 100}, pool), UsageError);
  Scheduler s({16, 4, 100}, pool);
  EXPECT_THROW(s.add(1, {}, 4), UsageError);
  EXPECT_THROW(s.add(2, prompt(10, 0), 0), UsageError);
  EXPECT_THROW(s.add(3, prompt(90, 0), 20), UsageError);  // over max_model_len
  EXPECT_THROW(s.add(4, prompt(60, 0), 10), UsageError);  // 69 positions > 64 in the pool
  EXPECT_THROW(s.add(5, prompt(10, 0), INT64_MAX), UsageError);
  try {
    s.add(6, prompt(60, 0), 10);
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("--kv-cache-memory"), std::string::npos) << e.what();
  }
  s.add(7, prompt(60, 0), 5);  // 64 positions: exactly fits
  drive(s);
  EXPECT_EQ(s.request(7).output.size(), 5u);
  EXPECT_FALSE(s.has_work());
}

}  // namespace
}  // namespace latprof::engine
