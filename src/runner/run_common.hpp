#pragma once
// What the two modes of `latprof run` share (one request repeated, src/runner/runner.cpp; many
// requests under load, src/runner/load_run.cpp): the host clock, the machine and tool records,
// the ceilings, the derived columns of table rows, and the run's setup (model, backend, weights).
#include <chrono>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "engine/engine.hpp"
#include "model/cost_model.hpp"
#include "model/open.hpp"
#include "report/report.hpp"
#include "runner/model.hpp"
#include "runner/runner.hpp"

namespace latprof::run_detail {

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t0);
std::string utc_now();  // ISO 8601, UTC

// Writes every byte of the KV cache once (zeros), so its pages are resident before anything is
// timed. Returns the bytes written.
double touch_kv_cache(LoadedModel& m);

double load_average();  // 1-minute load average of the machine (-1 when unknown)
nlohmann::json machine_json(const Backend& b);
nlohmann::json tool_json();

// Ceilings of the device the run uses: measured by the backend (GPU) or the host probe (CPU).
void measure_ceilings(Backend& b, const RunOptions& o, int threads, RunReport& r);
// Fills the derived columns of an op row from its time, cost and the ceilings.
void derive(Row& row, const Ceilings& c, const Precision& p, Op op_for_peak, bool has_cost);
// A stage row's: its bound is the larger of the summed compute and memory floors of its ops.
void derive_stage(Row& row, const OpCosts& ops, const Ceilings& c, const Precision& p);

// A step's row of the report: the engine's record, its place on the run's clock (begin_ms to the
// record's end), its backend times and its cost-model work.
// The thread pool's share of the pure decode steps (metrics.decode_sync_*) and its time off the
// CPUs (metrics.decode_offcpu_*, with a warning where the machine took much of it), from r.steps.
void fill_sync_metrics(RunReport& r);
StepRow step_row(const engine::StepRecord& rec, double begin_ms, double forward_ms,
                 double sample_ms, const Backend::SyncTime& sync, const Cost& work,
                 const Ceilings& c, const Precision& p);

// A run's setup, in the order it happens: the model file and the flags that need it
// (open_run_model), then the backend and its ceilings (open_run_backend), then the weights at
// the engine's shape (load_run_weights). Each step throws UsageError before allocating what
// does not fit.
struct RunSetup {
  RunReport r;  // created_utc, tool, notes, checks and ceilings filled as setup goes
  Clock::time_point start;
  double load_before = -1;
  OpenedModel om;
  WeightType wtype = WeightType::f16;
  std::unique_ptr<Backend> backend;
  DeviceInfo dev;
  int threads = 0;
  Precision p;
  double ceilings_ms = 0, alloc_ms = 0, weights_ms = 0;
  std::unique_ptr<LoadedModel> model;
  Footprint fp;
};
void open_run_model(const RunOptions& o, RunSetup& s);
void open_run_backend(const RunOptions& o, RunSetup& s);
// The backend a run of o asks for: kind, threads, graphs and KV type (UsageError for a bad
// --kv-dtype).
BackendOptions run_backend_options(const RunOptions& o);
void load_run_weights(const RunOptions& o, RunSetup& s, const EngineShape& es);
// The parts of the report every run fills the same way: run info (identity), model config,
// machine (with the load-average warning), setup times and the engine's settings.
void fill_run_identity(const RunOptions& o, RunSetup& s, const EngineShape& es);
// CPU runs: measures the read bandwidth again after the timed part and sets the memory roof to
// the mean of that and the one measured before it (no-op for device ceilings). Call before any
// figure is derived from the ceilings.
void settle_read_bandwidth(RunReport& r);
// The end of every report: what the stages leave unattributed of `total_ms` (zero up to
// rounding: they partition it), the notes on the clock and the backend, the physics checks.
void finish_report(RunReport& r, const Backend& b, double total_ms);

}  // namespace latprof::run_detail
