#include "engine/engine.hpp"

#include <algorithm>
#include <chrono>
#include <thread>

#include "core/error.hpp"

namespace latprof::engine {

Clock Clock::steady() {
  const auto t0 = std::chrono::steady_clock::now();
  Clock c;
  c.now_ms = [t0] {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  };
  c.wait_until_ms = [t0](double ms) {
    std::this_thread::sleep_until(t0 +
                                  std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                      std::chrono::duration<double, std::milli>(ms)));
  };
  return c;
}

Engine::Engine(const SchedulerConfig& cfg, BlockPool& pool, Executor& exec, Clock clock)
    : pool_(pool), sched_(cfg, pool), exec_(exec), clock_(std::move(clock)) {}

void Engine::submit(int64_t id, std::vector<int32_t> prompt, int64_t max_tokens,
                    double arrival_ms) {
  sched_.check_admissible(int64_t(prompt.size()), max_tokens);
  LATPROF_ASSERT(!timelines_.count(id), "request id " + std::to_string(id) + " submitted twice");
  RequestTimeline& t = timelines_[id];
  t.id = id;
  t.input_tokens = int64_t(prompt.size());
  t.output_tokens = max_tokens;
  t.arrival_ms = arrival_ms;
  pending_.push_back({id, std::move(prompt), max_tokens, arrival_ms});
}

void Engine::run() {
  std::stable_sort(pending_.begin(), pending_.end(),
                   [](const Pending& a, const Pending& b) { return a.arrival_ms < b.arrival_ms; });
  size_t next = 0;
  while (next < pending_.size() || sched_.has_work()) {
    const double now = clock_.now_ms();
    for (; next < pending_.size() && pending_[next].arrival_ms <= now; ++next) {
      Pending& p = pending_[next];
      sched_.add(p.id, std::move(p.prompt), p.max_tokens);
      timelines_[p.id].queued_ms = now;
    }
    if (!sched_.has_work()) {
      clock_.wait_until_ms(pending_[next].arrival_ms);
      continue;
    }

    StepRecord rec;
    rec.index = int64_t(steps_.size());
    rec.start_ms = now;
    const StepPlan plan = sched_.schedule();
    LATPROF_ASSERT(!plan.empty(), "the scheduler planned an empty step with work queued");
    const StepBatch batch = build_step(plan, sched_);
    const double t_planned = clock_.now_ms();
    rec.schedule_ms = t_planned - now;
    for (const ScheduledSeq& q : plan.seqs) {
      RequestTimeline& t = timelines_[q.request_id];
      if (t.first_scheduled_ms < 0) t.first_scheduled_ms = now;
      t.steps.push_back(rec.index);
      rec.request_ids.push_back(q.request_id);
    }

    const std::vector<int32_t> sampled = exec_.execute(batch);
    LATPROF_ASSERT(sampled.size() == batch.logits_rows.size(),
                   "the executor returned " + std::to_string(sampled.size()) + " tokens for " +
                       std::to_string(batch.logits_rows.size()) + " sampled rows");
    rec.execute_ms = clock_.now_ms() - t_planned;

    const std::vector<int64_t> done = sched_.complete(plan, sampled);
    size_t k = 0;
    for (const ScheduledSeq& q : plan.seqs) {
      if (!q.sample) continue;
      if (on_token) on_token(q.request_id, sampled[k]);
      ++k;
      timelines_[q.request_id].token_ms.push_back(clock_.now_ms());
    }
    const double end = clock_.now_ms();
    for (int64_t id : done) {
      RequestTimeline& t = timelines_[id];
      t.finished_ms = end;
      const Request& r = sched_.request(id);
      t.preemptions = r.preemptions;
      t.prefix_hit_tokens = r.prefix_hit_tokens;
      t.recompute_hit_tokens = r.recompute_hit_tokens;
      sched_.forget(id);
    }
    rec.end_ms = end;
    rec.prefill_tokens = plan.prefill_tokens;
    rec.decode_tokens = plan.decode_tokens;
    rec.seqs = int64_t(plan.seqs.size());
    rec.kv_blocks_used = pool_.num_used();
    rec.kv_usage = pool_.usage();
    rec.preempted = int64_t(plan.preempted.size());
    rec.waiting = sched_.num_waiting();
    rec.running = sched_.num_running();
    steps_.push_back(std::move(rec));
  }
}

}  // namespace latprof::engine
