#pragma once
// Reports side by side: metrics, stages and ops of each report against the first (the baseline),
// with the difference, the speed-up, whether the difference is within run-to-run noise, the
// bound of each stage, a one-line verdict per report, and the regression gate.
//
// Noise rule. Each compared value v carries a run-to-run standard deviation sigma:
//  - e2e_ms: metrics.e2e_repeats_ms.stddev (over the repeats);
//  - every other metric: v * e2e_repeats_ms.stddev / e2e_repeats_ms.mean (the request's relative
//    spread applied to the metric);
//  - a stage or op row: (time_max_ms - time_min_ms) / d2(n), n = run.repeat, where d2(n) is the
//    expected range of n standard normal samples (computed, so sigma is the range-based estimate
//    of the standard deviation).
// A difference d = v_later - v_first is noise when |d| <= 2 * sqrt(sigma_first^2 + sigma_later^2)
// (within two standard deviations of the difference). A report with fewer than 2 repeats, or a
// row whose fastest and slowest repeats are equal (one sample, e.g. decode ops under CUDA
// graphs), has no known spread: its differences are never called noise, and a warning says so.
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "report/report.hpp"

namespace latprof {

struct CompareOptions {
  std::vector<std::string> labels;     // one per report (file names, dtypes); empty: the dtypes
  std::string gate_metric = "e2e_ms";  // a metric_fields() name; "e2e", "ttft", "tpot" accepted
  double fail_if_slower_pct = -1;      // < 0: no regression gate
};

// One value of one report.
struct CompareCell {
  bool present = false;
  double value = 0;
  double sigma = 0;  // run-to-run standard deviation, same unit as value
  bool sigma_known = false;
  std::string bound;  // stages and ops: "compute", "memory" or ""
  double roofline_fraction = 0;
};

// A later report's value against the baseline's.
struct CompareDelta {
  bool present = false;  // both reports have the value
  double diff = 0;       // later - baseline
  double rel = 0;        // diff / baseline (NaN when the baseline is 0)
  double speedup = 0;    // > 1: the later report is better (NaN when undefined)
  bool noise = false;    // |diff| <= 2 sqrt(sigma_a^2 + sigma_b^2), both spreads known
  bool spread_known = false;
  bool bound_changed = false;
};

struct CompareLine {
  std::string stage;  // ops: the stage they ran in
  std::string name;   // metric field name, stage name or op name
  std::string unit;
  bool higher_is_better = false;
  std::vector<CompareCell> cells;    // per report
  std::vector<CompareDelta> deltas;  // per report; deltas[0] is the baseline against itself
};

struct CompareGate {
  bool enabled = false;
  std::string metric;
  double limit_pct = 0;
  std::vector<double> slower_pct;  // per report (0 for the baseline); > 0: slower / worse
  std::vector<bool> failed;
  bool any_failed() const;
};

struct Comparison {
  std::vector<std::string> labels;
  std::vector<RunInfo> runs;
  std::vector<std::string> warnings;  // what differs between the reports, missing spreads
  std::vector<CompareLine> metrics, stages, ops;
  std::vector<std::string> verdicts;  // one per later report
  CompareGate gate;
};

// Throws UsageError for fewer than 2 reports, a label count that does not match or an unknown
// gate metric.
Comparison compare_reports(const std::vector<RunReport>& reports, const CompareOptions& o = {});

std::string compare_text(const Comparison& c);      // aligned tables for a terminal
std::string compare_markdown(const Comparison& c);  // GitHub-flavoured Markdown tables
nlohmann::json compare_json(const Comparison& c);
// The regression gate's message ("" when it passed or is off).
std::string gate_failure_message(const Comparison& c);

// For `latprof run --dtype fp16,int8`: the same in one call.
std::string compare_text(const std::vector<RunReport>& r, const CompareOptions& o = {});
nlohmann::json compare_json(const std::vector<RunReport>& r, const CompareOptions& o = {});

// d2(n): expected range of n independent standard normal samples (n >= 2), by quadrature.
double expected_normal_range(int n);

}  // namespace latprof
