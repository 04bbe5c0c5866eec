#include "load/physics.hpp"

#include <cmath>

#include "core/utf8.hpp"
#include "model/config.hpp"
#include "report/report.hpp"
#include "roofline/flags.hpp"

namespace latprof::load {

Physics::Physics(const PhysicsOptions& o) : o_(o) {
  if (!o.engine_report.empty()) {
    const RunReport r = load_report(o.engine_report);
    base_.model = model_from_json(r.model_config, o.engine_report + ": model_config");
    // the CPU backend computes in FP32, the CUDA backend in FP16
    act_dtype_ = r.run.backend == "cuda" ? "fp16" : "fp32";
    base_.precision = run_precision(r.run, act_dtype_);
    base_.ceilings = r.ceilings;
    o_.dtype = r.run.dtype;
    o_.kv_dtype = kv_dtype_of(r.run);
    o_.act_dtype = act_dtype_;
    base_.input = base_.output = base_.batch = 1;
    return;
  }
  ScenarioFlags f;
  f.model = o.cost_model;
  f.dtype = o.dtype;
  f.kv_dtype = o.kv_dtype;
  f.act_dtype = o.act_dtype;
  f.hw = o.hw;
  f.hw_file = o.hw_file;
  f.input = 1;
  f.output = 1;
  base_ = make_scenario(f);  // validates the model, precisions and device
}

std::optional<Times> Physics::floor(int64_t input, int64_t output) {
  const auto key = std::make_pair(input, output);
  if (auto it = memo_.find(key); it != memo_.end()) return it->second;
  std::optional<Times> t;
  if (input >= 1 && output >= 1 && input + output <= base_.model.max_seq_len) {
    Scenario s = base_;
    s.input = input;
    s.output = output;
    s.batch = 1;
    t = floor_times(s);
  }
  memo_[key] = t;
  return t;
}

nlohmann::json Physics::describe() const {
  return {{"cost_model", base_.model.name},
          {"dtype", o_.dtype},
          {"kv_dtype", o_.kv_dtype},
          {"act_dtype", o_.act_dtype},
          {"hw", base_.ceilings.device},
          {"batch", 1},
          {"engine_report", o_.engine_report.empty()
                                ? nlohmann::json()
                                : nlohmann::json(utf8_sanitize(o_.engine_report))}};
}

namespace {

struct Excess {
  double floor_e2e = 0, over = 0;
  std::optional<double> scheduling, kernels, outside;
};

}  // namespace

nlohmann::json Physics::request_json(const RequestResult& r) {
  if (!r.ok()) return nullptr;
  const RequestRecord rec = to_record(r);
  const auto t = floor(rec.input_tokens, rec.output_tokens);
  if (!t) return nullptr;
  const double e2e = rec.e2e_ms();
  const Chain c = request_chain(r);
  // chain indices: 3 queue, 5 prefill, 6 decode (Chain::kParts)
  nlohmann::json split = {
      {"scheduling", nullptr}, {"kernels_and_batching", nullptr}, {"outside_engine", nullptr}};
  const double excess = e2e - t->e2e_ms;
  if (c.ms[5] && c.ms[6]) {
    const double engine = *c.ms[5] + *c.ms[6];
    const double queue = c.ms[3].value_or(0.0);
    split["scheduling"] = c.ms[3] ? nlohmann::json(queue) : nlohmann::json();
    split["kernels_and_batching"] = engine - t->e2e_ms;
    split["outside_engine"] = excess - (engine - t->e2e_ms) - queue;
  }
  return {{"floor_ms", {{"prefill", t->ttft_ms}, {"decode", t->decode_ms}, {"e2e", t->e2e_ms}}},
          {"above_floor_ms", excess},
          {"e2e_over_floor", t->e2e_ms > 0 ? nlohmann::json(e2e / t->e2e_ms) : nlohmann::json()},
          {"excess_ms", split}};
}

nlohmann::json Physics::summary_json(const RunResult& run) {
  std::vector<double> floor_e2e, over, ratio, sched, kern, outside;
  for (const RequestResult& r : run.requests) {
    const nlohmann::json j = request_json(r);
    if (j.is_null()) continue;
    floor_e2e.push_back(j["floor_ms"]["e2e"].get<double>());
    over.push_back(j["above_floor_ms"].get<double>());
    if (j["e2e_over_floor"].is_number()) ratio.push_back(j["e2e_over_floor"].get<double>());
    const auto& x = j["excess_ms"];
    if (x["scheduling"].is_number()) sched.push_back(x["scheduling"].get<double>());
    if (x["kernels_and_batching"].is_number())
      kern.push_back(x["kernels_and_batching"].get<double>());
    if (x["outside_engine"].is_number()) outside.push_back(x["outside_engine"].get<double>());
  }
  auto dist = [](const std::vector<double>& v) {
    return v.empty() ? nlohmann::json() : percentiles_to_json(percentiles(v));
  };
  nlohmann::json j = describe();
  j["requests"] = int64_t(floor_e2e.size());
  j["floor_e2e_ms"] = dist(floor_e2e);
  j["above_floor_ms"] = dist(over);
  j["e2e_over_floor"] = dist(ratio);
  j["excess_ms"] = {{"scheduling", dist(sched)},
                    {"kernels_and_batching", dist(kern)},
                    {"outside_engine", dist(outside)}};
  return j;
}

}  // namespace latprof::load
