#pragma once
// The continuous-batching engine loop: requests arrive at their times, the scheduler plans each
// step, an Executor (a model on a backend, or a fake in tests) runs it, and every request is a
// timeline of named stamps on one clock (arrived, scheduled, each token, finished) while every
// step is recorded (tokens, sequences, KV use, time). Latency figures are differences of these
// stamps, computed in one place (the report), never inside the loop.
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>
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

  // ---- online mode (a server): requests come and go while the loop runs on its own thread.
  // Every hook runs on the engine thread, between steps; they must not call back into the
  // engine except through the thread-safe calls below. ----
  struct OnlineHooks {
    // Each new token of a request, once in host memory at t_ms (engine clock; stamped in its
    // timeline before the call). Return false to finish the request now (EOS, a stop string):
    // it is dropped from the scheduler and its blocks are freed at once.
    std::function<bool(int64_t id, int32_t token, double t_ms)> token;
    // Once per enqueued request, when it has finished (max_tokens reached, or token() returned
    // false; cancelled = false) or was cancelled (cancel(), shutdown(); cancelled = true). Its
    // timeline is complete; the engine forgets it afterwards.
    std::function<void(const RequestTimeline&, bool cancelled)> finish;
    // After each step (in online mode steps are handed out, not kept), before the finish() of
    // the requests that ended in it; the published counts (online_running() and the rest)
    // already leave out every request whose finish() is called.
    std::function<void(const StepRecord&)> step;
  };
  // Starts the loop thread. Not with run() or submit().
  void start(OnlineHooks hooks);
  // Thread-safe: queues a request now. Throws UsageError (nothing queued) when it could never
  // run, std::runtime_error once the engine has failed or shut down; ids must be unique over
  // the engine's life.
  void enqueue(int64_t id, std::vector<int32_t> prompt, int64_t max_tokens);
  // Thread-safe: cancels a request between steps (its blocks freed, finish(cancelled) called).
  // An unknown or finished id is ignored.
  void cancel(int64_t id);
  // Thread-safe: stops the loop after the current step, cancels every request left (finish is
  // called for each) and joins the thread. Idempotent; the destructor calls it.
  void shutdown();
  ~Engine();

  // Thread-safe snapshots, updated by the loop after each step: requests waiting (queued, not
  // running) and running, and the KV pool's use (0..1) and free blocks.
  int64_t online_waiting() const { return n_waiting_.load(); }
  int64_t online_running() const { return n_running_.load(); }
  double online_kv_usage() const { return kv_usage_.load(); }
  int64_t online_steps() const { return n_steps_.load(); }
  int64_t online_free_blocks() const { return free_blocks_.load(); }
  // Thread-safe: why the loop stopped on an exception from a step ("" while it has not); every
  // request it held was cancelled.
  std::string failure() const;

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
  // One step from `now` (engine clock): schedules, executes, hands each token to deliver() and
  // stamps finished requests; returns the step's record and the ids finished by length.
  StepRecord step(double now, const std::function<void(int64_t, int32_t)>& deliver,
                  std::vector<int64_t>& done);
  void online_loop();
  void online_steps();
  void publish_counts();
  void fill_counts(StepRecord& rec) const;  // KV use, waiting and running after the step
  // A finished request's counts from the scheduler: preemptions and prefix-cache hits.
  static void take_counts(RequestTimeline& t, const Request& r);
  int64_t step_count_ = 0;

  BlockPool& pool_;
  Scheduler sched_;
  Executor& exec_;
  Clock clock_;
  std::vector<Pending> pending_;  // not yet arrived, by arrival time
  std::map<int64_t, RequestTimeline> timelines_;
  std::vector<StepRecord> steps_;

  // Online mode: the loop thread and its inbox (guarded by mu_).
  OnlineHooks hooks_;
  std::thread thread_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::string failure_;
  std::vector<Pending> inbox_;
  std::vector<int64_t> cancels_;
  bool stopping_ = false;
  std::atomic<int64_t> n_waiting_{0}, n_running_{0}, n_steps_{0}, free_blocks_{0};
  std::atomic<double> kv_usage_{0};
};

}  // namespace latprof::engine
