// The roofline chart as one self-contained SVG: no scripts, no external fonts or styles.
// x: arithmetic intensity (FLOP/byte), y: attained FLOP/s, both log10; roofs are
// min(peak, bandwidth x intensity) for the measured ceilings (solid) and the datasheet (dashed).
#include "report/plot.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "core/format.hpp"
#include "core/xml.hpp"

namespace latprof {

namespace {

constexpr double kWidth = 980, kHeight = 640;
constexpr double kLeft = 90, kRight = 250, kTop = 56, kBottom = 64;

std::string esc(const std::string& s) {
  return xml_escape(s);
}

std::string f2(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.2f", v);
  return b;
}

std::string intensity_label(double v) {
  if (v >= 1e3) return fmt_fixed(v / 1e3, 0) + "k";
  if (v >= 1) return fmt_fixed(v, 0);
  const int d = int(std::ceil(-std::log10(v) - 1e-9));
  return fmt_fixed(v, d);
}

// A decade's label: "1 TFLOP/s", "10 GFLOP/s" (no trailing zeros on exact powers of ten).
std::string decade_label(double v) {
  std::string s = fmt_rate(v, "FLOP/s");
  for (const char* z : {".00 ", ".0 "})
    if (const size_t at = s.find(z); at != std::string::npos)
      s.erase(at, std::string(z).size() - 1);
  return s;
}

const char* stage_color(const std::string& stage) {
  if (stage == "prefill") return "#1f77b4";
  if (stage == "decode") return "#ff7f0e";
  if (stage == "sample") return "#2ca02c";
  return "#7f7f7f";
}

struct Point {
  std::string stage, name;
  double x = 0, y = 0, time_ms = 0;
  bool measured = false;
};

struct Axes {
  double xlo, xhi, ylo, yhi;  // decades
  double px(double x) const {
    return kLeft + (std::log10(x) - std::log10(xlo)) / (std::log10(xhi) - std::log10(xlo)) *
                       (kWidth - kLeft - kRight);
  }
  double py(double y) const {
    return kHeight - kBottom -
           (std::log10(y) - std::log10(ylo)) / (std::log10(yhi) - std::log10(ylo)) *
               (kHeight - kTop - kBottom);
  }
};

// One roof: bandwidth slope up to the ridge, then flat at the peak, clipped to the axes.
std::string roof_path(const Axes& a, double bw, double peak) {
  if (!(bw > 0) || !(peak > 0)) return "";
  const double ridge = peak / bw;
  double x0 = a.xlo;
  if (bw * x0 < a.ylo) x0 = a.ylo / bw;
  std::ostringstream d;
  d << "M" << f2(a.px(x0)) << "," << f2(a.py(bw * x0));
  if (ridge < a.xhi) {
    d << " L" << f2(a.px(ridge)) << "," << f2(a.py(peak));
    d << " L" << f2(a.px(a.xhi)) << "," << f2(a.py(peak));
  } else {
    d << " L" << f2(a.px(a.xhi)) << "," << f2(a.py(bw * a.xhi));
  }
  return d.str();
}

}  // namespace

std::string roofline_svg(const RunReport& r, const Ceilings* datasheet) {
  const Ceilings& c = r.ceilings;
  const bool w8a8 = r.run.dtype == "int8-w8a8";
  // ---- points: one per op row with FLOPs and bytes (measured time, else the floor)
  std::vector<Point> pts;
  std::vector<std::string> skipped;
  for (const Row& o : r.ops) {
    const double t = o.time_ms > 0 ? o.time_ms : o.floor_ms;
    const double x = o.cost.flops / o.cost.bytes(), y = o.cost.flops / (t / 1e3);
    // No FLOPs or bytes, or a point off any chart (an overflowing or vanishing ratio).
    if (o.cost.flops <= 0 || o.cost.bytes() <= 0 || !(t > 0) || !std::isfinite(x) ||
        !std::isfinite(y) || !(x > 0) || !(y > 0)) {
      skipped.push_back(o.stage + "." + o.name);
      continue;
    }
    pts.push_back({o.stage, o.name, x, y, t, o.time_ms > 0});
  }
  // ---- roofs
  struct Roof {
    std::string label;
    double bw, peak;
    std::string color;
    bool dashed;
  };
  std::vector<Roof> roofs;
  const std::string mlabel = c.source.rfind("datasheet", 0) == 0 ? "datasheet" : "measured";
  auto add_roofs = [&](const Ceilings& k, const std::string& tag, bool dashed) {
    if (k.matmul_flops_per_s > 0)
      roofs.push_back({tag + " matmul " + fmt_rate(k.matmul_flops_per_s, "FLOP/s"),
                       k.mem_bw_bytes_per_s, k.matmul_flops_per_s, dashed ? "#555555" : "#d62728",
                       dashed});
    if (k.vector_flops_per_s > 0 && k.vector_flops_per_s != k.matmul_flops_per_s)
      roofs.push_back({tag + " vector " + fmt_rate(k.vector_flops_per_s, "FLOP/s"),
                       k.mem_bw_bytes_per_s, k.vector_flops_per_s, dashed ? "#8c8c8c" : "#9467bd",
                       dashed});
    if (w8a8 && k.int8_ops_per_s > 0)
      roofs.push_back({tag + " int8 " + fmt_rate(k.int8_ops_per_s, "OP/s"), k.mem_bw_bytes_per_s,
                       k.int8_ops_per_s, dashed ? "#444444" : "#8c564b", dashed});
  };
  add_roofs(c, mlabel, false);
  if (datasheet) add_roofs(*datasheet, "datasheet", true);

  // ---- axes: whole decades around points, ridges and peaks
  double xmin = 1e300, xmax = 0, ymin = 1e300, ymax = 0;
  auto usable = [](double v) { return std::isfinite(v) && v > 0; };
  for (const auto& p : pts) {
    if (!usable(p.x) || !usable(p.y)) continue;
    xmin = std::min(xmin, p.x), xmax = std::max(xmax, p.x);
    ymin = std::min(ymin, p.y), ymax = std::max(ymax, p.y);
  }
  for (const auto& rf : roofs) {
    if (!usable(rf.bw) || !usable(rf.peak) || !usable(rf.peak / rf.bw)) continue;
    xmax = std::max(xmax, rf.peak / rf.bw * 4);
    xmin = std::min(xmin, rf.peak / rf.bw / 100);
    ymax = std::max(ymax, rf.peak * 1.5);
    ymin = std::min(ymin, rf.peak / 1e4);
  }
  if (!(xmax > 0) || !(xmin <= xmax)) xmin = 0.1, xmax = 1000;
  if (!(ymax > 0) || !(ymin <= ymax)) ymin = 1e9, ymax = 1e15;
  // Whole decades, clamped to what a chart can show (an absurd ceiling such as 1e308 or 5e-324
  // stretches the axes to these limits, never to infinity or zero): at most 40 decades per axis.
  auto decade = [](double v, bool up, int lo, int hi) {
    const double e = up ? std::ceil(std::log10(v)) : std::floor(std::log10(v));
    return int(std::clamp(std::isfinite(e) ? e : (v > 1 ? double(hi) : double(lo)), double(lo),
                          double(hi)));
  };
  int exlo = decade(xmin, false, -10, 30), exhi = decade(xmax, true, -10, 30);
  int eylo = decade(ymin, false, -10, 30), eyhi = decade(ymax, true, -10, 30);
  if (exhi - exlo < 2) exhi = exlo + 2;
  if (eyhi - eylo < 2) eylo = eyhi - 2;
  Axes a;
  a.xlo = std::pow(10.0, exlo);
  a.xhi = std::pow(10.0, exhi);
  a.ylo = std::pow(10.0, eylo);
  a.yhi = std::pow(10.0, eyhi);

  std::ostringstream s;
  s << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  s << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << kWidth << "\" height=\"" << kHeight
    << "\" viewBox=\"0 0 " << kWidth << " " << kHeight
    << "\" font-family=\"sans-serif\" font-size=\"12\">\n";
  const std::string title = "Roofline: " + r.run.model + " " + r.run.dtype + " on " + c.device;
  s << "<title>" << esc(title) << "</title>\n";
  s << "<rect x=\"0\" y=\"0\" width=\"" << kWidth << "\" height=\"" << kHeight
    << "\" fill=\"#ffffff\"/>\n";
  s << "<text x=\"" << kLeft << "\" y=\"24\" font-size=\"16\" font-weight=\"bold\">" << esc(title)
    << "</text>\n";
  s << "<text x=\"" << kLeft << "\" y=\"42\" fill=\"#555555\">"
    << esc("batch " + std::to_string(r.run.batch) + ", input " +
           std::to_string(r.run.input_tokens) + ", output " + std::to_string(r.run.output_tokens) +
           "; ceilings: " + c.source.substr(0, 110))
    << "</text>\n";

  // grid, ticks and labels
  const double x0 = kLeft, x1 = kWidth - kRight, y0 = kTop, y1 = kHeight - kBottom;
  s << "<g class=\"grid\" stroke=\"#e6e6e6\" stroke-width=\"1\">\n";
  // Loops run over integer decade exponents: bounded whatever the values.
  for (int e = exlo; e <= exhi; ++e)
    for (int k = 1; k < (e == exhi ? 2 : 10); ++k) {
      const double d = std::pow(10.0, e);
      s << "<line x1=\"" << f2(a.px(d * k)) << "\" y1=\"" << y0 << "\" x2=\"" << f2(a.px(d * k))
        << "\" y2=\"" << y1 << "\"" << (k == 1 ? " stroke=\"#c8c8c8\"" : "") << "/>\n";
    }
  for (int e = eylo; e <= eyhi; ++e)
    for (int k = 1; k < (e == eyhi ? 2 : 10); ++k) {
      const double d = std::pow(10.0, e);
      s << "<line x1=\"" << x0 << "\" y1=\"" << f2(a.py(d * k)) << "\" x2=\"" << x1 << "\" y2=\""
        << f2(a.py(d * k)) << "\"" << (k == 1 ? " stroke=\"#c8c8c8\"" : "") << "/>\n";
    }
  s << "</g>\n";
  s << "<rect class=\"plot-area\" x=\"" << x0 << "\" y=\"" << y0 << "\" width=\"" << x1 - x0
    << "\" height=\"" << y1 - y0 << "\" fill=\"none\" stroke=\"#333333\"/>\n";
  s << "<g class=\"xticks\" text-anchor=\"middle\">\n";
  for (int e = exlo; e <= exhi; ++e)
    s << "<text x=\"" << f2(a.px(std::pow(10.0, e))) << "\" y=\"" << y1 + 18 << "\">"
      << intensity_label(std::pow(10.0, e)) << "</text>\n";
  s << "</g>\n<g class=\"yticks\" text-anchor=\"end\">\n";
  for (int e = eylo; e <= eyhi; ++e)
    s << "<text x=\"" << x0 - 6 << "\" y=\"" << f2(a.py(std::pow(10.0, e)) + 4) << "\">"
      << esc(decade_label(std::pow(10.0, e))) << "</text>\n";
  s << "</g>\n";
  s << "<text x=\"" << f2((x0 + x1) / 2) << "\" y=\"" << kHeight - 20
    << "\" text-anchor=\"middle\">arithmetic intensity (FLOP/byte, cost model)</text>\n";
  s << "<text transform=\"translate(18," << f2((y0 + y1) / 2)
    << ") rotate(-90)\" text-anchor=\"middle\">attained FLOP/s</text>\n";

  // roofs and ridge points
  s << "<g class=\"roofs\" fill=\"none\" stroke-width=\"2\">\n";
  for (const auto& rf : roofs) {
    const std::string d = roof_path(a, rf.bw, rf.peak);
    if (d.empty()) continue;
    s << "<path class=\"roof\" d=\"" << d << "\" stroke=\"" << rf.color << "\""
      << (rf.dashed ? " stroke-dasharray=\"6,4\"" : "") << "><title>" << esc(rf.label) << ", "
      << esc(fmt_rate(rf.bw, "B/s")) << "</title></path>\n";
  }
  s << "</g>\n";
  for (const auto& rf : roofs) {
    if (!(rf.bw > 0) || rf.label.find("matmul") == std::string::npos) continue;
    const double ridge = rf.peak / rf.bw;
    if (ridge < a.xlo || ridge > a.xhi) continue;
    s << "<circle class=\"ridge\" cx=\"" << f2(a.px(ridge)) << "\" cy=\"" << f2(a.py(rf.peak))
      << "\" r=\"4\" fill=\"" << rf.color << "\"/>\n";
    s << "<text x=\"" << f2(a.px(ridge) + 6) << "\" y=\""
      << f2(a.py(rf.peak) + (rf.dashed ? 16 : -8)) << "\" fill=\"" << rf.color << "\">"
      << esc("ridge " + fmt_fixed(ridge, ridge < 10 ? 1 : 0) + " FLOP/B") << "</text>\n";
  }
  // memory-roof label along the slope
  if (!roofs.empty() && roofs[0].bw > 0) {
    const double xl = std::max(a.xlo * 2, a.ylo / roofs[0].bw * 2);
    if (xl < a.xhi)
      s << "<text x=\"" << f2(a.px(xl)) << "\" y=\"" << f2(a.py(roofs[0].bw * xl) - 8)
        << "\" fill=\"" << roofs[0].color << "\">"
        << esc(mlabel + " " + fmt_rate(roofs[0].bw, "B/s")) << "</text>\n";
  }

  // points
  s << "<g class=\"points\">\n";
  int i = 0;
  for (const auto& p : pts) {
    const double cx = a.px(p.x), cy = a.py(p.y);
    s << "<circle class=\"op\" data-stage=\"" << esc(p.stage) << "\" data-op=\"" << esc(p.name)
      << "\" cx=\"" << f2(cx) << "\" cy=\"" << f2(cy) << "\" r=\"5\" fill=\""
      << stage_color(p.stage) << "\" fill-opacity=\"" << (p.measured ? "0.9" : "0.45")
      << "\" stroke=\"#000000\" stroke-width=\"0.5\"><title>"
      << esc(p.stage + " " + p.name + ": " + fmt_fixed(p.x, p.x < 10 ? 2 : 0) + " FLOP/B, " +
             fmt_rate(p.y, "FLOP/s") + ", " + fmt_ms(p.time_ms) +
             (p.measured ? " measured" : " (floor/expected)"))
      << "</title></circle>\n";
    const double dy = (i % 2 == 0) ? -7 : 14;
    s << "<text class=\"op-label\" x=\"" << f2(cx + 7) << "\" y=\"" << f2(cy + dy)
      << "\" font-size=\"10\" fill=\"" << stage_color(p.stage) << "\">" << esc(p.name)
      << "</text>\n";
    ++i;
  }
  s << "</g>\n";

  // legend
  double ly = kTop + 10;
  const double lx = kWidth - kRight + 16;
  s << "<g class=\"legend\">\n";
  for (const auto& rf : roofs) {
    s << "<line x1=\"" << lx << "\" y1=\"" << ly << "\" x2=\"" << lx + 24 << "\" y2=\"" << ly
      << "\" stroke=\"" << rf.color << "\" stroke-width=\"2\""
      << (rf.dashed ? " stroke-dasharray=\"6,4\"" : "") << "/>\n";
    s << "<text x=\"" << lx + 30 << "\" y=\"" << ly + 4 << "\" font-size=\"11\">" << esc(rf.label)
      << "</text>\n";
    ly += 18;
  }
  for (const char* st : {"prefill", "decode", "sample"}) {
    s << "<circle cx=\"" << lx + 12 << "\" cy=\"" << ly << "\" r=\"5\" fill=\"" << stage_color(st)
      << "\"/>\n<text x=\"" << lx + 30 << "\" y=\"" << ly + 4 << "\" font-size=\"11\">" << st
      << " ops</text>\n";
    ly += 18;
  }
  const bool any_measured =
      std::any_of(pts.begin(), pts.end(), [](const Point& p) { return p.measured; });
  s << "<text x=\"" << lx << "\" y=\"" << ly + 6 << "\" font-size=\"10\" fill=\"#555555\">"
    << (any_measured ? "points: measured time" : "points: predicted (faint)") << "</text>\n";
  ly += 18;
  if (!skipped.empty()) {
    std::string list;
    for (const auto& k : skipped) list += (list.empty() ? "" : ", ") + k;
    s << "<text x=\"" << lx << "\" y=\"" << ly + 6 << "\" font-size=\"10\" fill=\"#555555\">"
      << "not plotted (no FLOPs or time):</text>\n";
    ly += 14;
    // wrap the list at about 40 characters
    std::string line;
    std::istringstream words(list);
    std::string w;
    while (words >> w) {
      if (line.size() + w.size() > 40) {
        s << "<text x=\"" << lx << "\" y=\"" << ly + 6 << "\" font-size=\"10\" fill=\"#555555\">"
          << esc(line) << "</text>\n";
        ly += 13;
        line.clear();
      }
      line += (line.empty() ? "" : " ") + w;
    }
    if (!line.empty())
      s << "<text x=\"" << lx << "\" y=\"" << ly + 6 << "\" font-size=\"10\" fill=\"#555555\">"
        << esc(line) << "</text>\n";
  }
  s << "</g>\n</svg>\n";
  return s.str();
}

}  // namespace latprof
