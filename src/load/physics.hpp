#pragma once
// The physical floor of each request of a load run (`latprof load --cost-model`): the roofline
// floor of its prefill and of its decode steps at batch 1 (src/roofline), on the device the
// server runs on, and how far above it the request was.
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "load/client.hpp"
#include "load/load_report.hpp"
#include "roofline/predict.hpp"

namespace latprof::load {

struct PhysicsOptions {
  std::string cost_model;  // a built-in model name or a model config .json ("" : no physics)
  std::string dtype = "fp16", kv_dtype = "fp16", act_dtype = "fp16";
  std::string hw, hw_file;
  // Instead of the four above: a `latprof run --json` report of the server's engine, whose
  // model, weight precision and measured ceilings give the floor.
  std::string engine_report;
};

class Physics {
 public:
  // UsageError for an unknown model, precision or device.
  explicit Physics(const PhysicsOptions& o);
  // The floor of one request of `input` prompt and `output` generated tokens at batch 1;
  // nullopt when it does not fit the cost model's context.
  std::optional<Times> floor(int64_t input, int64_t output);
  nlohmann::json describe() const;  // cost_model, dtype, kv_dtype, hw

  // A successful request's floor and excess: floor_ms {prefill (to the first token), decode,
  // e2e}, e2e_over_floor, and the excess split: scheduling (the server's queue), kernels and
  // batching (the server's prefill + decode beyond the floor), outside the engine (the rest).
  nlohmann::json request_json(const RequestResult& r);
  // Distributions over the successful requests of a run.
  nlohmann::json summary_json(const RunResult& run);

 private:
  PhysicsOptions o_;
  Scenario base_;
  std::string act_dtype_;
  std::map<std::pair<int64_t, int64_t>, std::optional<Times>> memo_;
};

}  // namespace latprof::load
