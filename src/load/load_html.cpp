// The HTML printer of a load report: self-contained (inline SVG, no script), from the report's
// JSON like every other printer. Charts: latency against rate or concurrency (a sweep), TTFT
// and ITL distributions, requests in flight and the server's running/waiting over time.
#include <algorithm>
#include <cmath>
#include <sstream>
#include <vector>

#include "core/format.hpp"
#include "core/xml.hpp"
#include "load/load_export.hpp"

namespace latprof::load {

namespace {

constexpr double kW = 640, kH = 280, kL = 60, kR = 20, kT = 30, kB = 44;
const char* const kColors[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b"};

struct Series {
  std::string name;
  std::vector<double> x, y;
};

std::string num(double v) {
  std::ostringstream o;
  o.precision(4);
  o << v;
  return o.str();
}

// A line chart of several series over shared axes (linear, from 0).
std::string line_chart(const std::string& title, const std::string& xl, const std::string& yl,
                       const std::vector<Series>& ss) {
  double xmax = 0, ymax = 0;
  for (const auto& s : ss) {
    for (double v : s.x) xmax = std::max(xmax, v);
    for (double v : s.y) ymax = std::max(ymax, v);
  }
  if (!(xmax > 0)) xmax = 1;
  if (!(ymax > 0)) ymax = 1;
  ymax *= 1.08;
  auto px = [&](double x) { return kL + x / xmax * (kW - kL - kR); };
  auto py = [&](double y) { return kH - kB - y / ymax * (kH - kT - kB); };
  std::ostringstream o;
  o << "<svg xmlns='http://www.w3.org/2000/svg' width='" << kW << "' height='" << kH << "'>";
  o << "<text x='" << kW / 2 << "' y='18' text-anchor='middle' font-weight='bold'>"
    << xml_escape(title) << "</text>";
  o << "<line x1='" << kL << "' y1='" << py(0) << "' x2='" << kW - kR << "' y2='" << py(0)
    << "' stroke='#444'/><line x1='" << kL << "' y1='" << py(0) << "' x2='" << kL << "' y2='" << kT
    << "' stroke='#444'/>";
  for (int i = 0; i <= 4; ++i) {
    const double xv = xmax * i / 4, yv = ymax * i / 4;
    o << "<text x='" << px(xv) << "' y='" << kH - kB + 16 << "' text-anchor='middle' "
      << "font-size='11'>" << num(xv) << "</text>";
    o << "<text x='" << kL - 6 << "' y='" << py(yv) + 4 << "' text-anchor='end' font-size='11'>"
      << num(yv) << "</text>";
  }
  o << "<text x='" << (kL + kW - kR) / 2 << "' y='" << kH - 6 << "' text-anchor='middle' "
    << "font-size='12'>" << xml_escape(xl) << "</text>";
  o << "<text x='14' y='" << (kT + kH - kB) / 2 << "' font-size='12' transform='rotate(-90 14 "
    << (kT + kH - kB) / 2 << ")' text-anchor='middle'>" << xml_escape(yl) << "</text>";
  for (size_t k = 0; k < ss.size(); ++k) {
    const char* c = kColors[k % std::size(kColors)];
    o << "<polyline fill='none' stroke='" << c << "' stroke-width='2' points='";
    for (size_t i = 0; i < ss[k].x.size(); ++i) o << px(ss[k].x[i]) << "," << py(ss[k].y[i]) << " ";
    o << "'/>";
    if (ss[k].x.size() < 50)
      for (size_t i = 0; i < ss[k].x.size(); ++i)
        o << "<circle cx='" << px(ss[k].x[i]) << "' cy='" << py(ss[k].y[i]) << "' r='3' fill='" << c
          << "'/>";
    o << "<text x='" << kW - kR - 4 << "' y='" << kT + 14 * (double(k) + 1) << "' "
      << "text-anchor='end' font-size='11' fill='" << c << "'>" << xml_escape(ss[k].name)
      << "</text>";
  }
  o << "</svg>";
  return o.str();
}

// A histogram of samples in 40 bins from 0 to the 99.5th percentile (beyond: the last bin).
std::string histogram(const std::string& title, const std::string& xl, std::vector<double> v) {
  if (v.empty()) return "<p>" + xml_escape(title) + ": no samples</p>";
  std::sort(v.begin(), v.end());
  const double top = std::max(v[size_t(double(v.size() - 1) * 0.995)], 1e-9);
  constexpr int kBins = 40;
  std::vector<double> count(kBins, 0);
  for (double x : v) ++count[size_t(std::clamp(int(x / top * kBins), 0, kBins - 1))];
  Series s{"requests", {}, {}};
  for (int i = 0; i < kBins; ++i) {  // a step outline of the bars
    s.x.push_back(top * i / kBins);
    s.y.push_back(count[size_t(i)]);
    s.x.push_back(top * (i + 1) / kBins);
    s.y.push_back(count[size_t(i)]);
  }
  s.name = std::to_string(v.size()) + " samples";
  return line_chart(title, xl, "count", {s});
}

std::vector<const nlohmann::json*> points_of(const nlohmann::json& r) {
  std::vector<const nlohmann::json*> p;
  if (r.contains("points"))
    for (const auto& x : r["points"]) p.push_back(&x);
  else if (r.contains("max_rate"))
    for (const auto& x : r["max_rate"]["probes"]) p.push_back(&x);
  else
    p.push_back(&r);
  return p;
}

}  // namespace

std::string load_html(const nlohmann::json& r) {
  std::ostringstream o;
  o << "<!DOCTYPE html><html><head><meta charset='utf-8'><title>latprof load</title>"
    << "<style>body{font-family:sans-serif;margin:24px;max-width:1000px}td,th{padding:2px 8px;"
    << "text-align:right}th{background:#eee}</style></head><body>";
  o << "<h1>latprof load</h1><p>" << xml_escape(r["target"]["url"].get<std::string>()) << ", model "
    << xml_escape(r["target"]["model"].get<std::string>()) << ", "
    << xml_escape(r["created_utc"].get<std::string>()) << "</p>";
  const auto pts = points_of(r);
  // the summary table, one row per point
  o << "<table><tr><th>point</th><th>ok</th><th>failed</th><th>TTFT p50</th><th>TTFT p99</th>"
    << "<th>TPOT p50</th><th>ITL p99</th><th>E2E p50</th><th>client queue p99</th>"
    << "<th>tokens/s</th></tr>";
  auto p50 = [](const nlohmann::json& d, const char* k) {
    return d.is_object() ? fmt_fixed(d[k].get<double>(), 2) : std::string("-");
  };
  std::vector<double> xs;
  std::string xl = "requests per second";
  for (const auto* p : pts) {
    const auto& s = (*p)["summary"];
    std::string label = "run";
    double x = 0;
    if (p->contains("rate")) {
      label = (*p)["rate"].is_string() ? "inf" : num((*p)["rate"].get<double>()) + " req/s";
      x = (*p)["rate"].is_number() ? (*p)["rate"].get<double>() : 0;
    } else if (p->contains("concurrency")) {
      label = "concurrency " + (*p)["concurrency"].dump();
      x = (*p)["concurrency"].get<double>();
      xl = "concurrency";
    }
    xs.push_back(x);
    o << "<tr><td>" << xml_escape(label) << "</td><td>" << s["requests"] << "</td><td>"
      << s["requests_failed"] << "</td><td>" << p50(s["ttft_ms"], "p50") << "</td><td>"
      << p50(s["ttft_ms"], "p99") << "</td><td>" << p50(s["tpot_ms"], "p50") << "</td><td>"
      << p50(s["itl_ms"], "p99") << "</td><td>" << p50(s["e2e_ms"], "p50") << "</td><td>"
      << p50(s["client_queue_ms"], "p99") << "</td><td>"
      << fmt_fixed(s["output_tokens_per_s"].get<double>(), 1) << "</td></tr>";
  }
  o << "</table>";
  // latency against rate or concurrency (sweeps)
  if (pts.size() > 1) {
    std::vector<size_t> order(pts.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return xs[a] < xs[b]; });
    auto series = [&](const char* metric, const char* q, const std::string& name) {
      Series s{name, {}, {}};
      for (size_t i : order) {
        const auto& d = (*pts[i])["summary"][metric];
        if (!d.is_object() || !(xs[i] > 0)) continue;
        s.x.push_back(xs[i]);
        s.y.push_back(d[q].get<double>());
      }
      return s;
    };
    o << "<h2>Latency against load</h2>"
      << line_chart("TTFT and E2E", xl, "ms",
                    {series("ttft_ms", "p50", "TTFT p50"), series("ttft_ms", "p99", "TTFT p99"),
                     series("e2e_ms", "p50", "E2E p50")})
      << line_chart("TPOT and ITL", xl, "ms",
                    {series("tpot_ms", "p50", "TPOT p50"), series("tpot_ms", "p99", "TPOT p99"),
                     series("itl_ms", "p99", "ITL p99")});
  }
  for (const auto* p : pts) {
    std::vector<double> ttft, itl;
    std::vector<std::pair<double, int>> flight;
    for (const auto& q : (*p)["requests"]) {
      if (q["ttft_ms"].is_number()) ttft.push_back(q["ttft_ms"].get<double>());
      if (q["itl_ms"].is_array())
        for (const auto& g : q["itl_ms"]) itl.push_back(g.get<double>());
      flight.push_back({q["arrival_ms"].get<double>(), 1});
      flight.push_back({q["done_ms"].get<double>(), -1});
    }
    std::string name = "run";
    if (p->contains("rate")) name = "rate " + (*p)["rate"].dump();
    if (p->contains("concurrency")) name = "concurrency " + (*p)["concurrency"].dump();
    o << "<h2>" << xml_escape(name) << "</h2>" << histogram("TTFT", "ms", ttft)
      << histogram("ITL", "ms", itl);
    std::sort(flight.begin(), flight.end());
    std::vector<Series> over_time;
    Series f{"requests in flight (client)", {}, {}};
    int n = 0;
    for (const auto& [t, d] : flight) {
      f.x.push_back(t / 1e3);
      f.y.push_back(n);
      n += d;
      f.x.push_back(t / 1e3);
      f.y.push_back(n);
    }
    over_time.push_back(f);
    const auto& m = (*p)["server_metrics"];
    if (m.is_object()) {
      Series run{"running (server)", {}, {}}, wait{"waiting (server)", {}, {}};
      for (const auto& s : m["samples"]) {
        if (s["running"].is_number()) {
          run.x.push_back(s["t_ms"].get<double>() / 1e3);
          run.y.push_back(s["running"].get<double>());
        }
        if (s["waiting"].is_number()) {
          wait.x.push_back(s["t_ms"].get<double>() / 1e3);
          wait.y.push_back(s["waiting"].get<double>());
        }
      }
      if (!run.x.empty()) over_time.push_back(run);
      if (!wait.x.empty()) over_time.push_back(wait);
    }
    o << line_chart("Requests over time", "s from the start", "requests", over_time);
  }
  o << "</body></html>\n";
  return o.str();
}

}  // namespace latprof::load
