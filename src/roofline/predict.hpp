#pragma once
// Roofline predictions from the cost model alone (nothing runs): per op and stage floors, TTFT /
// TPOT / E2E floors, memory fit, the batch where decode turns compute-bound, and an `expected`
// time from stated efficiency factors. The report writes a prediction as JSON (prediction_json in
// report/report.hpp); the roofline depends on nothing in src/report.
#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "model/config.hpp"
#include "model/cost_model.hpp"
#include "roofline/ceilings.hpp"

namespace latprof {

// What a request looks like: the model, its precisions, the device and the lengths.
struct Scenario {
  ModelConfig model;
  Precision precision;
  Ceilings ceilings;
  int64_t input = 0;   // prompt tokens per sequence
  int64_t output = 0;  // generated tokens per sequence (the first comes from prefill)
  int64_t batch = 1;   // sequences decoded together
};

// Efficiency factors for `expected`: each op's time is
//   max(FLOPs / (peak x compute), bytes / (bandwidth x memory)) + step_overhead_ms per decode step.
// Defaults and their justification: see efficiency_json() and README.md, "Efficiency factors of
// expected".
struct Efficiency {
  double memory = 0.70;           // achieved / peak memory bandwidth
  double compute = 0.60;          // achieved / peak tensor FLOP/s
  double step_overhead_ms = 0.0;  // per decode step (launch gaps, scheduler); 0: not modelled
};
nlohmann::json efficiency_json(const Efficiency& e);  // each factor with its justification

// The five headline times.
struct Times {
  double ttft_ms = 0;              // prefill + first sample
  double tpot_ms = 0;              // mean decode step (forward + sample), output-1 steps
  double e2e_ms = 0;               // ttft + all decode steps
  double prefill_ms = 0;           // prefill forward pass alone
  double decode_ms = 0;            // all decode steps
  double decode_tokens_per_s = 0;  // batch * (output - 1) / decode_ms
};
nlohmann::json times_json(const Times& t);

// One op of one stage. Decode ops are summed over all steps (calls = steps).
struct OpPrediction {
  std::string stage;  // "prefill", "decode", "sample"
  Op op = Op::embed;
  int64_t calls = 0;
  Cost cost;
  double peak_flops_per_s = 0;  // the roof this op runs under
  double ridge = 0;             // FLOP/byte where that roof meets the bandwidth roof
  RooflinePoint floor;
  double expected_ms = 0;
};

struct Prediction {
  Scenario scenario;
  Efficiency efficiency;
  std::vector<OpPrediction> ops;
  Cost prefill_cost, decode_cost, sample_cost;  // stage totals (sample: all sample calls)
  RooflinePoint prefill_floor, decode_floor, sample_floor;
  Times floor, expected;
  double weight_bytes = 0;    // all weights as stored
  double kv_cache_bytes = 0;  // batch x (input + output) tokens
  double working_set_bytes = 0;
  bool fits = false;      // weights + KV <= device memory
  int64_t max_batch = 0;  // largest batch whose weights + KV fit (0: the weights alone do not)
  // Smallest batch at which the decode step's linear layers are compute-bound, and the whole
  // step; 0 when it does not happen up to `search_limit_batch`.
  int64_t linear_compute_bound_batch = 0;
  int64_t step_compute_bound_batch = 0;
  int64_t search_limit_batch = 0;
  // Smallest prompt length at which this batch's prefill is compute-bound (0: not up to the
  // context window).
  int64_t prefill_compute_bound_input = 0;
};

// Throws UsageError for lengths outside the model's context window or non-positive values.
void validate_scenario(const Scenario& s);
Prediction predict(const Scenario& s, const Efficiency& e = {});
// Floors only, without the searches (for `check` and its what-ifs).
Times floor_times(const Scenario& s);
// Floor of one decode step at context ctx0 (forward + sample).
RooflinePoint decode_step_floor(const Scenario& s, int64_t ctx0);
// Weights + KV bytes, and the largest batch that fits in c.memory_bytes.
int64_t max_batch_that_fits(const Scenario& s);

// The names the CLI uses for precisions: weights fp16|int8|int8-w8a8, kv fp16|int8, act
// fp16|fp32. Throws UsageError naming the flag.
Precision precision_from_flags(const std::string& dtype, const std::string& kv_dtype,
                               const std::string& act_dtype);

}  // namespace latprof
