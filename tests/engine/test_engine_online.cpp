// The engine's online mode (what `latprof serve` runs on): requests enqueued from other threads
// while the loop runs, the same tokens as the batch loop gives them, early stops and
// cancellations that free their KV blocks at once, and a shutdown that ends every request.
#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <map>
#include <mutex>
#include <thread>

#include "core/error.hpp"
#include "engine/engine.hpp"

namespace latprof::engine {
namespace {

// A deterministic model: the next token is a function of the last token and its position; each
// step takes step_us of real time.
class FakeExecutor : public Executor {
 public:
  explicit FakeExecutor(int step_us = 0) : step_us_(step_us) {}
  std::vector<int32_t> execute(const StepBatch& b) override {
    if (step_us_ > 0) std::this_thread::sleep_for(std::chrono::microseconds(step_us_));
    std::vector<int32_t> out;
    for (int32_t row : b.logits_rows)
      out.push_back((b.tokens[size_t(row)] * 31 + b.positions[size_t(row)] * 7 + 3) % 1000);
    return out;
  }

 private:
  int step_us_;
};

std::vector<int32_t> prompt(int64_t n, int32_t seed) {
  std::vector<int32_t> p;
  for (int64_t i = 0; i < n; ++i) p.push_back(int32_t((seed * 17 + i * 5) % 997));
  return p;
}

// What the hooks saw, guarded for the test thread.
struct Seen {
  std::mutex mu;
  std::map<int64_t, std::vector<int32_t>> tokens;
  std::map<int64_t, int> finishes;
  std::map<int64_t, bool> cancelled;
  std::map<int64_t, RequestTimeline> timelines;
  std::map<int64_t, int64_t> stop_after;  // id -> stop after this many tokens
  std::promise<void> all_done;
  size_t expected = 0;

  Engine::OnlineHooks hooks() {
    Engine::OnlineHooks h;
    h.token = [this](int64_t id, int32_t tok, double) {
      std::lock_guard<std::mutex> lk(mu);
      tokens[id].push_back(tok);
      const auto it = stop_after.find(id);
      return it == stop_after.end() || int64_t(tokens[id].size()) < it->second;
    };
    h.finish = [this](const RequestTimeline& t, bool c) {
      std::lock_guard<std::mutex> lk(mu);
      ++finishes[t.id];
      cancelled[t.id] = c;
      timelines[t.id] = t;
      if (finishes.size() == expected) all_done.set_value();
    };
    return h;
  }
};

SchedulerConfig config() {
  SchedulerConfig c;
  c.max_batched_tokens = 64;
  c.max_seqs = 8;
  c.max_model_len = 512;
  return c;
}

TEST(EngineOnline, SameTokensAsTheBatchLoop) {
  const std::vector<std::pair<int64_t, int64_t>> reqs = {{40, 12}, {7, 20}, {90, 5}, {3, 30}};
  // The batch loop (run) on the same requests.
  std::map<int64_t, std::vector<int32_t>> expected;
  {
    BlockPool pool(64, 16);
    FakeExecutor ex;
    Engine eng(config(), pool, ex, Clock::steady());
    for (size_t i = 0; i < reqs.size(); ++i)
      eng.submit(int64_t(i), prompt(reqs[i].first, int32_t(i)), reqs[i].second, 0);
    eng.on_token = [&](int64_t id, int32_t tok) { expected[id].push_back(tok); };
    eng.run();
  }
  BlockPool pool(64, 16);
  FakeExecutor ex(200);
  Engine eng(config(), pool, ex, Clock::steady());
  Seen seen;
  seen.expected = reqs.size();
  auto done = seen.all_done.get_future();
  eng.start(seen.hooks());
  // Enqueued from several threads, at different moments.
  std::vector<std::thread> threads;
  for (size_t i = 0; i < reqs.size(); ++i)
    threads.emplace_back([&, i] {
      std::this_thread::sleep_for(std::chrono::milliseconds(2 * i));
      eng.enqueue(int64_t(i), prompt(reqs[i].first, int32_t(i)), reqs[i].second);
    });
  for (auto& t : threads) t.join();
  ASSERT_EQ(done.wait_for(std::chrono::seconds(20)), std::future_status::ready);
  eng.shutdown();
  for (size_t i = 0; i < reqs.size(); ++i) {
    const int64_t id = int64_t(i);
    EXPECT_EQ(seen.tokens[id], expected[id]) << "request " << id;
    EXPECT_EQ(seen.finishes[id], 1);
    EXPECT_FALSE(seen.cancelled[id]);
    const RequestTimeline& t = seen.timelines[id];
    ASSERT_EQ(int64_t(t.token_ms.size()), reqs[i].second);
    EXPECT_LE(t.queued_ms, t.first_scheduled_ms);
    EXPECT_LE(t.first_scheduled_ms, t.token_ms.front());
    EXPECT_LE(t.token_ms.back(), t.finished_ms);
  }
  EXPECT_EQ(pool.num_used(), 0);
  EXPECT_EQ(eng.online_running(), 0);
  EXPECT_EQ(eng.online_waiting(), 0);
}

TEST(EngineOnline, EarlyStopFreesBlocksAtOnce) {
  BlockPool pool(32, 4);
  FakeExecutor ex(100);
  Engine eng(config(), pool, ex, Clock::steady());
  Seen seen;
  seen.expected = 2;
  seen.stop_after[0] = 3;  // as at EOS after three tokens
  auto done = seen.all_done.get_future();
  eng.start(seen.hooks());
  eng.enqueue(0, prompt(10, 1), 50);
  eng.enqueue(1, prompt(10, 2), 6);
  ASSERT_EQ(done.wait_for(std::chrono::seconds(20)), std::future_status::ready);
  eng.shutdown();
  EXPECT_EQ(seen.tokens[0].size(), 3u);
  EXPECT_EQ(seen.tokens[1].size(), 6u);
  EXPECT_FALSE(seen.cancelled[0]);
  EXPECT_EQ(pool.num_used(), 0);
}

TEST(EngineOnline, CancelFreesBlocksAndSparesTheOthers) {
  BlockPool pool(256, 4);
  FakeExecutor ex(1000);
  Engine eng(config(), pool, ex, Clock::steady());
  Seen seen;
  seen.expected = 2;
  auto done = seen.all_done.get_future();
  eng.start(seen.hooks());
  eng.enqueue(0, prompt(20, 1), 400);
  eng.enqueue(1, prompt(20, 2), 30);
  // Wait until request 0 is decoding, then cancel it.
  for (int i = 0; i < 2000; ++i) {
    {
      std::lock_guard<std::mutex> lk(seen.mu);
      if (seen.tokens[0].size() >= 5) break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_GT(pool.num_used(), 0);
  eng.cancel(0);
  eng.cancel(12345);  // unknown: ignored
  ASSERT_EQ(done.wait_for(std::chrono::seconds(20)), std::future_status::ready);
  eng.shutdown();
  EXPECT_TRUE(seen.cancelled[0]);
  EXPECT_LT(seen.tokens[0].size(), 400u);
  EXPECT_FALSE(seen.cancelled[1]);
  EXPECT_EQ(seen.tokens[1].size(), 30u);
  EXPECT_EQ(seen.finishes[0], 1);
  EXPECT_EQ(pool.num_used(), 0);
}

TEST(EngineOnline, ShutdownCancelsEveryRequestLeft) {
  BlockPool pool(256, 4);
  FakeExecutor ex(2000);
  SchedulerConfig c = config();
  c.max_seqs = 1;  // one runs, the others wait
  Engine eng(c, pool, ex, Clock::steady());
  Seen seen;
  seen.expected = 3;
  eng.start(seen.hooks());
  for (int64_t id = 0; id < 3; ++id) eng.enqueue(id, prompt(8, int32_t(id)), 300);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  eng.shutdown();
  eng.shutdown();  // idempotent
  for (int64_t id = 0; id < 3; ++id) {
    EXPECT_EQ(seen.finishes[id], 1) << id;
    EXPECT_TRUE(seen.cancelled[id]) << id;
  }
  EXPECT_EQ(pool.num_used(), 0);
}

TEST(EngineOnline, RefusesWhatCouldNeverRunWithoutQueueing) {
  BlockPool pool(4, 4);  // 16 positions
  FakeExecutor ex;
  Engine eng(config(), pool, ex, Clock::steady());
  eng.start({});
  EXPECT_THROW(eng.enqueue(0, prompt(10, 1), 10), UsageError);
  EXPECT_THROW(eng.enqueue(1, {}, 10), UsageError);
  EXPECT_THROW(eng.enqueue(2, prompt(3, 1), 0), UsageError);
  eng.shutdown();
  EXPECT_EQ(pool.num_used(), 0);
}

}  // namespace
}  // namespace latprof::engine

namespace latprof::engine {
namespace {

// An executor that fails on its third step, as a backend error would. Its first step waits for
// `gate`, so that the test has enqueued every request before any step runs (under load the
// engine thread could otherwise fail before the second enqueue, which then throws).
class FailingExecutor : public Executor {
 public:
  std::shared_future<void> gate;
  std::vector<int32_t> execute(const StepBatch& b) override {
    if (steps_ == 0 && gate.valid()) gate.wait();
    if (++steps_ == 3) throw std::runtime_error("device lost");
    return std::vector<int32_t>(b.logits_rows.size(), 7);
  }

 private:
  int steps_ = 0;
};

TEST(EngineOnline, AFailedStepCancelsEveryRequestAndRefusesNewOnes) {
  BlockPool pool(64, 4);
  FailingExecutor ex;
  std::promise<void> go;
  ex.gate = go.get_future().share();
  Engine eng(config(), pool, ex, Clock::steady());
  Seen seen;
  seen.expected = 2;
  auto done = seen.all_done.get_future();
  eng.start(seen.hooks());
  eng.enqueue(0, prompt(8, 1), 20);
  eng.enqueue(1, prompt(8, 2), 20);
  go.set_value();
  ASSERT_EQ(done.wait_for(std::chrono::seconds(20)), std::future_status::ready);
  EXPECT_TRUE(seen.cancelled[0]);
  EXPECT_TRUE(seen.cancelled[1]);
  EXPECT_EQ(eng.failure(), "device lost");
  EXPECT_THROW(eng.enqueue(2, prompt(8, 3), 4), std::runtime_error);
  eng.shutdown();
}

TEST(EngineOnline, EnqueueAfterShutdownThrows) {
  BlockPool pool(64, 4);
  FakeExecutor ex;
  Engine eng(config(), pool, ex, Clock::steady());
  eng.start({});
  eng.shutdown();
  EXPECT_THROW(eng.enqueue(0, prompt(8, 1), 4), std::runtime_error);
  EXPECT_EQ(eng.failure(), "");
}

}  // namespace
}  // namespace latprof::engine
