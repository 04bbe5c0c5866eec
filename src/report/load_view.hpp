#pragma once
// The load mode's records (`run --requests`: report.requests, report.summary) as the printers read
// them back from the report's JSON, so a report loaded from a file prints like a fresh one. The
// figures are the report's own (report/requests.hpp computes them); nothing is derived here.
#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "report/report.hpp"

namespace latprof {

// One request of report.requests; a null or absent number reads as NaN.
struct RequestView {
  static constexpr double kNone = std::numeric_limits<double>::quiet_NaN();
  int64_t id = 0, input_tokens = 0, output_tokens = 0;
  double arrival_ms = kNone, queue_ms = kNone, ttft_ms = kNone, tpot_ms = kNone, e2e_ms = kNone;
  std::vector<double> itl_ms;  // gaps between successive tokens
  int64_t preemptions = 0, prefix_hit_tokens = 0;
  std::optional<bool> slo_met;
  // The four latency classes (README, "Latency classes"); NaN when the report has none.
  double compute_ms = kNone, memory_ms = kNone, communication_ms = kNone, scheduling_ms = kNone;
};

// True for a `run --requests` report: report.requests is an array.
bool is_load_report(const RunReport& r);
std::vector<RequestView> request_views(const RunReport& r);
// A distribution object of the summary (report.summary[key], or one level down with `sub`);
// count 0 when null or absent.
Percentiles summary_distribution(const RunReport& r, const char* key, const char* sub = nullptr);
// A number of the summary; NaN when null or absent.
double summary_number(const RunReport& r, const char* key);

}  // namespace latprof
