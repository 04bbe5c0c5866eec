#pragma once
// Printers of a load report (the JSON of load.cpp, one result for every printer): a
// Chrome/Perfetto trace with a track per request, and one JSON line per run for time series.
#include <nlohmann/json.hpp>
#include <string>

namespace latprof::load {

// Trace events (JSON object format): per point a process, per request a thread with its client
// queue, its wait for the first token, its streaming and an instant per content chunk (failed
// requests: one slice named after the error); counters of requests in flight and of the
// server's /metrics gauges.
nlohmann::json load_trace_json(const nlohmann::json& report);

// A self-contained HTML page (inline SVG): the points' summary table, latency against rate or
// concurrency for a sweep, TTFT and ITL histograms, requests in flight and the server's
// running/waiting over time (load_html.cpp).
std::string load_html(const nlohmann::json& report);

// One line: the report without its per-request records.
std::string load_jsonl_line(const nlohmann::json& report);

}  // namespace latprof::load
