#pragma once
// The flags `latprof roofline` and `latprof check` share: model, precisions, device, lengths.
#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>
#include <vector>

#include "roofline/hardware.hpp"
#include "roofline/predict.hpp"

namespace latprof {

struct ScenarioFlags {
  std::string model = kDefaultModel;
  std::string dtype = "fp16";
  std::string kv_dtype = "fp16";
  std::string act_dtype = "fp16";
  std::string hw, hw_file;
  int64_t input = 500;
  int64_t output = 200;
  int64_t batch = 1;
  Efficiency efficiency;        // memory, compute (step overhead: from step_overhead_us)
  double step_overhead_us = 0;  // --step-overhead-us
  // The factors with the overhead converted to ms.
  Efficiency factors() const {
    Efficiency e = efficiency;
    e.step_overhead_ms = step_overhead_us / 1e3;
    return e;
  }
};

// Registers --model --dtype --kv-dtype --act-dtype --hw --hw-file --input --output --batch and,
// when `efficiency` is set, --mem-efficiency --compute-efficiency --step-overhead-us.
void add_scenario_flags(CLI::App* sub, ScenarioFlags& f, bool efficiency);
// Resolves the model, precision and device; validates lengths and factors (UsageError).
Scenario make_scenario(const ScenarioFlags& f, HardwareSpec* spec = nullptr);
void validate_efficiency(const Efficiency& e);
// The flags as given, for the JSON's run.argv.
std::vector<std::string> scenario_argv(const std::string& command, const ScenarioFlags& f);

}  // namespace latprof
