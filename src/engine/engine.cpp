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
    std::vector<int64_t> done;
    StepRecord rec = step(
        now,
        [&](int64_t id, int32_t token) {
          if (on_token) on_token(id, token);
          timelines_[id].token_ms.push_back(clock_.now_ms());
        },
        done);
    fill_counts(rec);
    steps_.push_back(std::move(rec));
  }
}

void Engine::fill_counts(StepRecord& rec) const {
  rec.kv_blocks_used = pool_.num_used();
  rec.kv_usage = pool_.usage();
  rec.waiting = sched_.num_waiting();
  rec.running = sched_.num_running();
}

StepRecord Engine::step(double now, const std::function<void(int64_t, int32_t)>& deliver,
                        std::vector<int64_t>& done) {
  StepRecord rec;
  rec.index = step_count_++;
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

  done = sched_.complete(plan, sampled);
  size_t k = 0;
  for (const ScheduledSeq& q : plan.seqs) {
    if (!q.sample) continue;
    deliver(q.request_id, sampled[k]);
    ++k;
  }
  const double end = clock_.now_ms();
  for (int64_t id : done) {
    RequestTimeline& t = timelines_[id];
    t.finished_ms = end;
    take_counts(t, sched_.request(id));
    sched_.forget(id);
  }
  rec.end_ms = end;
  rec.prefill_tokens = plan.prefill_tokens;
  rec.decode_tokens = plan.decode_tokens;
  rec.seqs = int64_t(plan.seqs.size());
  rec.preempted = int64_t(plan.preempted.size());
  return rec;
}

// ---- online mode ----

Engine::~Engine() {
  shutdown();
}

void Engine::start(OnlineHooks hooks) {
  LATPROF_ASSERT(!thread_.joinable(), "the engine loop is already running");
  LATPROF_ASSERT(pending_.empty() && steps_.empty(), "online mode after run()");
  hooks_ = std::move(hooks);
  publish_counts();
  thread_ = std::thread([this] { online_loop(); });
}

void Engine::enqueue(int64_t id, std::vector<int32_t> prompt, int64_t max_tokens) {
  sched_.check_admissible(int64_t(prompt.size()), max_tokens);  // reads constants only
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (!failure_.empty()) throw std::runtime_error("the engine failed: " + failure_);
    if (stopping_) throw std::runtime_error("the engine is shut down");
    inbox_.push_back({id, std::move(prompt), max_tokens, clock_.now_ms()});
  }
  cv_.notify_one();
}

void Engine::cancel(int64_t id) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    cancels_.push_back(id);
  }
  cv_.notify_one();
}

void Engine::shutdown() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stopping_ = true;
  }
  cv_.notify_one();
  if (thread_.joinable() && thread_.get_id() != std::this_thread::get_id()) thread_.join();
}

void Engine::publish_counts() {
  n_waiting_ = sched_.num_waiting();
  n_running_ = sched_.num_running();
  kv_usage_ = pool_.usage();
  free_blocks_ = pool_.num_free();
}

std::string Engine::failure() const {
  std::lock_guard<std::mutex> lk(mu_);
  return failure_;
}

void Engine::online_loop() {
  try {
    online_steps();
  } catch (const std::exception& e) {
    // A step failed (a backend error, a broken invariant): enqueue() refuses from now on and
    // every request left is cancelled, so nobody waits for it forever.
    std::vector<Pending> arrived;
    {
      std::lock_guard<std::mutex> lk(mu_);
      failure_ = e.what();
      stopping_ = true;
      arrived.swap(inbox_);
    }
    for (const Pending& p : arrived) {
      RequestTimeline& t = timelines_[p.id];
      t.id = p.id;
      t.input_tokens = int64_t(p.prompt.size());
      t.output_tokens = p.max_tokens;
      t.arrival_ms = p.arrival_ms;
    }
    for (auto& [id, t] : timelines_) {
      try {
        sched_.abort(id);
      } catch (const std::exception&) {
        // the scheduler's state is what failed: its blocks go with the engine
      }
      t.finished_ms = clock_.now_ms();
    }
    publish_counts();
    for (auto& [id, t] : timelines_)
      if (hooks_.finish) hooks_.finish(t, true);
    timelines_.clear();
  }
}

void Engine::take_counts(RequestTimeline& t, const Request& r) {
  t.preemptions = r.preemptions;
  t.prefix_hit_tokens = r.prefix_hit_tokens;
  t.recompute_hit_tokens = r.recompute_hit_tokens;
}

void Engine::online_steps() {
  // Ends a request that has not finished: out of the scheduler (blocks freed), the counts
  // published, then finish(): whoever finish() wakes reads counts that no longer hold it.
  auto end_request = [&](int64_t id, bool cancelled) {
    const auto it = timelines_.find(id);
    if (it == timelines_.end()) return;
    RequestTimeline& t = it->second;
    sched_.abort(id);
    t.finished_ms = clock_.now_ms();
    publish_counts();
    if (hooks_.finish) hooks_.finish(t, cancelled);
    timelines_.erase(it);
  };
  for (;;) {
    std::vector<Pending> arrived;
    std::vector<int64_t> cancels;
    bool stop = false;
    {
      std::unique_lock<std::mutex> lk(mu_);
      cv_.wait(lk, [&] {
        return stopping_ || !inbox_.empty() || !cancels_.empty() || sched_.has_work();
      });
      stop = stopping_;
      arrived.swap(inbox_);
      cancels.swap(cancels_);
    }
    const double now = clock_.now_ms();
    for (Pending& p : arrived) {
      RequestTimeline& t = timelines_[p.id];
      t.id = p.id;
      t.input_tokens = int64_t(p.prompt.size());
      t.output_tokens = p.max_tokens;
      t.arrival_ms = p.arrival_ms;
      t.queued_ms = now;
      sched_.add(p.id, std::move(p.prompt), p.max_tokens);
    }
    for (int64_t id : cancels) end_request(id, true);
    if (stop) {
      std::vector<int64_t> left;
      for (const auto& [id, t] : timelines_) left.push_back(id);
      for (int64_t id : left) end_request(id, true);
      publish_counts();
      return;
    }
    if (!sched_.has_work()) {
      publish_counts();
      continue;
    }
    std::vector<int64_t> done, stopped;
    StepRecord rec = step(
        now,
        [&](int64_t id, int32_t token) {
          const double t = clock_.now_ms();
          timelines_[id].token_ms.push_back(t);
          if (hooks_.token && !hooks_.token(id, token, t)) stopped.push_back(id);
        },
        done);
    // Finished by length (out of the scheduler already) or stopped by token() (taken out here;
    // one finished by length in the same step stays with the first list). Every one leaves the
    // scheduler, the counts are published and step() runs before any finish(): whoever finish()
    // wakes (a client reading its response, then the metrics) sees the whole step.
    std::vector<int64_t> ended = done;
    for (int64_t id : stopped) {
      if (std::find(done.begin(), done.end(), id) != done.end()) continue;
      const auto it = timelines_.find(id);
      if (it == timelines_.end()) continue;
      it->second.finished_ms = rec.end_ms;
      take_counts(it->second, sched_.request(id));
      sched_.abort(id);
      ended.push_back(id);
    }
    fill_counts(rec);
    ++n_steps_;
    publish_counts();
    if (hooks_.step) hooks_.step(rec);
    for (int64_t id : ended) {
      const auto it = timelines_.find(id);
      if (hooks_.finish) hooks_.finish(it->second, false);
      timelines_.erase(it);
    }
  }
}

}  // namespace latprof::engine
