#pragma once
// The continuous-batching engine loop: requests arrive at their times, the scheduler plans each
// step, an Executor (a model on a backend, or a fake in tests) runs it, and every request is a
// timeline of named stamps on one clock (arrived, scheduled, each token, finished) while every
// step is recorded (tokens, sequences, KV use, time). Latency figures are differences of these
// stamps, computed in one place (the report), never inside the loop.
#include <cstdint>
#include <functional>
#include <map>
#include <vector>

#include "engine/block_pool.hpp"
#include "engine/scheduler.hpp"
#include "engine/step.hpp"

namespace latprof::engine {

// Runs one step: returns the sampled token of each of batch.logits_rows, in order. The tokens
// are in host memory when it returns.
class Executor {
 public:
  virtual ~Executor() = default;
  virtual std::vector<int32_t> execute(const StepBatch& batch) = 0;
};

// The engine's clock: now() in ms, and a way to wait for a time (real sleep, or a simulated
// clock that jumps in tests).
struct Clock {
  std::function<double()> now_ms;
  std::function<void(double)> wait_until_ms;
  static Clock steady();  // steady_clock from construction, sleeping for real
};

struct RequestTimeline {
  int64_t id = 0;
  int64_t input_tokens = 0;
  int64_t output_tokens = 0;       // asked for
  double arrival_ms = 0;           // when it was due to arrive (load generator's time)
  double queued_ms = -1;           // entered the scheduler's queue
  double first_scheduled_ms = -1;  // start of the first step it was in
  std::vector<double> token_ms;    // each output token in host memory (after on_token)
  double finished_ms = -1;
  int64_t preemptions = 0;
  int64_t prefix_hit_tokens = 0;     // prompt tokens found in the prefix cache, not computed
  int64_t recompute_hit_tokens = 0;  // tokens found cached when rescheduled after preemptions
  std::vector<int64_t> steps;        // indices of the steps it took part in
};

struct StepRecord {
  int64_t index = 0;
  double start_ms = 0;     // before scheduling
  double schedule_ms = 0;  // scheduler + step building (host bookkeeping)
  double execute_ms = 0;   // the executor
  double end_ms = 0;       // after the tokens were handed out
  int64_t prefill_tokens = 0, decode_tokens = 0, seqs = 0;
  int64_t kv_blocks_used = 0;  // after the step
  double kv_usage = 0;         // fraction of the pool, after the step
  int64_t preempted = 0;
  int64_t waiting = 0, running = 0;  // after the step
  std::vector<int64_t> request_ids;
};

class Engine {
 public:
  Engine(const SchedulerConfig& cfg, BlockPool& pool, Executor& exec, Clock clock);

  // Queues a request due at arrival_ms (engine clock); throws UsageError when it can never run.
  void submit(int64_t id, std::vector<int32_t> prompt, int64_t max_tokens, double arrival_ms);
  // Called with each new token of a request (e.g. to detokenize it) before its time is stamped.
  std::function<void(int64_t id, int32_t token)> on_token;

  // Runs steps until every submitted request has finished, waiting for arrivals when idle.
  void run();

  const std::vector<StepRecord>& steps() const { return steps_; }
  const std::map<int64_t, RequestTimeline>& timelines() const { return timelines_; }
  const Scheduler& scheduler() const { return sched_; }
  const BlockPool& pool() const { return pool_; }

 private:
  struct Pending {
    int64_t id;
    std::vector<int32_t> prompt;
    int64_t max_tokens;
    double arrival_ms;
  };
  BlockPool& pool_;
  Scheduler sched_;
  Executor& exec_;
  Clock clock_;
  std::vector<Pending> pending_;  // not yet arrived, by arrival time
  std::map<int64_t, RequestTimeline> timelines_;
  std::vector<StepRecord> steps_;
};

}  // namespace latprof::engine
