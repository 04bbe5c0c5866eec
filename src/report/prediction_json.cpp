// A roofline prediction written in the run report's shape (`latprof roofline --json`), so that
// compare, plot and roofline --from read it as they read a run. The roofline computes the
// prediction; only the report knows its JSON (schema version, row fields).
#include <cmath>

#include "report/report.hpp"
#include "roofline/predict.hpp"

namespace latprof {

namespace {

// JSON has no NaN or Infinity: write null.
nlohmann::json num(double v) {
  return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json();
}

}  // namespace

nlohmann::json prediction_json(const Prediction& pr, const std::vector<std::string>& argv) {
  const Scenario& s = pr.scenario;
  nlohmann::json j;
  j["schema_version"] = kSchemaVersion;
  j["kind"] = "prediction";
  j["run"] = {{"model", s.model.name},
              {"dtype", s.precision.name()},
              {"weight_bytes_per_element", s.precision.weight_bytes},
              {"scale_bytes_per_row", s.precision.scale_bytes},
              {"act_bytes", s.precision.act_bytes},
              {"kv_bytes", s.precision.kv_bytes},
              {"backend", "none (roofline prediction from the cost model)"},
              {"device", s.ceilings.device},
              {"input_tokens", s.input},
              {"output_tokens", s.output},
              {"batch", s.batch},
              {"argv", argv}};
  j["model"] = model_to_json(s.model);
  j["ceilings"] = ceilings_to_json(s.ceilings);
  j["metrics"] = nlohmann::json::object();  // nothing measured: see floor and expected
  auto row = [&](const std::string& stage, const std::string& name, int64_t calls, const Cost& cost,
                 const RooflinePoint& f, double exp_ms, double peak, double ridge) {
    Row r;
    r.stage = stage;
    r.name = name;
    r.calls = calls;
    r.cost = cost;
    r.arithmetic_intensity = cost.intensity();
    r.floor_ms = f.floor_ms;
    r.bound = cost.bytes() > 0 || cost.flops > 0 ? f.bound : "";
    nlohmann::json o = row_to_json(r);
    for (const char* k : {"time_ms", "time_min_ms", "time_max_ms", "share", "achieved_flops_per_s",
                          "achieved_bytes_per_s", "roofline_fraction", "mfu", "mbu"})
      o[k] = nullptr;  // nothing was measured
    o["compute_ms"] = num(f.compute_ms);
    o["memory_ms"] = num(f.memory_ms);
    o["expected_ms"] = num(exp_ms);
    if (peak > 0) o["peak_flops_per_s"] = peak;
    if (ridge > 0) o["ridge_flops_per_byte"] = ridge;
    return o;
  };
  double pre_exp = 0, dec_exp = 0;
  j["ops"] = nlohmann::json::array();
  for (const auto& o : pr.ops) {
    j["ops"].push_back(row(o.stage, op_name(o.op), o.calls, o.cost, o.floor, o.expected_ms,
                           o.peak_flops_per_s, o.ridge));
    if (o.stage == "prefill") pre_exp += o.expected_ms;
    if (o.stage == "decode") dec_exp += o.expected_ms;
  }
  const int64_t steps = s.output - 1;
  j["stages"] = nlohmann::json::array();
  j["stages"].push_back(row("", "prefill", 1, pr.prefill_cost, pr.prefill_floor, pre_exp, 0, 0));
  if (steps > 0)
    j["stages"].push_back(row("", "decode", steps, pr.decode_cost, pr.decode_floor,
                              dec_exp + double(steps) * pr.efficiency.step_overhead_ms, 0, 0));
  j["stages"].push_back(row("", "sample", s.output, pr.sample_cost, pr.sample_floor,
                            pr.ops.back().expected_ms, 0, 0));
  for (auto& st : j["stages"]) st.erase("stage");
  j["floor"] = times_json(pr.floor);
  j["floor"]["definition"] =
      "each op's max(FLOPs / peak, bytes / bandwidth), summed; the fastest physics allows";
  j["expected"] = times_json(pr.expected);
  j["expected"]["definition"] =
      "each op's max(FLOPs / (peak x compute), bytes / (bandwidth x memory)) + step overhead";
  j["efficiency"] = efficiency_json(pr.efficiency);
  j["memory"] = {{"weight_bytes", pr.weight_bytes},
                 {"kv_cache_bytes", pr.kv_cache_bytes},
                 {"kv_bytes_per_token", kv_bytes_per_token(s.model, s.precision)},
                 {"working_set_bytes", pr.working_set_bytes},
                 {"device_memory_bytes", s.ceilings.memory_bytes},
                 {"fits", pr.fits},
                 {"max_batch", pr.max_batch},
                 {"note",
                  "weights + KV cache only; activations and framework workspace are not "
                  "counted"}};
  auto or_null = [](int64_t v) { return v > 0 ? nlohmann::json(v) : nlohmann::json(); };
  j["compute_bound"] = {
      {"decode_linear_layers_batch", or_null(pr.linear_compute_bound_batch)},
      {"decode_step_batch", or_null(pr.step_compute_bound_batch)},
      {"search_limit_batch", pr.search_limit_batch},
      {"prefill_input_tokens", or_null(pr.prefill_compute_bound_input)},
      {"note",
       "smallest batch (decode at context = input) or prompt length (prefill at this "
       "batch) whose compute floor exceeds its memory floor; null: not reached"}};
  j["flops_convention"] = {
      {"flops", "executed: causal attention counts only the lower triangle"},
      {"model_flops",
       "MFU convention: 2 x matmul parameters per token + 4 x n_layers x q_dim x "
       "context (full, non-causal attention)"}};
  return j;
}

}  // namespace latprof
