#include "roofline/flags.hpp"

#include <cmath>

#include "core/error.hpp"
#include "core/input_file.hpp"

namespace latprof {

void add_scenario_flags(CLI::App* sub, ScenarioFlags& f, bool efficiency) {
  sub->add_option("--model,-m", f.model, "Built-in model name or a model config .json")
      ->capture_default_str();
  sub->add_option("--dtype", f.dtype,
                  "Weights: fp16, int8 (weight-only, W8A16) or int8-w8a8 (INT8 tensor peak)")
      ->capture_default_str();
  sub->add_option("--kv-dtype", f.kv_dtype, "KV cache: fp16, bf16 (2 bytes), int8 or fp32")
      ->capture_default_str();
  sub->add_option("--act-dtype", f.act_dtype, "Activations: fp16 or fp32")->capture_default_str();
  sub->add_option("--hw", f.hw,
                  "Device from the database (latprof hw --list); cpu-local probes "
                  "this machine");
  sub->add_option("--hw-file", f.hw_file, "A hardware JSON file (see latprof hw --save)");
  sub->add_option("--input,-i", f.input, "Prompt tokens per sequence")->capture_default_str();
  sub->add_option("--output", f.output,
                  "Generated tokens per sequence (the first comes from "
                  "prefill)")
      ->capture_default_str();
  sub->add_option("--batch,-b", f.batch, "Sequences decoded together")->capture_default_str();
  if (efficiency) {
    sub->add_option("--mem-efficiency", f.efficiency.memory,
                    "Expected fraction of peak memory bandwidth")
        ->capture_default_str();
    sub->add_option("--compute-efficiency", f.efficiency.compute,
                    "Expected fraction of peak tensor FLOP/s")
        ->capture_default_str();
    sub->add_option("--step-overhead-us", f.step_overhead_us,
                    "Fixed time per decode step in microseconds (launch gaps)")
        ->capture_default_str();
  }
}

void validate_efficiency(const Efficiency& e) {
  if (!(e.memory > 0 && e.memory <= 1))
    usage_error("--mem-efficiency must be in (0, 1] (got " + std::to_string(e.memory) + ")");
  if (!(e.compute > 0 && e.compute <= 1))
    usage_error("--compute-efficiency must be in (0, 1] (got " + std::to_string(e.compute) + ")");
  if (!(e.step_overhead_ms >= 0) || !std::isfinite(e.step_overhead_ms))
    usage_error("--step-overhead-us must be zero or positive");
}

Scenario make_scenario(const ScenarioFlags& f, HardwareSpec* spec) {
  Scenario s;
  if (f.model.find('/') != std::string::npos || f.model.ends_with(".json"))
    check_input_path(f.model, "--model");
  s.model = find_model(f.model);
  s.precision = precision_from_flags(f.dtype, f.kv_dtype, f.act_dtype);
  s.ceilings = resolve_ceilings(f.hw, f.hw_file, spec);
  s.input = f.input;
  s.output = f.output;
  s.batch = f.batch;
  validate_scenario(s);
  validate_efficiency(f.factors());
  return s;
}

std::vector<std::string> scenario_argv(const std::string& command, const ScenarioFlags& f) {
  std::vector<std::string> a = {"latprof", command,      "--model",  f.model,       "--dtype",
                                f.dtype,   "--kv-dtype", f.kv_dtype, "--act-dtype", f.act_dtype};
  if (!f.hw.empty()) a.insert(a.end(), {"--hw", f.hw});
  if (!f.hw_file.empty()) a.insert(a.end(), {"--hw-file", f.hw_file});
  a.insert(a.end(), {"--input", std::to_string(f.input), "--output", std::to_string(f.output),
                     "--batch", std::to_string(f.batch)});
  return a;
}

}  // namespace latprof
