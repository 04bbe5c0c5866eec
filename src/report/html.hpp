#pragma once
// A self-contained HTML report (no network: inline CSS, inline SVG, one small inline script).
#include <string>

#include "report/report.hpp"

namespace latprof {

// Sections: headline metrics; the stage breakdown as a stacked bar (svg#stage-bar); per-token
// decode latency over the decode as a line chart (svg#decode-chart); the percentiles table; the
// roofline chart (roofline_svg, in div#roofline); stage and op tables; checks and notes.
// Load mode (`run --requests`) replaces the single-request sections (headline cards, decode chart,
// percentiles) with: the summary's headline figures (div#load-metrics), its distributions
// (table#load-summary), histograms of TTFT per request (svg#ttft-hist) and of every token gap
// (svg#itl-hist) with the report's p50 and p99 marked, the mean latency classes as a stacked bar
// (svg#class-bar, table#class-table), prefill and decode tokens per engine step over time
// (svg#batch-chart) and KV-cache use over time (svg#kv-chart); then the stage bar and the rest.
// The inline script sets data-latprof-ready="1" and data-latprof-charts="<svg count>" on <html>
// once it ran, and counts uncaught errors in data-latprof-js-errors (a test reads these).
std::string report_html(const RunReport& r);

// Text made safe for HTML element content and attribute values.
std::string html_escape(const std::string& s);

}  // namespace latprof
