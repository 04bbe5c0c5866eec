#pragma once
// The run report: one structure that every printer (table, JSON, CSV, trace, HTML) formats.
// Field names here are the JSON names (see README.md, "JSON report"); units are in the names.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "model/cost_model.hpp"
#include "roofline/ceilings.hpp"

namespace latprof {

// Major.minor: major changes break readers, minor adds fields.
inline constexpr const char* kSchemaVersion = "1.0";
inline constexpr int kSchemaMajor = 1;

struct Percentiles {
  double mean = 0, p50 = 0, p90 = 0, p95 = 0, p99 = 0, max = 0, min = 0, stddev = 0;
  int64_t count = 0;
};
Percentiles percentiles(std::vector<double> samples);  // linear interpolation between ranks

// A row of the stage or op table. Times are measured; FLOPs and bytes come from the cost model.
struct Row {
  std::string stage;  // for ops: the stage they ran in ("prefill", "decode", "sample")
  std::string name;
  double time_ms = 0;               // median over repeats, measured
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
};

struct Check {
  std::string level;    // "error" (physics violated: likely timing bug), "warning", "info"
  std::string subject;  // e.g. "decode", "metrics.mbu"
  std::string message;
};

struct RunInfo {
  std::string model;
  std::string model_source;  // "builtin", a path
  std::string weights;       // "synthetic (seed N)" or the file loaded
  std::string dtype;
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
  std::vector<double> decode_step_ms;  // per-token decode latencies of the median repeat
  std::vector<double> repeat_e2e_ms;
  std::vector<Check> checks;
  std::vector<std::string> notes;
  nlohmann::json profile;  // backend profile (kernels, counters), null if none
  std::string created_utc;
  std::vector<TraceEvent> timeline;  // median repeat; stages, decode steps and ops
};

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

// The numeric fields of a Row and of Metrics with their units and descriptions: the one table
// that the CSV, JSON Lines, compare and HTML printers share (names are the JSON names).
struct RowField {
  const char* name;
  const char* unit;  // "ms", "FLOP", "B", "FLOP/B", "FLOP/s", "B/s", "1" (fraction), "count"
  const char* description;
  double (*get)(const Row&);
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
