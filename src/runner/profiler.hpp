#pragma once
// Op and stage spans: each scope opens an NVTX range (and the backend's range hook) and records a
// backend event at both ends, so spans are timed with the backend's own clock (CUDA events on a
// GPU, steady_clock on the CPU). Spans are resolved to milliseconds after a synchronize().
#include <cstdint>
#include <vector>

#include "backend/backend.hpp"
#include "core/nvtx.hpp"
#include "model/cost_model.hpp"

namespace latprof {

enum class Stage : int { tokenize = 0, prefill, decode, sample, detokenize, serialize, count };
inline constexpr int kNumStages = static_cast<int>(Stage::count);
const char* stage_name(Stage s);

struct Span {
  Stage stage;
  Op op;
  int layer;  // -1 when the op is not per layer
  int step;   // decode step, -1 in prefill
  int ev_begin, ev_end;
};

class Profiler {
 public:
  explicit Profiler(Backend& b) : b_(b) {}
  void set_context(Stage stage, int step) {
    stage_ = stage;
    step_ = step;
  }
  // Op events can be switched off (e.g. inside a CUDA graph replay, where they are meaningless).
  void set_op_events(bool on) { op_events_ = on; }
  // Everything off (NVTX, backend range hooks, events): the bare run profiler overhead is
  // measured against.
  void set_instrumented(bool on) { instrumented_ = on; }
  bool op_events() const { return op_events_; }
  Stage stage() const { return stage_; }
  int step() const { return step_; }
  void clear() { spans_.clear(); }
  const std::vector<Span>& spans() const { return spans_; }

  class Scope {
   public:
    Scope(Profiler& p, Op op, int layer) : p_(p), on_(p.instrumented_) {
      if (!on_) return;
      nvtx_push(op_name(op));
      const uint64_t id = uint64_t(int(p.stage_)) * 64 + uint64_t(int(op));
      p.b_.range_push(op_name(op), id);
      if (p.op_events_) {
        span_ = Span{p.stage_, op, layer, p.step_, p.b_.record_event(), -1};
      }
    }
    ~Scope() {
      if (!on_) return;
      if (p_.op_events_ && span_.ev_begin >= 0) {
        span_.ev_end = p_.b_.record_event();
        p_.spans_.push_back(span_);
      }
      p_.b_.range_pop();
      nvtx_pop();
    }
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    Profiler& p_;
    bool on_;
    Span span_{Stage::prefill, Op::embed, -1, -1, -1, -1};
  };
  Scope op(Op op, int layer = -1) { return Scope(*this, op, layer); }

 private:
  Backend& b_;
  Stage stage_ = Stage::prefill;
  int step_ = -1;
  bool op_events_ = true;
  bool instrumented_ = true;
  std::vector<Span> spans_;
};

}  // namespace latprof
