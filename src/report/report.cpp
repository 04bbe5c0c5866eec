#include "report/report.hpp"

#include <algorithm>
#include <cmath>
#include <fstream>

#include "core/error.hpp"
#include "core/input_file.hpp"
#include "report/report_values.hpp"

namespace latprof {

Percentiles percentiles(std::vector<double> s) {
  Percentiles p;
  p.count = int64_t(s.size());
  if (s.empty()) return p;
  std::sort(s.begin(), s.end());
  auto at = [&](double q) {
    const double pos = q * double(s.size() - 1);
    const size_t lo = size_t(std::floor(pos));
    const size_t hi = std::min(lo + 1, s.size() - 1);
    return s[lo] + (s[hi] - s[lo]) * (pos - double(lo));
  };
  double sum = 0;
  for (double v : s) sum += v;
  p.mean = sum / double(s.size());
  double var = 0;
  for (double v : s) var += (v - p.mean) * (v - p.mean);
  p.stddev = s.size() > 1 ? std::sqrt(var / double(s.size() - 1)) : 0;
  p.min = s.front();
  p.max = s.back();
  p.p50 = at(0.50);
  p.p90 = at(0.90);
  p.p95 = at(0.95);
  p.p99 = at(0.99);
  return p;
}

namespace {
// JSON has no NaN or Infinity: write null.
nlohmann::json num(double v) {
  return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json();
}
double get_num(const nlohmann::json& j, const char* k) {
  if (!j.contains(k) || !j[k].is_number()) return 0;
  return j[k].get<double>();
}
}  // namespace

nlohmann::json percentiles_to_json(const Percentiles& p) {
  return {{"mean", num(p.mean)}, {"p50", num(p.p50)},       {"p90", num(p.p90)},
          {"p95", num(p.p95)},   {"p99", num(p.p99)},       {"max", num(p.max)},
          {"min", num(p.min)},   {"stddev", num(p.stddev)}, {"count", p.count}};
}

static Percentiles percentiles_from_json(const nlohmann::json& j) {
  Percentiles p;
  if (!j.is_object()) return p;
  p.mean = get_num(j, "mean");
  p.p50 = get_num(j, "p50");
  p.p90 = get_num(j, "p90");
  p.p95 = get_num(j, "p95");
  p.p99 = get_num(j, "p99");
  p.max = get_num(j, "max");
  p.min = get_num(j, "min");
  p.stddev = get_num(j, "stddev");
  p.count = j.value("count", int64_t(0));
  return p;
}

nlohmann::json row_to_json(const Row& r) {
  nlohmann::json j = {
      {"name", r.name},
      {"time_ms", num(r.time_ms)},
      {"time_min_ms", num(r.time_min_ms)},
      {"time_max_ms", num(r.time_max_ms)},
      {"share", num(r.share)},
      {"calls", r.calls},
      {"flops", num(r.cost.flops)},
      {"model_flops", num(r.cost.model_flops)},
      {"bytes", num(r.cost.bytes())},
      {"weight_bytes", num(r.cost.weight_bytes)},
      {"activation_bytes", num(r.cost.act_bytes)},
      {"kv_bytes", num(r.cost.kv_bytes)},
      {"arithmetic_intensity", num(r.arithmetic_intensity)},
      {"achieved_flops_per_s", num(r.achieved_flops_per_s)},
      {"achieved_bytes_per_s", num(r.achieved_bytes_per_s)},
      {"floor_ms", num(r.floor_ms)},
      {"bound", r.bound.empty() ? nlohmann::json() : nlohmann::json(r.bound)},
      {"roofline_fraction", num(r.roofline_fraction)},
      {"mfu", num(r.mfu)},
      {"mbu", num(r.mbu)},
  };
  if (!r.stage.empty()) j["stage"] = r.stage;
  return j;
}

static Row row_from_json(const nlohmann::json& j) {
  Row r;
  r.name = j.value("name", "");
  r.stage = j.value("stage", "");
  r.time_ms = get_num(j, "time_ms");
  r.time_min_ms = get_num(j, "time_min_ms");
  r.time_max_ms = get_num(j, "time_max_ms");
  r.share = get_num(j, "share");
  r.calls = j.value("calls", int64_t(0));
  r.cost.flops = get_num(j, "flops");
  r.cost.model_flops = get_num(j, "model_flops");
  r.cost.weight_bytes = get_num(j, "weight_bytes");
  r.cost.act_bytes = get_num(j, "activation_bytes");
  r.cost.kv_bytes = get_num(j, "kv_bytes");
  if (r.cost.bytes() == 0) r.cost.act_bytes = get_num(j, "bytes");
  r.arithmetic_intensity = get_num(j, "arithmetic_intensity");
  r.achieved_flops_per_s = get_num(j, "achieved_flops_per_s");
  r.achieved_bytes_per_s = get_num(j, "achieved_bytes_per_s");
  r.floor_ms = get_num(j, "floor_ms");
  r.bound = j.contains("bound") && j["bound"].is_string() ? j["bound"].get<std::string>() : "";
  r.roofline_fraction = get_num(j, "roofline_fraction");
  r.mfu = get_num(j, "mfu");
  r.mbu = get_num(j, "mbu");
  return r;
}

nlohmann::json report_to_json(const RunReport& r) {
  nlohmann::json j;
  j["schema_version"] = kSchemaVersion;
  j["tool"] = r.tool;
  j["created_utc"] = r.created_utc;
  j["machine"] = r.machine;
  const RunInfo& ri = r.run;
  j["run"] = {{"model", ri.model},
              {"model_source", ri.model_source},
              {"weights", ri.weights},
              {"dtype", ri.dtype},
              {"backend", ri.backend},
              {"device", ri.device},
              {"input_tokens", ri.input_tokens},
              {"output_tokens", ri.output_tokens},
              {"batch", ri.batch},
              {"threads", ri.threads},
              {"repeat", ri.repeat},
              {"warmup", ri.warmup},
              {"seed", ri.seed},
              {"temperature", ri.temperature},
              {"top_k", ri.top_k},
              {"graphs", ri.graphs},
              {"tokenizer", ri.tokenizer},
              {"prompt_token_ids", ri.prompt_token_ids},
              {"output_token_ids", ri.output_token_ids},
              {"output_text", ri.output_text},
              {"argv", ri.argv}};
  j["model"] = r.model_config;
  j["ceilings"] = ceilings_to_json(r.ceilings);
  j["ceilings"]["info"] = r.ceilings_info;
  const Metrics& m = r.metrics;
  j["metrics"] = {{"ttft_ms", num(m.ttft_ms)},
                  {"tpot_ms", num(m.tpot_ms)},
                  {"e2e_ms", num(m.e2e_ms)},
                  {"prefill_tokens_per_s", num(m.prefill_tokens_per_s)},
                  {"decode_tokens_per_s", num(m.decode_tokens_per_s)},
                  {"itl_ms", percentiles_to_json(m.itl_ms)},
                  {"e2e_repeats_ms", percentiles_to_json(m.e2e_repeats_ms)},
                  {"mfu", num(m.mfu)},
                  {"mbu", num(m.mbu)},
                  {"setup_ms", num(m.setup_ms)},
                  {"decode_step_fit",
                   {{"intercept_ms", num(m.decode_step_intercept_ms)},
                    {"slope_us_per_token", num(m.decode_step_slope_us_per_token)},
                    {"r2", num(m.decode_step_r2)},
                    {"kv_bytes_per_s", num(m.decode_kv_bytes_per_s)}}}};
  j["stages"] = nlohmann::json::array();
  for (const auto& s : r.stages) j["stages"].push_back(row_to_json(s));
  j["ops"] = nlohmann::json::array();
  for (const auto& o : r.ops) j["ops"].push_back(row_to_json(o));
  j["setup"] = r.setup;
  j["decode_step_ms"] = r.decode_step_ms;
  j["repeat_e2e_ms"] = r.repeat_e2e_ms;
  j["checks"] = nlohmann::json::array();
  for (const auto& c : r.checks)
    j["checks"].push_back({{"level", c.level}, {"subject", c.subject}, {"message", c.message}});
  j["notes"] = r.notes;
  j["profile"] = r.profile;
  j["sources"] = {
      {"time_ms", "measured"},
      {"flops", "cost model"},
      {"bytes", "cost model"},
      {"ceilings", r.ceilings.source},
      {"floor_ms", "cost model / ceilings"},
      {"mfu", "measured time, cost-model model FLOPs"},
      {"mbu", "measured time, cost-model bytes"},
  };
  return j;
}

nlohmann::json run_identity_json(const RunReport& r) {
  return {{"model", r.run.model},
          {"dtype", r.run.dtype},
          {"backend", r.run.backend},
          {"device", r.run.device},
          {"input_tokens", r.run.input_tokens},
          {"output_tokens", r.run.output_tokens},
          {"batch", r.run.batch},
          {"threads", r.run.threads},
          {"repeat", r.run.repeat}};
}

RunReport report_from_json(const nlohmann::json& j, const std::string& origin) {
  if (!j.is_object() || !j.contains("schema_version") || !j.contains("metrics") ||
      !j.contains("stages"))
    usage_error(origin + ": not a latprof run report (no schema_version, metrics and stages)");
  const std::string ver =
      j["schema_version"].is_string() ? j["schema_version"].get<std::string>() : "";
  const int major = std::atoi(ver.c_str());
  if (major != kSchemaMajor)
    usage_error(origin + ": report schema version " + ver +
                " is not supported (this latprof reads " + std::to_string(kSchemaMajor) +
                ".x); re-run it with this latprof");
  check_report_values(j, origin);  // types and ranges (report_values.cpp)
  RunReport r;
  try {
    r.tool = j.value("tool", nlohmann::json::object());
    r.machine = j.value("machine", nlohmann::json::object());
    r.created_utc = j.value("created_utc", "");
    const auto& ru = j.at("run");
    r.run.model = ru.value("model", "");
    r.run.model_source = ru.value("model_source", "");
    r.run.weights = ru.value("weights", "");
    r.run.dtype = ru.value("dtype", "");
    r.run.backend = ru.value("backend", "");
    r.run.device = ru.value("device", "");
    r.run.input_tokens = ru.value("input_tokens", int64_t(0));
    r.run.output_tokens = ru.value("output_tokens", int64_t(0));
    r.run.batch = ru.value("batch", int64_t(1));
    r.run.threads = ru.value("threads", 0);
    r.run.repeat = ru.value("repeat", 1);
    r.run.warmup = ru.value("warmup", 1);
    r.run.seed = ru.value("seed", uint64_t(0));
    r.run.temperature = ru.value("temperature", 0.0);
    r.run.top_k = ru.value("top_k", 0);
    r.run.graphs = ru.value("graphs", false);
    r.run.tokenizer = ru.value("tokenizer", "");
    r.run.prompt_token_ids = ru.value("prompt_token_ids", std::vector<int32_t>{});
    r.run.output_token_ids = ru.value("output_token_ids", std::vector<int32_t>{});
    r.run.output_text = ru.value("output_text", "");
    r.model_config = j.value("model", nlohmann::json::object());
    if (j.contains("ceilings")) {
      r.ceilings = ceilings_from_json(j["ceilings"], origin);
      r.ceilings_info = j["ceilings"].value("info", nlohmann::json());
    }
    const auto& m = j.at("metrics");
    r.metrics.ttft_ms = get_num(m, "ttft_ms");
    r.metrics.tpot_ms = get_num(m, "tpot_ms");
    r.metrics.e2e_ms = get_num(m, "e2e_ms");
    r.metrics.prefill_tokens_per_s = get_num(m, "prefill_tokens_per_s");
    r.metrics.decode_tokens_per_s = get_num(m, "decode_tokens_per_s");
    r.metrics.itl_ms = percentiles_from_json(m.value("itl_ms", nlohmann::json()));
    r.metrics.e2e_repeats_ms = percentiles_from_json(m.value("e2e_repeats_ms", nlohmann::json()));
    r.metrics.mfu = get_num(m, "mfu");
    r.metrics.mbu = get_num(m, "mbu");
    r.metrics.setup_ms = get_num(m, "setup_ms");
    if (m.contains("decode_step_fit")) {
      r.metrics.decode_step_intercept_ms = get_num(m["decode_step_fit"], "intercept_ms");
      r.metrics.decode_step_slope_us_per_token =
          get_num(m["decode_step_fit"], "slope_us_per_token");
    }
    for (const auto& s : j.at("stages")) r.stages.push_back(row_from_json(s));
    for (const auto& o : j.value("ops", nlohmann::json::array())) r.ops.push_back(row_from_json(o));
    r.setup = j.value("setup", nlohmann::json());
    r.decode_step_ms = j.value("decode_step_ms", std::vector<double>{});
    r.repeat_e2e_ms = j.value("repeat_e2e_ms", std::vector<double>{});
    for (const auto& c : j.value("checks", nlohmann::json::array()))
      r.checks.push_back({c.value("level", ""), c.value("subject", ""), c.value("message", "")});
    r.notes = j.value("notes", std::vector<std::string>{});
    r.profile = j.value("profile", nlohmann::json());
  } catch (const nlohmann::json::exception& e) {
    usage_error(origin + ": malformed latprof report: " + e.what());
  }
  return r;
}

RunReport load_report(const std::string& path) {
  check_input_path(path, "report", false, /*allow_fifo=*/true);
  const std::string text = read_input_file(path, "report", kMaxReportBytes);
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    usage_error(path + ": not valid JSON (truncated or not a report): " + std::string(e.what()));
  }
  return report_from_json(j, path);
}

const std::vector<RowField>& row_fields() {
  static const std::vector<RowField> f = {
      {"time_ms", "ms", "median over repeats (measured)", [](const Row& r) { return r.time_ms; }},
      {"time_min_ms", "ms", "fastest repeat", [](const Row& r) { return r.time_min_ms; }},
      {"time_max_ms", "ms", "slowest repeat", [](const Row& r) { return r.time_max_ms; }},
      {"share", "1", "fraction of end-to-end (stages) or of the stage (ops)",
       [](const Row& r) { return r.share; }},
      {"calls", "count", "calls per request", [](const Row& r) { return double(r.calls); }},
      {"flops", "FLOP", "executed FLOPs (cost model)", [](const Row& r) { return r.cost.flops; }},
      {"model_flops", "FLOP", "MFU-convention FLOPs (cost model)",
       [](const Row& r) { return r.cost.model_flops; }},
      {"bytes", "B", "bytes moved: weights + activations + KV cache (cost model)",
       [](const Row& r) { return r.cost.bytes(); }},
      {"weight_bytes", "B", "weight bytes read (cost model)",
       [](const Row& r) { return r.cost.weight_bytes; }},
      {"activation_bytes", "B", "activation bytes read and written (cost model)",
       [](const Row& r) { return r.cost.act_bytes; }},
      {"kv_bytes", "B", "KV-cache bytes read and written (cost model)",
       [](const Row& r) { return r.cost.kv_bytes; }},
      {"arithmetic_intensity", "FLOP/B", "flops / bytes",
       [](const Row& r) { return r.arithmetic_intensity; }},
      {"achieved_flops_per_s", "FLOP/s", "flops / time",
       [](const Row& r) { return r.achieved_flops_per_s; }},
      {"achieved_bytes_per_s", "B/s", "bytes / time",
       [](const Row& r) { return r.achieved_bytes_per_s; }},
      {"floor_ms", "ms", "roofline floor: max(flops / compute peak, bytes / bandwidth)",
       [](const Row& r) { return r.floor_ms; }},
      {"roofline_fraction", "1", "floor_ms / time_ms",
       [](const Row& r) { return r.roofline_fraction; }},
      {"mfu", "1", "model FLOPs / time / compute peak", [](const Row& r) { return r.mfu; }},
      {"mbu", "1", "bytes / time / memory bandwidth", [](const Row& r) { return r.mbu; }},
  };
  return f;
}

const std::vector<MetricField>& metric_fields() {
  using M = Metrics;
  static const std::vector<MetricField> f = {
      {"ttft_ms", "ms", "time to first token", false, [](const M& m) { return m.ttft_ms; }},
      {"tpot_ms", "ms", "time per output token after the first", false,
       [](const M& m) { return m.tpot_ms; }},
      {"e2e_ms", "ms", "end-to-end request latency", false, [](const M& m) { return m.e2e_ms; }},
      {"itl_p50_ms", "ms", "inter-token latency, median", false,
       [](const M& m) { return m.itl_ms.p50; }},
      {"itl_p95_ms", "ms", "inter-token latency, 95th percentile", false,
       [](const M& m) { return m.itl_ms.p95; }},
      {"itl_p99_ms", "ms", "inter-token latency, 99th percentile", false,
       [](const M& m) { return m.itl_ms.p99; }},
      {"prefill_tokens_per_s", "token/s", "prompt tokens / prefill time", true,
       [](const M& m) { return m.prefill_tokens_per_s; }},
      {"decode_tokens_per_s", "token/s", "generated tokens / decode time", true,
       [](const M& m) { return m.decode_tokens_per_s; }},
      {"mfu", "1", "model FLOPs utilization (prefill + decode)", true,
       [](const M& m) { return m.mfu; }},
      {"mbu", "1", "memory bandwidth utilization (decode)", true, [](const M& m) { return m.mbu; }},
  };
  return f;
}

const MetricField* find_metric_field(const std::string& name) {
  for (const auto& f : metric_fields())
    if (name == f.name || name + "_ms" == f.name) return &f;
  return nullptr;
}

}  // namespace latprof
