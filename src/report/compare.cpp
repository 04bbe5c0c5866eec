#include "report/compare.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <map>

#include "core/error.hpp"
#include "core/format.hpp"

namespace latprof {

namespace {

const double kNaN = std::nan("");

nlohmann::json num(double v) {
  return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json();
}

// Relative run-to-run spread of the whole request: stddev / mean of e2e over the repeats.
bool request_cv(const RunReport& r, double* cv) {
  const Percentiles& p = r.metrics.e2e_repeats_ms;
  if (p.count < 2 || !(p.mean > 0)) return false;
  *cv = p.stddev / p.mean;
  return true;
}

CompareCell metric_cell(const RunReport& r, const MetricField& f) {
  CompareCell c;
  c.present = true;
  c.value = f.get(r.metrics);
  double cv = 0;
  if (std::string(f.name) == "e2e_ms") {
    c.sigma_known = r.metrics.e2e_repeats_ms.count >= 2;
    c.sigma = r.metrics.e2e_repeats_ms.stddev;
  } else if (request_cv(r, &cv)) {
    c.sigma_known = true;
    c.sigma = std::fabs(c.value) * cv;
  }
  return c;
}

CompareCell row_cell(const RunReport& r, const Row& row) {
  CompareCell c;
  c.present = true;
  c.value = row.time_ms;
  c.bound = row.bound;
  c.roofline_fraction = row.roofline_fraction;
  const int n = r.run.repeat;
  // Equal fastest and slowest repeats: one sample (e.g. decode ops under CUDA graphs).
  if (n >= 2 && row.time_max_ms > row.time_min_ms) {
    c.sigma_known = true;
    c.sigma = (row.time_max_ms - row.time_min_ms) / expected_normal_range(n);
  }
  return c;
}

CompareDelta delta(const CompareCell& a, const CompareCell& b, bool higher_is_better) {
  CompareDelta d;
  d.present = a.present && b.present;
  if (!d.present) return d;
  d.diff = b.value - a.value;
  d.rel = a.value != 0 ? d.diff / a.value : kNaN;
  if (higher_is_better)
    d.speedup = a.value > 0 ? b.value / a.value : kNaN;
  else
    d.speedup = b.value > 0 ? a.value / b.value : kNaN;
  d.spread_known = a.sigma_known && b.sigma_known;
  d.noise = d.spread_known && std::fabs(d.diff) <= 2.0 * std::hypot(a.sigma, b.sigma);
  d.bound_changed = !a.bound.empty() && !b.bound.empty() && a.bound != b.bound;
  return d;
}

void fill_deltas(CompareLine& l) {
  l.deltas.clear();
  for (const auto& c : l.cells) l.deltas.push_back(delta(l.cells[0], c, l.higher_is_better));
}

// ---- text formatting --------------------------------------------------------------------------

std::string fmt_value(const std::string& unit, double v) {
  if (!std::isfinite(v)) return "n/a";
  if (unit == "ms") return fmt_ms(v);
  if (unit == "token/s") return fmt_rate(v, "tok/s");
  if (unit == "1") return fmt_pct(v);
  return fmt_fixed(v, 3);
}

std::string fmt_diff(const std::string& unit, double d, double rel) {
  if (!std::isfinite(d)) return "n/a";
  const char* sign = d > 0 ? "+" : d < 0 ? "-" : "";
  // Fractions (MFU, MBU): the difference in percentage points, as fmt_pct prints it.
  std::string pp = fmt_pct(std::fabs(d));
  pp.pop_back();  // the '%'
  std::string s = unit == "1" ? sign + pp + " pp" : sign + fmt_value(unit, std::fabs(d));
  if (std::isfinite(rel) && unit != "1")
    s += " (" +
         std::string(rel > 0   ? "+"
                     : rel < 0 ? "-"
                               : "") +
         fmt_fixed(std::fabs(rel) * 100, 1) + "%)";
  return s;
}

std::string fmt_speedup(double x) {
  if (!std::isfinite(x)) return "n/a";
  return fmt_fixed(x, x < 10 ? 2 : x < 100 ? 1 : 0) + "x";
}

// How many times faster or slower, in words: "1.80x faster".
std::string fmt_change(double speedup) {
  if (!std::isfinite(speedup)) return "changed";
  if (speedup >= 1) return fmt_speedup(speedup) + " faster";
  return fmt_speedup(1.0 / speedup) + " slower";
}

std::string note_of(const CompareDelta& d) {
  if (!d.present) return "-";
  if (!d.spread_known) return "?";
  return d.noise ? "noise" : "";
}

struct Table {
  std::vector<std::vector<std::string>> rows;  // rows[0]: header
  std::vector<bool> left;                      // per column: left-aligned
};

std::string render_text(const Table& t) {
  if (t.rows.empty()) return "";
  std::vector<size_t> w(t.rows[0].size(), 0);
  for (const auto& r : t.rows)
    for (size_t i = 0; i < r.size() && i < w.size(); ++i) w[i] = std::max(w[i], r[i].size());
  std::string out;
  auto line = [&](const std::vector<std::string>& r) {
    std::string s;
    for (size_t i = 0; i < w.size(); ++i) {
      const std::string& cell = i < r.size() ? r[i] : std::string();
      const std::string pad(w[i] - cell.size(), ' ');
      if (i) s += "  ";
      s += (i < t.left.size() && t.left[i]) ? cell + pad : pad + cell;
    }
    while (!s.empty() && s.back() == ' ') s.pop_back();
    out += s + "\n";
  };
  line(t.rows[0]);
  size_t total = 0;
  for (size_t i = 0; i < w.size(); ++i) total += w[i] + (i ? 2 : 0);
  out += std::string(total, '-') + "\n";
  for (size_t i = 1; i < t.rows.size(); ++i) line(t.rows[i]);
  return out;
}

std::string md_escape(const std::string& s) {
  std::string o;
  for (char ch : s) {
    if (ch == '|')
      o += "\\|";
    else
      o += ch;
  }
  return o;
}

std::string render_md(const Table& t) {
  if (t.rows.empty()) return "";
  std::string out;
  auto line = [&](const std::vector<std::string>& r) {
    out += "|";
    for (const auto& c : r) {
      out += ' ';
      out += md_escape(c);
      out += " |";
    }
    out += "\n";
  };
  line(t.rows[0]);
  out += "|";
  for (size_t i = 0; i < t.rows[0].size(); ++i)
    out += (i < t.left.size() && t.left[i]) ? " :--- |" : " ---: |";
  out += "\n";
  for (size_t i = 1; i < t.rows.size(); ++i) line(t.rows[i]);
  return out;
}

// kind: 0 metrics, 1 stages, 2 ops.
Table make_table(const Comparison& c, const std::vector<CompareLine>& lines, int kind) {
  Table t;
  const size_t n = c.labels.size();
  std::vector<std::string> head;
  if (kind == 2) {
    head = {"stage", "op"};
    t.left = {true, true};
  } else {
    head = {kind == 0 ? "metric" : "stage"};
    t.left = {true};
  }
  const bool bounds = kind != 0;
  for (size_t i = 0; i < n; ++i) {
    head.push_back(c.labels[i]);
    t.left.push_back(false);
    if (bounds) {
      head.push_back("bound");
      t.left.push_back(true);
    }
    if (i == 0) continue;
    for (const char* h : {"diff", "speed-up", "note"}) {
      head.push_back(n > 2 ? std::string(h) + " " + std::to_string(i) : std::string(h));
      t.left.push_back(std::string(h) == "note");
    }
  }
  t.rows.push_back(head);
  for (const auto& l : lines) {
    std::vector<std::string> r;
    if (kind == 2) r.push_back(l.stage);
    r.push_back(l.name);
    for (size_t i = 0; i < n; ++i) {
      const CompareCell& cell = l.cells[i];
      r.push_back(cell.present ? fmt_value(l.unit, cell.value) : "-");
      if (bounds) {
        std::string b = cell.present && !cell.bound.empty() ? cell.bound : "-";
        if (i > 0 && l.deltas[i].bound_changed) b += "*";
        r.push_back(b);
      }
      if (i == 0) continue;
      const CompareDelta& d = l.deltas[i];
      r.push_back(d.present ? fmt_diff(l.unit, d.diff, d.rel) : "-");
      r.push_back(d.present ? fmt_speedup(d.speedup) : "-");
      r.push_back(note_of(d));
    }
    t.rows.push_back(r);
  }
  return t;
}

std::string run_line(const RunInfo& r) {
  return r.model + " " + r.dtype + " on " + r.backend + " (" + r.device + "), input " +
         std::to_string(r.input_tokens) + ", output " + std::to_string(r.output_tokens) +
         ", batch " + std::to_string(r.batch) + ", " + std::to_string(r.repeat) + " repeat(s)";
}

std::string gate_line(const Comparison& c, size_t i) {
  const CompareGate& g = c.gate;
  const double s = g.slower_pct[i];
  std::string w = !std::isfinite(s) ? "not comparable (" + g.metric + " is 0 in the baseline)"
                  : s > 0           ? fmt_fixed(s, 1) + "% worse"
                                    : fmt_fixed(-s, 1) + "% better";
  return g.metric + " of " + c.labels[i] + " is " + w + " than " + c.labels[0] +
         " (limit: " + fmt_fixed(g.limit_pct, 1) + "% worse): " + (g.failed[i] ? "FAIL" : "pass");
}

const char* kLegend =
    "diff and speed-up against the first report (speed-up > 1: better); note: noise = within 2 "
    "standard deviations of the run-to-run spread, ? = spread unknown (fewer than 2 repeats or "
    "one sample); * = bound differs from the first report's";

std::string render(const Comparison& c, bool md) {
  auto table = [&](const Table& t) { return md ? render_md(t) : render_text(t); };
  std::string out;
  if (md) out += "# latprof compare\n\n";
  for (size_t i = 0; i < c.labels.size(); ++i)
    out += (md ? "- **" + md_escape(c.labels[i]) + "**: " : c.labels[i] + ": ") +
           run_line(c.runs[i]) + (i == 0 ? " (baseline)" : "") + "\n";
  if (!c.warnings.empty()) out += "\n";
  for (const auto& w : c.warnings) out += (md ? "> **warning:** " : "warning: ") + w + "\n";
  out += md ? "\n## Metrics\n\n" : "\n";
  out += table(make_table(c, c.metrics, 0));
  out += md ? "\n## Stages\n\n" : "\n";
  out += table(make_table(c, c.stages, 1));
  if (!c.ops.empty()) {
    out += md ? "\n## Operations\n\n" : "\n";
    out += table(make_table(c, c.ops, 2));
  }
  out += "\n" + std::string(md ? "_" : "") + kLegend + (md ? "_" : "") + "\n";
  out += md ? "\n## Verdict\n\n" : "\n";
  for (const auto& v : c.verdicts) out += (md ? "- " : "") + v + "\n";
  if (c.gate.enabled) {
    out += md ? "\n## Regression gate\n\n" : "\n";
    for (size_t i = 1; i < c.labels.size(); ++i)
      out += std::string(md ? "- " : "gate: ") + gate_line(c, i) + "\n";
  }
  return out;
}

std::string verdict(const Comparison& c, size_t i) {
  std::vector<std::string> parts;
  for (const auto& l : c.metrics) {
    if (l.name != "e2e_ms") continue;
    const CompareDelta& d = l.deltas[i];
    parts.push_back(std::string("end-to-end ") +
                    (d.noise ? "unchanged (within run-to-run spread)" : fmt_change(d.speedup)));
  }
  // Stages that do work (have a bound), largest first in the baseline.
  std::vector<const CompareLine*> st;
  for (const auto& l : c.stages) {
    bool work = false;
    for (const auto& cell : l.cells) work = work || !cell.bound.empty();
    if (work && l.deltas[i].present) st.push_back(&l);
  }
  std::stable_sort(st.begin(), st.end(), [](const CompareLine* a, const CompareLine* b) {
    return a->cells[0].value > b->cells[0].value;
  });
  for (const CompareLine* l : st) {
    const CompareDelta& d = l->deltas[i];
    const CompareCell& now = l->cells[i];
    const std::string& was = l->cells[0].bound;
    std::string s = l->name + " ";
    if (d.noise) {
      s += "unchanged";
      if (d.bound_changed) s += ", now " + now.bound + "-bound (was " + was + "-bound)";
    } else {
      s += fmt_change(d.speedup);
      if (d.bound_changed)
        s += ", now " + now.bound + "-bound (was " + was + "-bound)";
      else if (!now.bound.empty())
        s += ", still " + now.bound + "-bound";
      if (now.roofline_fraction > 0) s += ", at " + fmt_pct(now.roofline_fraction) + " of roofline";
    }
    parts.push_back(s);
  }
  std::string v = c.labels[i] + " vs " + c.labels[0] + ": ";
  for (size_t k = 0; k < parts.size(); ++k) v += (k ? "; " : "") + parts[k];
  return v;
}

void add_config_warnings(const std::vector<RunReport>& r, const std::vector<std::string>& labels,
                         std::vector<std::string>& w) {
  using Get = std::function<std::string(const RunReport&)>;
  auto str = [](const nlohmann::json& j, const char* k) {
    return j.is_object() && j.contains(k) && j[k].is_string() ? j[k].get<std::string>()
                                                              : std::string("unknown");
  };
  const std::vector<std::pair<const char*, Get>> fields = {
      {"model", [](const RunReport& x) { return x.run.model; }},
      {"backend", [](const RunReport& x) { return x.run.backend; }},
      {"device", [](const RunReport& x) { return x.run.device; }},
      {"machine (hostname)", [&](const RunReport& x) { return str(x.machine, "hostname"); }},
      {"machine (cpu)", [&](const RunReport& x) { return str(x.machine, "cpu"); }},
      {"input tokens", [](const RunReport& x) { return std::to_string(x.run.input_tokens); }},
      {"output tokens", [](const RunReport& x) { return std::to_string(x.run.output_tokens); }},
      {"batch", [](const RunReport& x) { return std::to_string(x.run.batch); }},
      {"threads", [](const RunReport& x) { return std::to_string(x.run.threads); }},
  };
  for (const auto& [what, get] : fields) {
    bool same = true;
    for (const auto& x : r) same = same && get(x) == get(r[0]);
    if (same) continue;
    std::string s = "the reports differ in " + std::string(what) + ": ";
    for (size_t i = 0; i < r.size(); ++i) s += (i ? ", " : "") + get(r[i]) + " (" + labels[i] + ")";
    w.push_back(s + "; differences are not from the precision alone");
  }
  // The machine's state, which a shared machine changes from one minute to the next: the memory
  // roof each run measured around itself, and how far apart its threads' cores were.
  auto spread = [&](const char* what, const std::function<double(const RunReport&)>& get,
                    double ratio, const char* unit, double scale, const char* why) {
    double lo = 0, hi = 0;
    for (const auto& x : r) {
      const double v = get(x);
      if (!(v > 0)) return;  // not measured in every report
      lo = lo > 0 ? std::min(lo, v) : v;
      hi = std::max(hi, v);
    }
    if (hi <= lo * ratio) return;
    std::string s = std::string("the runs ") + what + ": ";
    for (size_t i = 0; i < r.size(); ++i)
      s += (i ? ", " : "") + fmt_fixed(get(r[i]) / scale, 1) + " " + unit + " (" + labels[i] + ")";
    w.push_back(s + "; " + why);
  };
  spread(
      "ran at different memory bandwidths (each the mean of the reads around it)",
      [](const RunReport& x) { return x.ceilings.mem_bw_bytes_per_s; }, 1.2, "GB/s", 1e9,
      "the machine was faster in some, so time differences are not from the precision alone; "
      "rerun them back to back, or compare MBU");
  spread(
      "had their threads' cores at different distances (a cache line's trip, before each run)",
      [](const RunReport& x) {
        const nlohmann::json& ci = x.ceilings_info;
        return ci.is_object() && ci.contains("core_to_core_ns_before") &&
                       ci["core_to_core_ns_before"].is_number()
                   ? ci["core_to_core_ns_before"].get<double>()
                   : 0.0;
      },
      2.0, "ns", 1.0,
      "the thread pool's synchronisation cost differs between them (on a VM the host placed the "
      "vCPUs differently)");
  // The time the machine took from each run's decode steps (the hypervisor's steal, other
  // processes): where one lost a noticeable share, its TPOT holds time that is not the engine's.
  constexpr double kOffCpuShare = 0.05;
  bool measured = true, noticeable = false;
  for (const auto& x : r) {
    measured = measured && x.metrics.decode_offcpu_share >= 0;
    noticeable = noticeable || x.metrics.decode_offcpu_share >= kOffCpuShare;
  }
  if (measured && noticeable) {
    std::string s =
        "the machine took time from the runs' decode steps (steal, other processes; "
        "metrics.decode_offcpu_ms): ";
    for (size_t i = 0; i < r.size(); ++i)
      s += (i ? ", " : "") + fmt_ms(r[i].metrics.decode_offcpu_ms) + " a step, " +
           fmt_pct(r[i].metrics.decode_offcpu_share) + " (" + labels[i] + ")";
    w.push_back(s +
                "; TPOT and MBU include it, so time differences are not from the precision "
                "alone; compare the median steps (ITL p50), or rerun them on a quieter machine");
  }
  for (size_t i = 0; i < r.size(); ++i) {
    for (const auto& ch : r[i].checks)
      if (ch.subject == "decode_step_ms") {
        w.push_back(labels[i] +
                    "'s decode steps changed speed during its run: its figures mix "
                    "two states of the machine");
        break;
      }
    if (r[i].run.repeat < 2)
      w.push_back(labels[i] + " has " + std::to_string(r[i].run.repeat) +
                  " repeat: its run-to-run spread is unknown, so no difference can be called "
                  "noise; run with --repeat 3 or more");
    int errors = 0;
    for (const auto& ch : r[i].checks) errors += ch.level == "error";
    if (errors)
      w.push_back(labels[i] + " has " + std::to_string(errors) +
                  " physics check error(s): its timings may be wrong");
  }
}

}  // namespace

double expected_normal_range(int n) {
  LATPROF_ASSERT(n >= 2, "the range needs at least 2 samples");
  static std::map<int, double> cache;
  if (auto it = cache.find(n); it != cache.end()) return it->second;
  // d2(n) = integral over x of 1 - Phi(x)^n - (1 - Phi(x))^n (trapezoid; the integrand is
  // below 1e-20 outside |x| < 12 for n <= 1000).
  const double h = 1e-3;
  double sum = 0;
  for (double x = -12; x <= 12; x += h) {
    const double phi = 0.5 * std::erfc(-x / std::sqrt(2.0));
    sum += 1 - std::pow(phi, n) - std::pow(1 - phi, n);
  }
  const double d2 = sum * h;
  cache[n] = d2;
  return d2;
}

bool CompareGate::any_failed() const {
  for (bool f : failed)
    if (f) return true;
  return false;
}

Comparison compare_reports(const std::vector<RunReport>& reports, const CompareOptions& o) {
  if (reports.size() < 2) usage_error("compare needs at least 2 reports");
  if (!o.labels.empty() && o.labels.size() != reports.size())
    usage_error("compare: " + std::to_string(o.labels.size()) + " labels for " +
                std::to_string(reports.size()) + " reports");
  Comparison c;
  // Default labels: the precisions (the dtype, and the KV cache's type when it is not fp16) when
  // they tell the reports apart, else "precision #n".
  auto precision = [](const RunReport& x) {
    return x.run.dtype + (kv_dtype_of(x.run) == "fp16" ? "" : " kv-" + x.run.kv_dtype);
  };
  bool distinct = true;
  for (size_t i = 0; i < reports.size(); ++i)
    for (size_t k = 0; k < i; ++k)
      distinct = distinct && precision(reports[i]) != precision(reports[k]);
  for (size_t i = 0; i < reports.size(); ++i) {
    const std::string dt = precision(reports[i]);
    c.labels.push_back(!o.labels.empty() ? o.labels[i]
                       : distinct        ? dt
                                         : dt + " #" + std::to_string(i + 1));
    c.runs.push_back(reports[i].run);
  }
  add_config_warnings(reports, c.labels, c.warnings);

  for (const auto& f : metric_fields()) {
    CompareLine l;
    l.name = f.name;
    l.unit = f.unit;
    l.higher_is_better = f.higher_is_better;
    for (const auto& r : reports) l.cells.push_back(metric_cell(r, f));
    fill_deltas(l);
    c.metrics.push_back(l);
  }

  // Stages and ops, matched by (stage, name), in the order they first appear.
  auto rows = [&](bool ops) {
    std::vector<CompareLine> lines;
    std::map<std::pair<std::string, std::string>, size_t> index;
    for (size_t i = 0; i < reports.size(); ++i) {
      for (const Row& row : ops ? reports[i].ops : reports[i].stages) {
        const auto key = std::make_pair(ops ? row.stage : std::string(), row.name);
        auto it = index.find(key);
        if (it == index.end()) {
          CompareLine l;
          l.stage = key.first;
          l.name = row.name;
          l.unit = "ms";
          l.cells.resize(reports.size());
          it = index.emplace(key, lines.size()).first;
          lines.push_back(l);
        }
        lines[it->second].cells[i] = row_cell(reports[i], row);
      }
    }
    for (auto& l : lines) fill_deltas(l);
    return lines;
  };
  c.stages = rows(false);
  c.ops = rows(true);
  for (size_t i = 1; i < reports.size(); ++i) c.verdicts.push_back(verdict(c, i));

  if (o.fail_if_slower_pct >= 0) {
    const MetricField* f = find_metric_field(o.gate_metric);
    if (!f) {
      std::string names;
      for (const auto& m : metric_fields())
        names += (names.empty() ? "" : ", ") + std::string(m.name);
      usage_error("--metric " + o.gate_metric + " is not a metric; choose one of: " + names);
    }
    CompareGate& g = c.gate;
    g.enabled = true;
    g.metric = f->name;
    g.limit_pct = o.fail_if_slower_pct;
    const double base = f->get(reports[0].metrics);
    for (const auto& r : reports) {
      const double v = f->get(r.metrics);
      double s = base != 0 ? (v - base) / base * 100 : (v == base ? 0 : kNaN);
      if (f->higher_is_better) s = -s;
      g.slower_pct.push_back(s);
      g.failed.push_back(!std::isfinite(s) || s > g.limit_pct);
    }
    g.failed[0] = false;
  }
  return c;
}

std::string compare_text(const Comparison& c) {
  return render(c, false);
}
std::string compare_markdown(const Comparison& c) {
  return render(c, true);
}

std::string gate_failure_message(const Comparison& c) {
  if (!c.gate.enabled) return "";
  std::string msg;
  for (size_t i = 1; i < c.labels.size(); ++i)
    if (c.gate.failed[i]) msg += (msg.empty() ? "regression: " : "; ") + gate_line(c, i);
  return msg;
}

nlohmann::json compare_json(const Comparison& c) {
  nlohmann::json j;
  j["kind"] = "latprof-compare";
  j["schema_version"] = kSchemaVersion;
  j["baseline"] = c.labels[0];
  j["noise_rule"] =
      "noise when |later - baseline| <= 2 * sqrt(sigma_baseline^2 + sigma_later^2); sigma: "
      "e2e_repeats_ms.stddev for e2e_ms, value * e2e stddev / e2e mean for other metrics, "
      "(time_max_ms - time_min_ms) / d2(repeats) for stages and ops";
  j["reports"] = nlohmann::json::array();
  for (size_t i = 0; i < c.labels.size(); ++i) {
    const RunInfo& r = c.runs[i];
    j["reports"].push_back({{"label", c.labels[i]},
                            {"model", r.model},
                            {"dtype", r.dtype},
                            {"kv_dtype", kv_dtype_of(r)},
                            {"backend", r.backend},
                            {"device", r.device},
                            {"input_tokens", r.input_tokens},
                            {"output_tokens", r.output_tokens},
                            {"batch", r.batch},
                            {"repeat", r.repeat}});
  }
  j["warnings"] = c.warnings;
  auto lines = [&](const std::vector<CompareLine>& ls, bool rows) {
    nlohmann::json a = nlohmann::json::array();
    for (const auto& l : ls) {
      nlohmann::json e;
      if (rows && !l.stage.empty()) e["stage"] = l.stage;
      e["name"] = l.name;
      e["unit"] = l.unit;
      if (!rows) e["higher_is_better"] = l.higher_is_better;
      e["values"] = nlohmann::json::array();
      e["sigma"] = nlohmann::json::array();
      if (rows) {
        e["bound"] = nlohmann::json::array();
        e["roofline_fraction"] = nlohmann::json::array();
      }
      e["vs_baseline"] = nlohmann::json::array();
      for (size_t i = 0; i < l.cells.size(); ++i) {
        const CompareCell& cell = l.cells[i];
        e["values"].push_back(cell.present ? num(cell.value) : nlohmann::json());
        e["sigma"].push_back(cell.present && cell.sigma_known ? num(cell.sigma) : nlohmann::json());
        if (rows) {
          e["bound"].push_back(cell.present && !cell.bound.empty() ? nlohmann::json(cell.bound)
                                                                   : nlohmann::json());
          e["roofline_fraction"].push_back(cell.present ? num(cell.roofline_fraction)
                                                        : nlohmann::json());
        }
        const CompareDelta& d = l.deltas[i];
        if (i == 0 || !d.present) {
          e["vs_baseline"].push_back(nullptr);
          continue;
        }
        nlohmann::json dj = {{"diff", num(d.diff)},
                             {"rel", num(d.rel)},
                             {"speedup", num(d.speedup)},
                             {"noise", d.noise},
                             {"spread_known", d.spread_known}};
        if (rows) dj["bound_changed"] = d.bound_changed;
        e["vs_baseline"].push_back(dj);
      }
      a.push_back(e);
    }
    return a;
  };
  j["metrics"] = lines(c.metrics, false);
  j["stages"] = lines(c.stages, true);
  j["ops"] = lines(c.ops, true);
  j["verdicts"] = c.verdicts;
  if (c.gate.enabled) {
    nlohmann::json g = {{"metric", c.gate.metric},
                        {"fail_if_slower_pct", c.gate.limit_pct},
                        {"failed", c.gate.any_failed()},
                        {"results", nlohmann::json::array()}};
    for (size_t i = 1; i < c.labels.size(); ++i)
      g["results"].push_back({{"label", c.labels[i]},
                              {"slower_pct", num(c.gate.slower_pct[i])},
                              {"failed", bool(c.gate.failed[i])}});
    j["gate"] = g;
  } else {
    j["gate"] = nullptr;
  }
  return j;
}

std::string compare_text(const std::vector<RunReport>& r, const CompareOptions& o) {
  return compare_text(compare_reports(r, o));
}
nlohmann::json compare_json(const std::vector<RunReport>& r, const CompareOptions& o) {
  return compare_json(compare_reports(r, o));
}

}  // namespace latprof
