#include "report/html.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "core/format.hpp"
#include "core/xml.hpp"
#include "report/load_view.hpp"
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
// the plot area; a value that is not a number is left out of the line and the points. Where the
// steps measured their thread pool's time off the CPUs and some lost any, each step's is a bar
// from 0 on the same axis (class "offcpu").
std::string decode_chart(const RunReport& r) {
  const std::vector<double>& v = r.decode_step_ms;
  if (v.empty()) return "<p class=\"empty\">No decode steps (one output token).</p>";
  std::vector<double> off = decode_step_offcpu_ms(r);
  if (std::none_of(off.begin(), off.end(), [](double x) { return x > 0; })) off.clear();
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
  for (double x : off) hi = std::max(hi, x);
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
  if (!off.empty()) {
    const double bw = std::max(1.0, std::min(8.0, 0.6 * pw / n));
    for (size_t i = 0; i < off.size(); ++i) {
      if (!(off[i] > 0)) continue;
      svg += "<rect class=\"offcpu\" x=\"" + f2(px(i) - bw / 2) + "\" y=\"" + f2(py(off[i])) +
             "\" width=\"" + f2(bw) + "\" height=\"" + f2(py(0) - py(off[i])) + "\" data-step=\"" +
             std::to_string(i + 1) + "\"><title>step " + std::to_string(i + 1) + ": " +
             fmt_ms(off[i]) + " off the CPUs</title></rect>";
    }
    svg += "<text class=\"label offcpu-key\" x=\"" + f2(L + pw) + "\" y=\"" + f2(T + 12) +
           "\" text-anchor=\"end\">bars: the thread pool's time off its CPUs (steps[].offcpu_ms)"
           "</text>";
  }
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

// ---- load mode (`run --requests`) ------------------------------------------------------------

// A chart's frame: the plot area, grid, ticks (text.xtick / text.ytick with data-value), axes and
// labels. Charts draw inside [L, L + pw] x [T, T + ph].
struct Plot {
  double W = 900, H = 300, L = 70, R = 20, T = 28, B = 45;
  Axis xa, ya;
  int64_t xlabel_every = 1;  // label the x ticks at multiples of this many tick steps
  double pw() const { return W - L - R; }
  double ph() const { return H - T - B; }
  double px(double x) const { return L + (x - xa.lo) / (xa.hi - xa.lo) * pw(); }
  double py(double y) const { return T + ph() - (y - ya.lo) / (ya.hi - ya.lo) * ph(); }
  std::string open(const std::string& id, const std::string& aria, const std::string& xlabel,
                   const std::string& ylabel, const std::string& attrs) const {
    std::string s = "<svg id=\"" + id +
                    "\" class=\"chart\" xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 " +
                    f2(W) + " " + f2(H) + "\" role=\"img\" aria-label=\"" + html_escape(aria) +
                    "\"" + attrs + ">";
    s += "<rect class=\"plot-area\" x=\"" + f2(L) + "\" y=\"" + f2(T) + "\" width=\"" + f2(pw()) +
         "\" height=\"" + f2(ph()) + "\" fill=\"none\"/>";
    for (double t : ya.ticks)
      s += "<line class=\"grid\" x1=\"" + f2(L) + "\" x2=\"" + f2(L + pw()) + "\" y1=\"" +
           f2(py(t)) + "\" y2=\"" + f2(py(t)) + "\"/><text class=\"tick ytick\" x=\"" + f2(L - 6) +
           "\" y=\"" + f2(py(t) + 4) + "\" text-anchor=\"end\" data-value=\"" + tick_label(t) +
           "\">" + tick_label(t) + "</text>";
    const double step = xa.ticks.size() > 1 ? xa.ticks[1] - xa.ticks[0] : 1;
    for (double t : xa.ticks) {
      if (std::llround(t / step) % xlabel_every != 0) continue;
      s += "<text class=\"tick xtick\" x=\"" + f2(px(t)) + "\" y=\"" + f2(T + ph() + 18) +
           "\" text-anchor=\"middle\" data-value=\"" + tick_label(t) + "\">" + tick_label(t) +
           "</text>";
    }
    s += "<line class=\"axis\" x1=\"" + f2(L) + "\" x2=\"" + f2(L) + "\" y1=\"" + f2(T) +
         "\" y2=\"" + f2(T + ph()) + "\"/><line class=\"axis\" x1=\"" + f2(L) + "\" x2=\"" +
         f2(L + pw()) + "\" y1=\"" + f2(T + ph()) + "\" y2=\"" + f2(T + ph()) + "\"/>";
    s += "<text class=\"label\" x=\"" + f2(L + pw() / 2) + "\" y=\"" + f2(H - 6) +
         "\" text-anchor=\"middle\">" + html_escape(xlabel) + "</text>";
    s += "<text class=\"label\" transform=\"rotate(-90)\" x=\"" + f2(-(T + ph() / 2)) +
         "\" y=\"16\" text-anchor=\"middle\">" + html_escape(ylabel) + "</text>";
    return s;
  }
};

// A histogram of samples (ms): about 20 bins of equal width on a 1-2-5 grid, one rect.bin per
// non-empty bin (data-lo, data-hi, data-count), and the report's p50 and p99 as vertical
// line.marker. A long tail (the largest sample above 4x the report's p99, as when prefills stall
// decodes) would squash the rest into one bin: then the bins end at the first grid line at or above
// p99 and the samples beyond it are one rect.bin.overflow right of the plot, labelled "> X".
// The svg carries data-samples (finite samples), data-bins and data-overflow.
std::string histogram(const std::string& id, const std::string& what,
                      const std::vector<double>& samples, const Percentiles& p) {
  std::vector<double> v;
  for (double x : samples)
    if (std::isfinite(x)) v.push_back(x);
  if (v.empty()) return "<p class=\"empty\">No " + html_escape(what) + " samples.</p>";
  const auto [mn, mx] = std::minmax_element(v.begin(), v.end());
  const bool tail = p.count > 0 && std::isfinite(p.p99) && p.p99 > *mn && p.p99 < *mx / 4;
  const Axis bins = nice_axis(*mn, tail ? p.p99 : *mx, 20);
  const double edge = std::max(bins.hi, tail ? p.p99 : *mx);  // above it: the overflow bar
  const size_t nb = bins.ticks.size() - 1;
  const double width = (bins.hi - bins.lo) / double(nb);
  std::vector<int64_t> count(nb, 0);
  int64_t over = 0;
  for (double x : v) {
    if (x > edge) {
      ++over;
      continue;
    }
    ++count[std::min(nb - 1, size_t(std::max(0.0, std::floor((x - bins.lo) / width))))];
  }
  Plot pl;
  if (over > 0) pl.R = 110;  // room for the overflow bar
  // The x axis is the bins' own grid (so it ends where the bins do), labelled at about 8 of them.
  pl.xa = bins;
  for (int64_t every : {1, 2, 4, 5, 10, 20, 50})
    if (int64_t(nb) <= 8 * every) {
      pl.xlabel_every = every;
      break;
    }
  pl.ya = nice_axis(
      0, std::max<double>({5, double(over), double(*std::max_element(count.begin(), count.end()))}),
      5);
  std::string s =
      pl.open(id, what + " distribution", what + " (ms)", "count",
              " data-samples=\"" + std::to_string(v.size()) + "\" data-bins=\"" +
                  std::to_string(nb) + "\" data-overflow=\"" + std::to_string(over) + "\"");
  auto bar = [&](const std::string& cls, double x0, double x1, int64_t n, double lo, double hi,
                 const std::string& title) {
    const double y = pl.py(double(n));
    return "<rect class=\"" + cls + "\" x=\"" + f2(x0) + "\" y=\"" + f2(y) + "\" width=\"" +
           f2(std::max(0.0, x1 - x0 - 1)) + "\" height=\"" + f2(pl.T + pl.ph() - y) +
           "\" fill=\"#4e79a7\" data-lo=\"" + tick_label(lo) + "\" data-hi=\"" + tick_label(hi) +
           "\" data-count=\"" + std::to_string(n) + "\"><title>" + title + ": " +
           std::to_string(n) + "</title></rect>";
  };
  for (size_t k = 0; k < nb; ++k) {
    if (count[k] == 0) continue;
    const double a = bins.lo + width * double(k), b = a + width;
    s += bar("bin", pl.px(a), pl.px(b), count[k], a, b, fmt_ms(a) + " to " + fmt_ms(b));
  }
  if (over > 0) {
    const double x0 = pl.L + pl.pw() + 30, x1 = x0 + 50;
    s += bar("bin overflow", x0, x1, over, bins.hi, *mx,
             "above " + fmt_ms(bins.hi) + " (up to " + fmt_ms(*mx) + ")");
    s += "<text class=\"tick overflow-label\" x=\"" + f2((x0 + x1) / 2) + "\" y=\"" +
         f2(pl.T + pl.ph() + 18) + "\" text-anchor=\"middle\">&gt; " + tick_label(bins.hi) +
         "</text>";
  }
  if (p.count > 0)
    for (const auto& [name, x] : {std::pair<const char*, double>{"p50", p.p50}, {"p99", p.p99}}) {
      const double X = pl.px(x);
      // Labels in two rows above the plot (p50 higher), right of the line in the plot's left
      // three quarters, left of it beyond.
      const bool row2 = std::string(name) == "p99", right = X < pl.L + 0.75 * pl.pw();
      s += "<line class=\"marker\" data-stat=\"" + std::string(name) + "\" data-value=\"" +
           nlohmann::json(x).dump() + "\" x1=\"" + f2(X) + "\" x2=\"" + f2(X) + "\" y1=\"" +
           f2(pl.T) + "\" y2=\"" + f2(pl.T + pl.ph()) + "\"/><text class=\"marker-label\" x=\"" +
           f2(right ? X + 3 : X - 3) + "\" y=\"" + f2(pl.T - (row2 ? 4 : 16)) +
           "\" text-anchor=\"" + (right ? "start" : "end") + "\">" + name + " " + fmt_ms(x) +
           "</text>";
    }
  return s + "</svg>";
}

// The end of the engine's last step, or the run's duration when the report has it: the time
// axis of the over-time charts.
double run_end_ms(const RunReport& r) {
  double end = 0;
  for (const StepRow& st : r.steps) end = std::max(end, st.start_ms + st.time_ms);
  if (r.load.is_object() && r.load.contains("duration_ms") && r.load["duration_ms"].is_number())
    end = std::max(end, r.load["duration_ms"].get<double>());
  return end;
}

// Tokens per engine step against time: each step a bar from its start to its end (at least one
// pixel wide), decode tokens (rect.dec) at the bottom, prefill tokens (rect.pre) above them.
std::string batch_chart(const RunReport& r) {
  if (r.steps.empty()) return "<p class=\"empty\">No engine steps.</p>";
  double most = 0;
  for (const StepRow& st : r.steps)
    most = std::max(most, double(st.prefill_tokens + st.decode_tokens));
  Plot pl;
  pl.xa = nice_axis(0, run_end_ms(r), 10);
  pl.ya = nice_axis(0, std::max(1.0, most), 5);
  std::string s =
      pl.open("batch-chart", "tokens per engine step over time", "time from the first arrival (ms)",
              "tokens in the step", " data-steps=\"" + std::to_string(r.steps.size()) + "\"");
  auto bar = [&](const char* cls, const StepRow& st, double y0, double y1, const char* fill) {
    const double x0 = pl.px(st.start_ms), x1 = pl.px(st.start_ms + st.time_ms);
    return "<rect class=\"" + std::string(cls) + "\" x=\"" + f2(x0) + "\" y=\"" + f2(pl.py(y1)) +
           "\" width=\"" + f2(std::max(1.0, x1 - x0)) + "\" height=\"" + f2(pl.py(y0) - pl.py(y1)) +
           "\" fill=\"" + fill + "\" data-step=\"" + std::to_string(st.index) +
           "\" data-tokens=\"" + tick_label(y1 - y0) + "\"><title>step " +
           std::to_string(st.index) + " at " + fmt_ms(st.start_ms) + ": " +
           std::to_string(st.prefill_tokens) + " prefill + " + std::to_string(st.decode_tokens) +
           " decode tokens, " + std::to_string(st.seqs) + " sequences, " + fmt_ms(st.time_ms) +
           "</title></rect>";
  };
  for (const StepRow& st : r.steps) {
    const double d = double(st.decode_tokens), p = double(st.prefill_tokens);
    if (d > 0) s += bar("dec", st, 0, d, "#4e79a7");
    if (p > 0) s += bar("pre", st, d, d + p, "#f28e2b");
  }
  const double ly = pl.T - 12;
  s += "<rect x=\"" + f2(pl.L) + "\" y=\"" + f2(ly - 9) +
       "\" width=\"10\" height=\"10\" fill=\"#4e79a7\"/><text x=\"" + f2(pl.L + 14) + "\" y=\"" +
       f2(ly) + "\">decode tokens</text><rect x=\"" + f2(pl.L + 120) + "\" y=\"" + f2(ly - 9) +
       "\" width=\"10\" height=\"10\" fill=\"#f28e2b\"/><text x=\"" + f2(pl.L + 134) + "\" y=\"" +
       f2(ly) + "\">prefill tokens</text>";
  return s + "</svg>";
}

// KV-cache blocks in use (percent of the pool) after each step, from the step's end.
std::string kv_chart(const RunReport& r) {
  if (r.steps.empty()) return "<p class=\"empty\">No engine steps.</p>";
  double most = 0;
  for (const StepRow& st : r.steps) most = std::max(most, st.kv_usage * 100);
  Plot pl;
  pl.xa = nice_axis(0, run_end_ms(r), 10);
  pl.ya = nice_axis(0, most > 0 ? most : 1.0, 5);
  std::string s =
      pl.open("kv-chart", "KV cache use over time", "time from the first arrival (ms)",
              "KV blocks in use (%)", " data-points=\"" + std::to_string(r.steps.size()) + "\"");
  // A staircase: the use after a step holds until the next step's end changes it.
  std::string pts;
  for (size_t i = 0; i < r.steps.size(); ++i) {
    const StepRow& st = r.steps[i];
    const double x = pl.px(st.start_ms + st.time_ms);
    if (i) pts += f2(x) + "," + f2(pl.py(r.steps[i - 1].kv_usage * 100)) + " ";
    pts += f2(x) + "," + f2(pl.py(st.kv_usage * 100)) + " ";
  }
  s += "<polyline class=\"line kv\" fill=\"none\" points=\"" + pts + "\"/>";
  return s + "</svg>";
}

// The mean of each latency class over the requests as one stacked bar of the mean E2E.
std::string class_bar(const RunReport& r) {
  static const char* const names[] = {"compute", "memory", "communication", "scheduling"};
  static const char* const fills[] = {"#59a14f", "#4e79a7", "#b07aa1", "#e15759"};
  double mean[4], total = 0;
  for (int i = 0; i < 4; ++i) {
    const Percentiles p = summary_distribution(r, "classes_ms", names[i]);
    if (p.count == 0) return "<p class=\"empty\">No latency classes in this report.</p>";
    mean[i] = std::max(0.0, p.mean);
    total += mean[i];
  }
  const double W = 900, H = 40, top = 10;
  std::string svg =
      "<svg id=\"class-bar\" class=\"chart\" xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 " +
      f2(W) + " " + f2(top + H + 20 * 4 + 10) + "\" role=\"img\" aria-label=\"latency classes\">";
  double x = 0;
  for (int i = 0; i < 4; ++i) {
    const double w = total > 0 ? mean[i] / total * W : 0;
    svg += "<rect class=\"latency-class\" data-class=\"" + std::string(names[i]) + "\" data-ms=\"" +
           nlohmann::json(mean[i]).dump() + "\" x=\"" + f2(x) + "\" y=\"" + f2(top) +
           "\" width=\"" + f2(w) + "\" height=\"" + f2(H) + "\" fill=\"" + fills[i] + "\"><title>" +
           names[i] + ": " + fmt_ms(mean[i]) + "</title></rect>";
    x += w;
  }
  for (int i = 0; i < 4; ++i) {
    const double y = top + H + 16 + 20 * double(i);
    svg += "<rect x=\"0\" y=\"" + f2(y - 11) + "\" width=\"12\" height=\"12\" fill=\"" + fills[i] +
           "\"/><text x=\"18\" y=\"" + f2(y) + "\">" + names[i] + ": " + fmt_ms(mean[i]) +
           " per request (mean), " + (total > 0 ? fmt_pct(mean[i] / total) : "-") +
           " of the mean end-to-end</text>";
  }
  return svg + "</svg>";
}

// The load's settings in one line: "30 requests at 40/s (poisson), input uniform:8:64, ...".
std::string load_line(const RunReport& r) {
  const nlohmann::json& l = r.load;
  auto text = [&](const char* k) -> std::string {
    if (!l.is_object() || !l.contains(k) || l[k].is_null()) return "";
    return l[k].is_string() ? l[k].get<std::string>() : l[k].dump();
  };
  std::string s = text("requests") + " requests ";
  if (text("rate") == "inf") {
    s += "at once (rate inf)";
  } else {
    s += "at " + text("rate") + "/s (" + text("arrival");
    if (text("arrival") == "gamma") s += ", burstiness " + text("burstiness");
    s += ")";
  }
  if (!text("dataset").empty())
    s += ", dataset " + text("dataset");
  else
    s += ", input " + text("input") + ", output " + text("output");
  if (!text("slo").empty()) s += ", SLO " + text("slo");
  if (text("prefix_cache") == "true") s += ", prefix cache on";
  return s;
}

std::string load_card(const std::string& key, const std::string& value, const std::string& what) {
  return "<div class=\"card\" data-summary=\"" + key + "\"><div class=\"v\">" + html_escape(value) +
         "</div><div class=\"k\">" + html_escape(what) + "</div></div>";
}

// The load-mode body: headline figures of the summary, its distributions, the charts over the
// requests and over time, and the latency classes.
std::string load_sections(const RunReport& r) {
  const std::vector<RequestView> reqs = request_views(r);
  const Percentiles ttft = summary_distribution(r, "ttft_ms"),
                    tpot = summary_distribution(r, "tpot_ms"),
                    itl = summary_distribution(r, "itl_ms"),
                    e2e = summary_distribution(r, "e2e_ms"),
                    queue = summary_distribution(r, "queue_ms");
  auto ms_or_dash = [](const Percentiles& p, double Percentiles::*f) {
    return p.count > 0 ? fmt_ms(p.*f) : std::string("-");
  };
  auto rate = [&](const char* k, const char* unit) {
    const double v = summary_number(r, k);
    return std::isfinite(v) ? fmt_rate(v, unit) : std::string("-");
  };
  std::string h = "<div class=\"cards\" id=\"load-metrics\">";
  h += load_card("requests", std::to_string(reqs.size()), "requests finished");
  h += load_card("duration_s", fmt_ms(summary_number(r, "duration_s") * 1e3),
                 "duration: first arrival to last token");
  h += load_card("request_throughput", rate("request_throughput", "req/s"), "request throughput");
  h += load_card("output_tokens_per_s", rate("output_tokens_per_s", "tok/s"), "output tokens / s");
  h += load_card("goodput", rate("goodput", "req/s"), "goodput: requests meeting every SLO / s");
  const double att = summary_number(r, "slo_attainment");
  h += load_card("slo_attainment", std::isfinite(att) ? fmt_pct(att) : "-", "SLO attainment");
  h += load_card("ttft_p50", ms_or_dash(ttft, &Percentiles::p50), "TTFT p50");
  h += load_card("ttft_p99", ms_or_dash(ttft, &Percentiles::p99), "TTFT p99");
  h += load_card("tpot_p50", ms_or_dash(tpot, &Percentiles::p50), "TPOT p50");
  h += load_card("tpot_p99", ms_or_dash(tpot, &Percentiles::p99), "TPOT p99");
  h += load_card("itl_p99", ms_or_dash(itl, &Percentiles::p99), "ITL p99");
  h += load_card("e2e_p99", ms_or_dash(e2e, &Percentiles::p99), "E2E p99");
  h += "</div>";

  h += "<h2>Latency per request</h2><table id=\"load-summary\">" + percentile_header() + "<tbody>";
  h += percentile_row("TTFT", ttft);
  h += percentile_row("TPOT", tpot);
  h += percentile_row("ITL (all gaps)", itl);
  h += percentile_row("E2E", e2e);
  h += percentile_row("queue", queue);
  h += "</tbody></table>";
  const auto int_of = [&](const char* k) {
    return r.summary.is_object() && r.summary.contains(k) && r.summary[k].is_number_integer()
               ? std::to_string(r.summary[k].get<int64_t>())
               : std::string("-");
  };
  h += "<p>Latencies count from each request's arrival (queueing included). Preemptions " +
       int_of("preemptions") + ", prefix-cache hits " + int_of("prefix_hit_tokens") + " tokens" +
       (r.summary.is_object() && r.summary.contains("slo") && r.summary["slo"].is_string()
            ? ", SLO " + html_escape(r.summary["slo"].get<std::string>())
            : std::string(", no SLO set (goodput counts every request)")) +
       ".</p>";

  std::vector<double> ttfts, gaps;
  for (const RequestView& q : reqs) {
    ttfts.push_back(q.ttft_ms);
    gaps.insert(gaps.end(), q.itl_ms.begin(), q.itl_ms.end());
  }
  h += "<h2>TTFT distribution</h2>" + histogram("ttft-hist", "TTFT", ttfts, ttft);
  h += "<h2>Inter-token latency distribution</h2>" +
       histogram("itl-hist", "inter-token latency", gaps, itl);

  h += "<h2>Latency classes</h2>" + class_bar(r);
  h += "<table id=\"class-table\">" + percentile_header() + "<tbody>";
  for (const char* c : {"compute", "memory", "communication", "scheduling"})
    h += percentile_row(c, summary_distribution(r, "classes_ms", c));
  h += "</tbody></table>";

  h += "<h2>Batch composition over time</h2>" + batch_chart(r);
  h += "<h2>KV cache use over time</h2>" + kv_chart(r);
  return h;
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
.grid{stroke:#eee}.axis{stroke:#888}.line{stroke:#4e79a7;stroke-width:2}.pt{fill:#4e79a7}.offcpu{fill:#f28e2b;opacity:.6}.pt.hot{fill:#e15759}
#readout{color:#444;min-height:1.4em}.marker{stroke:#e15759;stroke-dasharray:4 3}.marker-label{fill:#e15759}.line.kv{stroke:#59a14f}.check-error{color:#b00}.check-warning{color:#a60}
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

// The single-request body: headline metrics, the stage bar, per-token decode latency and the
// percentiles.
std::string single_sections(const RunReport& r) {
  std::string h;
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
  return h;
}

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
  if (is_load_report(r))
    h += "<p class=\"sub\">" + html_escape(ri.device) + "; " + html_escape(load_line(r)) + "; " +
         html_escape(r.created_utc) + "</p>";
  else
    h += "<p class=\"sub\">" + html_escape(ri.device) + "; input " +
         std::to_string(ri.input_tokens) + ", output " + std::to_string(ri.output_tokens) +
         ", batch " + std::to_string(ri.batch) + ", " + std::to_string(ri.repeat) + " repeat(s); " +
         html_escape(r.created_utc) + "</p>";

  if (is_load_report(r)) {
    h += load_sections(r);
    h += "<h2>Where the time goes</h2>" + stage_bar(r);
  } else {
    h += single_sections(r);
  }

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
