#pragma once
// The run report: one structure that every printer (table, JSON, CSV, trace, HTML) formats.
// Field names here are the JSON names (see README.md, "JSON report"); units are in the names.
#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "model/cost_model.hpp"
#include "roofline/ceilings.hpp"

namespace latprof {

// Major.minor: major changes break readers, minor adds fields. The fields are described once, in
// report_fields.hpp.
inline constexpr const char* kSchemaVersion = "1.4";
inline constexpr int kSchemaMajor = 1;

// The one distribution object of the report (JSON: count, mean, stddev, min, p50, p90, p95, p99,
// max). Percentiles interpolate linearly between closest ranks, as numpy.percentile's default
// and vLLM's benchmarks; stddev is the sample standard deviation (n - 1).
struct Percentiles {
  int64_t count = 0;
  double mean = 0, stddev = 0, min = 0, p50 = 0, p90 = 0, p95 = 0, p99 = 0, max = 0;
};
Percentiles percentiles(std::vector<double> samples);

// A row of the stage or op table. Times are measured; FLOPs and bytes come from the cost model.
struct Row {
  std::string stage;  // for ops: the stage they ran in ("prefill", "decode", "sample")
  std::string name;
  double time_ms = 0;               // in the median-E2E repeat, measured
  double time_min_ms = 0;           // fastest repeat
  double time_max_ms = 0;           // slowest repeat
  double share = 0;                 // of e2e (stages) or of the stage (ops)
  int64_t calls = 0;                // per repeat
  Cost cost;                        // cost model
  double arithmetic_intensity = 0;  // FLOP/byte (cost model)
  double achieved_flops_per_s = 0;
  double achieved_bytes_per_s = 0;
  double floor_ms = 0;           // roofline floor (cost model / ceilings)
  std::string bound;             // "compute" | "memory" | "" (no work, e.g. tokenize)
  double roofline_fraction = 0;  // floor_ms / time_ms
  double mfu = 0;                // model FLOPs / time / compute peak
  double mbu = 0;                // bytes / time / memory bandwidth
};

struct Metrics {
  double ttft_ms = 0;  // tokenize + prefill + first sample (median repeat)
  double tpot_ms = 0;  // mean decode step (forward + sample + detokenize) after the first token
  double e2e_ms = 0;   // all stages
  double prefill_tokens_per_s = 0;      // batch * input / prefill time
  double decode_tokens_per_s = 0;       // batch * (output - 1) / decode-phase time
  Percentiles itl_ms;                   // inter-token latencies over all repeats' decode steps
  Percentiles e2e_repeats_ms;           // spread of e2e over repeats
  double mfu = 0;                       // prefill + decode model FLOPs / their time / peak
  double mbu = 0;                       // decode bytes / decode time / bandwidth
  double setup_ms = 0;                  // weights, KV cache, probe: not part of request latency
  double decode_step_intercept_ms = 0;  // linear fit of step time vs context
  double decode_step_slope_us_per_token = 0;
  double decode_step_r2 = 0;
  double decode_kv_bytes_per_s = 0;  // effective KV-read bandwidth implied by the slope
  double decode_sync_ms = -1;        // CPU: thread-pool synchronisation per pure decode step
  double decode_sync_fork_ms = -1;   // the part of it that is late starts
  double decode_parallel_regions = -1;
  double decode_sync_share = -1;  // of the step's forward pass
  double decode_offcpu_ms = -1;   // CPU: mean time per pure decode step the pool was off-CPU
  double decode_offcpu_max_ms = -1;
  double decode_offcpu_share = -1;  // of the pure decode steps' time
  double decode_runq_ms = -1;       // the part of decode_offcpu_ms waiting for a CPU
};

struct Check {
  std::string level;    // "error" (physics violated: likely timing bug), "warning", "info"
  std::string subject;  // e.g. "decode", "metrics.mbu"
  std::string message;
};

// One engine step of the median repeat: what the scheduler put in it and what it cost.
struct StepRow {
  int64_t index = 0;
  double start_ms = 0;     // from the request start (host clock): the previous step's end
  double time_ms = 0;      // host clock, to this step's end (tokens in host memory)
  double schedule_ms = 0;  // scheduler and step building (host bookkeeping)
  double forward_ms = 0;   // the forward pass (backend clock)
  double sample_ms = 0;    // sampling (backend clock)
  int64_t prefill_tokens = 0, decode_tokens = 0, seqs = 0;
  int64_t kv_blocks_used = 0;
  double kv_usage = 0;  // fraction of the KV blocks in use after the step
  int64_t preempted = 0;
  double flops = 0, bytes = 0;  // cost model
  double mfu = 0, mbu = 0;      // against time_ms
  double sync_ms = -1;          // CPU thread pool: late starts + barrier waits (-1: no pool)
  double sync_fork_ms = -1;     // the late starts alone
  int64_t parallel_regions = -1;
  double offcpu_ms = -1;  // CPU thread pool: its threads' time off their CPUs (-1: not measured)
  double runq_ms = -1;    // the part of it waiting for a CPU behind other tasks
  // Decode tokens only (no prompt or recomputed tokens): the steps the decode_* metrics cover.
  bool pure_decode() const { return prefill_tokens == 0 && decode_tokens > 0; }
};

struct RunInfo {
  std::string model;
  std::string model_source;  // "builtin", a path
  std::string weights;       // "synthetic (seed N)" or the file loaded
  std::string dtype;
  std::string kv_dtype;  // "fp16", "bf16", "int8"
  std::string backend;
  std::string device;
  int64_t input_tokens = 0;
  int64_t output_tokens = 0;
  int64_t batch = 1;
  int threads = 0;
  int repeat = 1;
  int warmup = 1;
  uint64_t seed = 0;
  double temperature = 0;
  int top_k = 0;
  bool graphs = false;
  std::vector<int32_t> prompt_token_ids;  // sequence 0
  std::vector<int32_t> output_token_ids;  // sequence 0
  std::string output_text;
  std::string tokenizer;
  std::vector<std::string> argv;
};

// One timed span of the median repeat, for traces (not written to the JSON report).
struct TraceEvent {
  std::string name;     // op or stage name
  std::string stage;    // stage it belongs to ("" for a stage span itself)
  int layer = -1;       // -1: not a per-layer op
  int step = -1;        // decode step index, -1 for prefill
  double start_us = 0;  // from the start of the request
  double dur_us = 0;
};

struct RunReport {
  nlohmann::json tool;     // name, version, git_commit, git_dirty, build_type, compiler
  nlohmann::json machine;  // hostname, cpu, cores, memory_bytes, os, backends
  RunInfo run;
  nlohmann::json model_config;
  Ceilings ceilings;
  nlohmann::json ceilings_info;  // how they were obtained (probe details, cache file)
  Metrics metrics;
  std::vector<Row> stages;
  std::vector<Row> ops;
  nlohmann::json setup;                // setup stages (weights, kv cache) with times
  std::vector<double> decode_step_ms;  // median repeat: forward pass of each decode step (backend
                                       // clock), the decode-step fit's samples
  std::vector<double> token_times_ms;  // median repeat: each output token of sequence 0 in host
                                       // memory and detokenized, ms from request start (host
                                       // clock); TTFT, TPOT and the ITL samples derive from it
  std::vector<double> repeat_e2e_ms;
  std::vector<StepRow> steps;  // median repeat
  std::vector<Check> checks;
  std::vector<std::string> notes;
  nlohmann::json profile;  // backend profile (kernels, counters), null if none
  std::string created_utc;
  std::vector<TraceEvent> timeline;  // median repeat; stages, decode steps and ops
  // `run --requests` (latency under load): the load's settings, one object per request and the
  // summary over them (report/requests.hpp); null in the single-request mode.
  nlohmann::json load;
  nlohmann::json requests;
  nlohmann::json summary;
};

// The run's KV-cache type: its kv_dtype, fp16 in reports from before the field.
inline std::string kv_dtype_of(const RunInfo& ri) {
  return ri.kv_dtype.empty() ? "fp16" : ri.kv_dtype;
}
// steps[].offcpu_ms of the pure decode steps, in decode_step_ms's order (one each); empty where a
// step did not measure it (CUDA, reports from before the field) or the counts differ.
std::vector<double> decode_step_offcpu_ms(const RunReport& r);
// The precision a run was measured at: its weights and KV cache (kv_dtype_of), activations as
// act_dtype (only activation-byte figures depend on it). UsageError for a dtype this build does
// not know.
Precision run_precision(const RunInfo& ri, const std::string& act_dtype = "fp32");

nlohmann::json report_to_json(const RunReport& r);
// The run's identity in one flat object (model, dtype, backend, device, tokens, batch, threads,
// repeat), shared by the JSON Lines record and the trace metadata.
nlohmann::json run_identity_json(const RunReport& r);
// Throws UsageError with `origin` named when the JSON is not a compatible latprof run report.
RunReport report_from_json(const nlohmann::json& j, const std::string& origin);
// The largest report file read (compare, plot, roofline --from): 256 MiB.
inline constexpr size_t kMaxReportBytes = size_t(256) << 20;
RunReport load_report(const std::string& path);
nlohmann::json percentiles_to_json(const Percentiles& p);
nlohmann::json row_to_json(const Row& r);

// A roofline prediction (roofline/predict.hpp) in the run report's shape: schema_version, kind
// "prediction", run, model, ceilings, stages, ops (floor_ms, bound, expected_ms; time_ms null),
// floor, expected, efficiency, memory, compute_bound (prediction_json.cpp).
struct Prediction;
nlohmann::json prediction_json(const Prediction& p, const std::vector<std::string>& argv);

// The numeric fields of a Row, in JSON order, with their units and descriptions: derived from the
// row's description in report_fields.hpp, for the CSV, compare and HTML printers.
struct RowField {
  const char* name;
  const char* unit;  // "ms", "FLOP", "B", "FLOP/B", "FLOP/s", "B/s", "1" (fraction), "count"
  const char* description;
  std::function<double(const Row&)> get;
};
const std::vector<RowField>& row_fields();

struct MetricField {
  const char* name;  // flat name (JSON Lines, compare): "ttft_ms", "itl_p99_ms", ...
  const char* unit;
  const char* description;
  bool higher_is_better;  // tokens/s, MFU, MBU; false for latencies
  double (*get)(const Metrics&);
};
const std::vector<MetricField>& metric_fields();
// nullptr when `name` is not in metric_fields(); "e2e", "ttft", "tpot" stand for "<name>_ms".
const MetricField* find_metric_field(const std::string& name);

}  // namespace latprof
