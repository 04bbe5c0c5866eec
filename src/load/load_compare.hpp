#pragma once
// `latprof compare` of load reports (`latprof load --json`): each point's latency percentiles,
// throughput and failures against the first report's, with the same noise rule as run reports
// (a difference within 2 standard deviations of the difference is noise) and the same
// regression gate. The spread of a percentile is its bootstrap standard error over the report's
// own requests (200 resamples), so a p99 of 50 requests is known to be shakier than a median.
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace latprof::load {

// True when the file is a regular file holding a latprof load report (JSON with "kind": "load");
// false for anything else (a run report, a pipe, or unreadable: the run-report reader then
// reads it and says why).
bool is_load_report(const std::string& path);

struct LoadCompareOptions {
  std::vector<std::string> labels;  // one per report
  std::string gate_metric = "e2e_p50";
  double fail_if_slower_pct = -1;  // < 0: no gate
};

struct LoadComparison {
  nlohmann::json json;  // kind "latprof-compare-load"
  std::string text, markdown;
  std::string gate_failure;  // "" unless the gate failed
};

// Throws UsageError for a file that is not a load report, mismatched labels or an unknown gate
// metric (the names: ttft_p50, ttft_p99, tpot_p50, tpot_p99, itl_p50, itl_p99, e2e_p50, e2e_p99,
// client_queue_p99, output_tokens_per_s, request_throughput, goodput, requests_failed; e2e, ttft,
// tpot, itl and the run reports' e2e_ms, ttft_ms, tpot_ms name the medians).
LoadComparison compare_load_reports(const std::vector<std::string>& paths,
                                    const LoadCompareOptions& o);

}  // namespace latprof::load
