#include "report/html.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "core/format.hpp"
#include "core/xml.hpp"
#include "report/plot.hpp"
#include "report/report_fields.hpp"

namespace latprof {

std::string html_escape(const std::string& s) {
  return xml_escape(s);
}

namespace {

std::string f2(double v) {
  return std::isfinite(v) ? fmt_fixed(v, 2) : "0";
}

std::string pct_or_dash(double v) {
  return v > 0 ? fmt_pct(v) : "-";
}

// Stage colours, in the runner's stage order; others cycle.
const char* colour(size_t i) {
  static const char* const c[] = {"#8c8c8c", "#4e79a7", "#f28e2b", "#59a14f",
                                  "#b07aa1", "#e15759", "#76b7b2", "#edc948"};
  return c[i % (sizeof c / sizeof c[0])];
}

// A linear axis from `lo` to `hi` with ticks at multiples of 1, 2 or 5 times a power of ten,
// about `n` of them; its range runs from the tick at or below lo to the tick at or above hi, so it
// always covers [lo, hi].
struct Axis {
  double lo = 0, hi = 1;
  std::vector<double> ticks;
};

Axis nice_axis(double lo, double hi, int n) {
  if (!std::isfinite(lo) || !std::isfinite(hi)) lo = 0, hi = 1;
  if (!(hi > lo)) hi = lo + (lo != 0 ? std::fabs(lo) : 1.0);  // one value: room above it
  const double raw = (hi - lo) / std::max(1, n);
  const double p = std::pow(10.0, std::floor(std::log10(raw)));
  double step = 10 * p;
  for (double m : {1.0, 2.0, 5.0})
    if (m * p >= raw * (1 - 1e-9)) {
      step = m * p;
      break;
    }
  const double first = std::floor(lo / step + 1e-9), last = std::ceil(hi / step - 1e-9);
  Axis a;
  a.lo = first * step;
  a.hi = last * step;
  for (double k = first; k <= last + 1e-9; k += 1) a.ticks.push_back(k * step);
  return a;
}

std::string tick_label(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%g", v);
  return b;
}

// The stages as one horizontal stacked bar of end-to-end time, with a legend.
std::string stage_bar(const RunReport& r) {
  const double W = 900, H = 40, top = 10;
  double total = 0;
  for (const auto& s : r.stages) total += std::max(0.0, s.time_ms);
  std::string svg =
      "<svg id=\"stage-bar\" class=\"chart\" xmlns=\"http://www.w3.org/2000/svg\" "
      "viewBox=\"0 0 " +
      f2(W) + " " + f2(top + H + 20 * double(r.stages.size()) + 10) +
      "\" role=\"img\" aria-label=\"stage breakdown\">";
  double x = 0;
  for (size_t i = 0; i < r.stages.size(); ++i) {
    const Row& s = r.stages[i];
    const double w = total > 0 ? std::max(0.0, s.time_ms) / total * W : 0;
    svg += "<rect class=\"stage\" data-stage=\"" + html_escape(s.name) + "\" x=\"" + f2(x) +
           "\" y=\"" + f2(top) + "\" width=\"" + f2(w) + "\" height=\"" + f2(H) + "\" fill=\"" +
           colour(i) + "\"><title>" + html_escape(s.name) + ": " + fmt_ms(s.time_ms) + " (" +
           fmt_pct(s.share) + ")</title></rect>";
    x += w;
  }
  for (size_t i = 0; i < r.stages.size(); ++i) {
    const Row& s = r.stages[i];
    const double y = top + H + 16 + 20 * double(i);
    svg += "<rect x=\"0\" y=\"" + f2(y - 11) + "\" width=\"12\" height=\"12\" fill=\"" + colour(i) +
           "\"/><text x=\"18\" y=\"" + f2(y) + "\">" + html_escape(s.name) + ": " +
           fmt_ms(s.time_ms) + ", " + fmt_pct(s.share) + " of end-to-end" +
           (s.bound.empty() ? "" : ", " + s.bound + "-bound") + "</text>";
  }
  return svg + "</svg>";
}

// Per-token decode latency (ms) against the decode step. The y axis starts at 0 (or below the
// smallest value) and ends at the first tick at or above the largest, so every point is inside
// the plot area; a value that is not a number is left out of the line and the points.
std::string decode_chart(const RunReport& r) {
  const std::vector<double>& v = r.decode_step_ms;
  if (v.empty()) return "<p class=\"empty\">No decode steps (one output token).</p>";
  const double W = 900, H = 320, L = 70, R = 20, T = 15, B = 45;
  const double pw = W - L - R, ph = H - T - B;
  double lo = 0, hi = 0;
  size_t shown = 0;
  for (double x : v)
    if (std::isfinite(x)) {
      lo = std::min(lo, x);
      hi = std::max(hi, x);
      ++shown;
    }
  const Axis ya = nice_axis(lo, hi, 5);
  const double n = double(v.size());
  auto px = [&](size_t i) { return L + (n > 1 ? double(i) / (n - 1) : 0.5) * pw; };
  auto py = [&](double y) { return T + ph - (y - ya.lo) / (ya.hi - ya.lo) * ph; };
  std::string svg =
      "<svg id=\"decode-chart\" class=\"chart\" xmlns=\"http://www.w3.org/2000/svg\" "
      "viewBox=\"0 0 " +
      f2(W) + " " + f2(H) +
      "\" role=\"img\" aria-label=\"decode latency per token\" data-points=\"" +
      std::to_string(shown) + "\">";
  svg += "<rect class=\"plot-area\" x=\"" + f2(L) + "\" y=\"" + f2(T) + "\" width=\"" + f2(pw) +
         "\" height=\"" + f2(ph) + "\" fill=\"none\"/>";
  for (double t : ya.ticks) {
    svg += "<line class=\"grid\" x1=\"" + f2(L) + "\" x2=\"" + f2(L + pw) + "\" y1=\"" + f2(py(t)) +
           "\" y2=\"" + f2(py(t)) + "\"/><text class=\"tick ytick\" x=\"" + f2(L - 6) + "\" y=\"" +
           f2(py(t) + 4) + "\" text-anchor=\"end\" data-value=\"" + tick_label(t) + "\">" +
           tick_label(t) + "</text>";
  }
  for (double t : nice_axis(1, n, std::min<int>(10, int(v.size()))).ticks) {
    if (t < 1 || t > n || t != std::floor(t)) continue;
    const double x = px(size_t(t) - 1);
    svg += "<text class=\"tick xtick\" x=\"" + f2(x) + "\" y=\"" + f2(T + ph + 18) +
           "\" text-anchor=\"middle\">" + tick_label(t) + "</text>";
  }
  svg += "<line class=\"axis\" x1=\"" + f2(L) + "\" x2=\"" + f2(L) + "\" y1=\"" + f2(T) +
         "\" y2=\"" + f2(T + ph) + "\"/><line class=\"axis\" x1=\"" + f2(L) + "\" x2=\"" +
         f2(L + pw) + "\" y1=\"" + f2(py(ya.lo)) + "\" y2=\"" + f2(py(ya.lo)) + "\"/>";
  svg += "<text class=\"label\" x=\"" + f2(L + pw / 2) + "\" y=\"" + f2(H - 6) +
         "\" text-anchor=\"middle\">decode step (generated token)</text>";
  svg += "<text class=\"label\" transform=\"rotate(-90)\" x=\"" + f2(-(T + ph / 2)) +
         "\" y=\"16\" text-anchor=\"middle\">forward time per token (ms)</text>";
  std::string pts;
  for (size_t i = 0; i < v.size(); ++i)
    if (std::isfinite(v[i])) pts += f2(px(i)) + "," + f2(py(v[i])) + " ";
  svg += "<polyline class=\"line\" fill=\"none\" points=\"" + pts + "\"/>";
  for (size_t i = 0; i < v.size(); ++i) {
    if (!std::isfinite(v[i])) continue;
    svg += "<circle class=\"pt\" cx=\"" + f2(px(i)) + "\" cy=\"" + f2(py(v[i])) +
           "\" r=\"3\" data-step=\"" + std::to_string(i + 1) + "\" data-ms=\"" +
           nlohmann::json(v[i]).dump() + "\"><title>step " + std::to_string(i + 1) + ": " +
           fmt_ms(v[i]) + "</title></circle>";
  }
  return svg + "</svg>";
}

// The distribution's fields, in the report's order (report_fields.hpp): header or one row.
struct DistributionCells {
  std::string out;
  bool header = false;
  template <class T>
  void operator()(const char* name, const T& v, const fields::Spec&) {
    if (header)
      out += std::string("<th>") + (std::string(name) == "count" ? "samples" : name) + "</th>";
    else if constexpr (std::is_integral_v<T>)
      out += "<td>" + std::to_string(v) + "</td>";
    else
      out += "<td>" + fmt_ms(v) + "</td>";
  }
};

std::string percentile_row(const char* name, const Percentiles& p) {
  if (p.count == 0) return "";
  DistributionCells c;
  fields::describe(c, p);
  return "<tr><th>" + std::string(name) + "</th>" + c.out + "</tr>";
}

std::string percentile_header() {
  DistributionCells c{"", true};
  const Percentiles none;
  fields::describe(c, none);
  return "<thead><tr><th></th>" + c.out + "</tr></thead>";
}

std::string row_table(const std::vector<Row>& rows, bool ops) {
  std::string s = std::string("<table class=\"rows") + (ops ? " ops" : "") + "\"><thead><tr>";
  for (const char* h : {ops ? "stage" : "", ops ? "op" : "stage", "time", "share", "FLOPs", "bytes",
                        "FLOP/B", "bound", "MFU", "MBU", "roofline"})
    if (*h) s += std::string("<th>") + h + "</th>";
  s += "</tr></thead><tbody>";
  for (const Row& r : rows) {
    s += "<tr>";
    if (ops) s += "<td>" + html_escape(r.stage) + "</td>";
    s += "<td>" + html_escape(r.name) + "</td><td>" + fmt_ms(r.time_ms) + "</td><td>" +
         fmt_pct(r.share) + "</td><td>" + (r.cost.flops > 0 ? fmt_count(r.cost.flops) : "-") +
         "</td><td>" + (r.cost.bytes() > 0 ? fmt_bytes(r.cost.bytes()) : "-") + "</td><td>" +
         (r.arithmetic_intensity > 0 ? fmt_fixed(r.arithmetic_intensity, 2) : "-") + "</td><td>" +
         (r.bound.empty() ? "-" : r.bound) + "</td><td>" + pct_or_dash(r.mfu) + "</td><td>" +
         pct_or_dash(r.mbu) + "</td><td>" + pct_or_dash(r.roofline_fraction) + "</td></tr>";
  }
  return s + "</tbody></table>";
}

// The roofline SVG without an XML prolog or doctype, so that it can sit inside HTML.
std::string inline_svg(std::string svg) {
  const size_t at = svg.find("<svg");
  return at == std::string::npos ? std::string() : svg.substr(at);
}

const char* kStyle = R"(
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;margin:24px auto;max-width:960px;color:#222;padding:0 12px}
h1{font-size:22px;margin:0 0 4px}h2{font-size:17px;margin:28px 0 8px;border-bottom:1px solid #ddd;padding-bottom:4px}
.sub{color:#666;margin:0 0 12px}
.cards{display:flex;flex-wrap:wrap;gap:10px}.card{border:1px solid #ddd;border-radius:6px;padding:8px 12px;min-width:120px}
.card .v{font-size:18px;font-weight:600}.card .k{color:#666;font-size:12px}
table{border-collapse:collapse;font-variant-numeric:tabular-nums}td,th{padding:3px 10px;text-align:right;border-bottom:1px solid #eee}
th:first-child,td:first-child{text-align:left}table.ops td:nth-child(2),table.ops th:nth-child(2){text-align:left}
svg.chart{width:100%;height:auto;font-size:12px}svg text{fill:#333}
.grid{stroke:#eee}.axis{stroke:#888}.line{stroke:#4e79a7;stroke-width:2}.pt{fill:#4e79a7}.pt.hot{fill:#e15759}
#readout{color:#444;min-height:1.4em}.check-error{color:#b00}.check-warning{color:#a60}
footer{color:#888;margin-top:28px;font-size:12px}
)";

// Runs after the page is parsed; it only adds interaction, the charts are plain SVG.
const char* kScript = R"(
(function () {
  var root = document.documentElement;
  var pts = document.querySelectorAll('#decode-chart circle.pt');
  var out = document.getElementById('readout');
  pts.forEach(function (p) {
    p.addEventListener('mouseenter', function () {
      pts.forEach(function (q) { q.classList.remove('hot'); });
      p.classList.add('hot');
      if (out) out.textContent = 'step ' + p.dataset.step + ': ' + Number(p.dataset.ms).toFixed(3) + ' ms';
    });
  });
  root.setAttribute('data-latprof-charts', String(document.querySelectorAll('svg').length));
  root.setAttribute('data-latprof-decode-points', String(pts.length));
  root.setAttribute('data-latprof-ready', '1');
})();
)";

}  // namespace

std::string report_html(const RunReport& r) {
  const RunInfo& ri = r.run;
  const std::string title = "latprof: " + ri.model + " " + ri.dtype + " on " + ri.backend;
  std::string h;
  h += "<!DOCTYPE html>\n<html lang=\"en\" data-latprof-js-errors=\"0\"><head><meta "
       "charset=\"utf-8\">";
  h += "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">";
  h += "<title>" + html_escape(title) + "</title>";
  // First script: count uncaught errors of anything that follows.
  h += "<script>window.addEventListener('error',function(){var r=document.documentElement;"
       "r.setAttribute('data-latprof-js-errors',String(Number(r.getAttribute("
       "'data-latprof-js-errors')||0)+1));});</script>";
  h += "<style>" + std::string(kStyle) + "</style></head><body>";
  h += "<h1>" + html_escape(title) + "</h1>";
  h += "<p class=\"sub\">" + html_escape(ri.device) + "; input " + std::to_string(ri.input_tokens) +
       ", output " + std::to_string(ri.output_tokens) + ", batch " + std::to_string(ri.batch) +
       ", " + std::to_string(ri.repeat) + " repeat(s); " + html_escape(r.created_utc) + "</p>";

  h += "<div class=\"cards\" id=\"metrics\">";
  for (const auto& f : metric_fields()) {
    const double v = f.get(r.metrics);
    const std::string u = f.unit;
    const std::string text = u == "ms" ? fmt_ms(v) : u == "1" ? fmt_pct(v) : fmt_rate(v, "tok/s");
    h += "<div class=\"card\" data-metric=\"" + std::string(f.name) + "\"><div class=\"v\">" +
         html_escape(text) + "</div><div class=\"k\">" + f.name + ": " +
         html_escape(f.description) + "</div></div>";
  }
  h += "</div>";

  h += "<h2>Where the time goes</h2>" + stage_bar(r);
  h += "<h2>Per-token decode latency</h2>" + decode_chart(r) + "<p id=\"readout\"></p>";

  h += "<h2>Percentiles</h2><table id=\"percentiles\">" + percentile_header() + "<tbody>";
  h += percentile_row("inter-token latency", r.metrics.itl_ms);
  h += percentile_row("end-to-end over repeats", r.metrics.e2e_repeats_ms);
  h += "</tbody></table>";
  h += "<p>TTFT " + fmt_ms(r.metrics.ttft_ms) + ", TPOT " + fmt_ms(r.metrics.tpot_ms) + ", E2E " +
       fmt_ms(r.metrics.e2e_ms) + " (median repeat).</p>";

  h += "<h2>Roofline</h2><div id=\"roofline\">" + inline_svg(roofline_svg(r)) + "</div>";
  h += "<p>Ceilings: memory " + fmt_rate(r.ceilings.mem_bw_bytes_per_s, "B/s") + ", compute " +
       fmt_rate(r.ceilings.matmul_flops_per_s, "FLOP/s") + " (" + html_escape(r.ceilings.source) +
       ").</p>";

  h += "<h2>Stages</h2>" + row_table(r.stages, false);
  if (!r.ops.empty()) h += "<h2>Operations</h2>" + row_table(r.ops, true);

  if (!r.checks.empty() || !r.notes.empty()) {
    h += "<h2>Checks and notes</h2><ul>";
    for (const auto& c : r.checks)
      h += "<li class=\"check-" + html_escape(c.level) + "\">" + html_escape(c.level) + ": " +
           html_escape(c.subject) + ": " + html_escape(c.message) + "</li>";
    for (const auto& n : r.notes) h += "<li>" + html_escape(n) + "</li>";
    h += "</ul>";
  }
  std::string commit = r.tool.is_object() ? r.tool.value("git_commit", "") : "";
  h += "<footer>latprof " + html_escape(r.tool.is_object() ? r.tool.value("version", "") : "") +
       (commit.empty() ? "" : " (" + html_escape(commit) + ")") + ", report schema " +
       kSchemaVersion + ". Times measured; FLOPs, bytes and floors from the cost model.</footer>";
  h += "<script>" + std::string(kScript) + "</script></body></html>\n";
  return h;
}

}  // namespace latprof
