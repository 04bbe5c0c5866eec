#pragma once
// The engine's executor on a model resident on a backend: uploads a step's arrays to the model's
// step buffer, runs the forward pass (captured for replay when every sequence of the step decodes
// one token), samples, and brings the tokens to host memory. Backend events around the forward
// pass and the sampling time them on the backend's clock, as attribution beneath the engine's
// host-clock stamps.
#include <cstdint>
#include <functional>
#include <vector>

#include "engine/engine.hpp"
#include "runner/model.hpp"
#include "runner/profiler.hpp"

namespace latprof {

class ModelRunner : public engine::Executor {
 public:
  ModelRunner(LoadedModel& m, Profiler& prof, const SamplingParams& sampling);
  std::vector<int32_t> execute(const engine::StepBatch& b) override;

  // Backend-clock times of the last step.
  struct StepTimes {
    double forward_ms = 0;
    double sample_ms = 0;
    int ev_forward0 = -1, ev_forward1 = -1, ev_sample1 = -1;  // events of the last step
    bool replayed = false;   // run as a captured graph (per-op events not meaningful)
    Backend::SyncTime sync;  // the host thread pool's synchronisation in the step
  };
  const StepTimes& last() const { return history_.back(); }
  const std::vector<StepTimes>& history() const { return history_; }

  // Called before each step is issued (e.g. to set the profiler's stage), and after each layer
  // is issued (progress).
  std::function<void(const engine::StepBatch&)> before_step;
  std::function<void(int)> on_layer;

 private:
  LoadedModel& m_;
  Profiler& prof_;
  SamplingParams sampling_;
  std::vector<int32_t> staging_;  // host image of the step buffer
  std::vector<StepTimes> history_;
};

}  // namespace latprof
