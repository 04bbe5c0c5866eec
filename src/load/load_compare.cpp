#include "load/load_compare.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <random>
#include <sstream>

#include "core/error.hpp"
#include "core/format.hpp"
#include "core/input_file.hpp"
#include "report/report.hpp"

namespace latprof::load {

namespace {

constexpr int kResamples = 200;

nlohmann::json read_report(const std::string& path) {
  const nlohmann::json j =
      nlohmann::json::parse(read_input_file(path, "report", kMaxReportBytes), nullptr, false);
  if (j.is_discarded() || !j.is_object() || j.value("kind", "") != "load")
    usage_error(path +
                ": not a latprof load report (no \"kind\": \"load\"); compare load "
                "reports with load reports and run reports with run reports");
  if (!j.contains("points") && !(j.contains("summary") && j.contains("requests")) &&
      !j.contains("max_rate"))
    usage_error(path + ": a load report without summary, requests or points");
  return j;
}

// Linear interpolation between closest ranks (as report/report.cpp's percentiles).
double quantile(std::vector<double>& v, double q) {
  std::sort(v.begin(), v.end());
  const double pos = q * double(v.size() - 1);
  const size_t lo = size_t(std::floor(pos)), hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (pos - double(lo));
}

// The bootstrap standard error of the q-quantile of xs.
double bootstrap_se(const std::vector<double>& xs, double q) {
  if (xs.size() < 2) return NAN;
  std::mt19937_64 rng(42);
  std::uniform_int_distribution<size_t> pick(0, xs.size() - 1);
  std::vector<double> est, s(xs.size());
  for (int b = 0; b < kResamples; ++b) {
    for (double& x : s) x = xs[pick(rng)];
    est.push_back(quantile(s, q));
  }
  double mean = 0, var = 0;
  for (double e : est) mean += e;
  mean /= double(est.size());
  for (double e : est) var += (e - mean) * (e - mean);
  return std::sqrt(var / double(est.size() - 1));
}

struct Metric {
  const char* name;
  const char* unit;
  bool higher_is_better;
  const char* field;  // a request field (percentiles) or a summary field (the rest)
  double q;           // < 0: a summary figure, spread unknown
};

const Metric kMetrics[] = {
    {"ttft_p50", "ms", false, "ttft_ms", 0.5},
    {"ttft_p99", "ms", false, "ttft_ms", 0.99},
    {"tpot_p50", "ms", false, "tpot_ms", 0.5},
    {"tpot_p99", "ms", false, "tpot_ms", 0.99},
    {"itl_p50", "ms", false, "itl_ms", 0.5},
    {"itl_p99", "ms", false, "itl_ms", 0.99},
    {"e2e_p50", "ms", false, "e2e_ms", 0.5},
    {"e2e_p99", "ms", false, "e2e_ms", 0.99},
    {"client_queue_p99", "ms", false, "client_queue_ms", 0.99},
    {"output_tokens_per_s", "tokens/s", true, "output_tokens_per_s", -1},
    {"request_throughput", "req/s", true, "request_throughput", -1},
    {"goodput", "req/s", true, "goodput", -1},
    {"requests_failed", "requests", false, "requests_failed", -1},
};

const Metric* find_metric(std::string name) {
  for (const char* suffix : {"_ms"})
    if (name.ends_with(suffix)) name.resize(name.size() - std::string(suffix).size());
  if (name == "e2e" || name == "ttft" || name == "tpot" || name == "itl") name += "_p50";
  for (const auto& m : kMetrics)
    if (name == m.name) return &m;
  return nullptr;
}

struct Cell {
  bool present = false;
  double value = 0, se = NAN;
};

Cell cell_of(const nlohmann::json& point, const Metric& m) {
  Cell c;
  if (m.q < 0) {
    const auto& v = point["summary"][m.field];
    if (v.is_number()) c = {true, v.get<double>(), NAN};
    return c;
  }
  std::vector<double> xs;
  for (const auto& r : point["requests"]) {
    if (!r["error"].is_null()) continue;
    const auto& v = r[m.field];
    if (v.is_number()) xs.push_back(v.get<double>());
    if (v.is_array())
      for (const auto& x : v)
        if (x.is_number()) xs.push_back(x.get<double>());
  }
  if (xs.empty()) return c;
  c.present = true;
  c.se = bootstrap_se(xs, m.q);
  c.value = quantile(xs, m.q);
  return c;
}

std::vector<std::pair<std::string, const nlohmann::json*>> points_of(const nlohmann::json& r) {
  std::vector<std::pair<std::string, const nlohmann::json*>> out;
  auto label = [](const nlohmann::json& p) {
    if (p.contains("rate"))
      return "rate " + (p["rate"].is_string() ? p["rate"].get<std::string>() : p["rate"].dump());
    if (p.contains("concurrency")) return "concurrency " + p["concurrency"].dump();
    return std::string("run");
  };
  if (r.contains("points"))
    for (const auto& p : r["points"]) out.emplace_back(label(p), &p);
  else if (r.contains("max_rate"))
    for (const auto& p : r["max_rate"]["probes"]) out.emplace_back(label(p), &p);
  else
    out.emplace_back(label(r), &r);
  return out;
}

std::string fmt_value(double v) {
  std::ostringstream o;
  o.precision(4);
  o << v;
  return o.str();
}

}  // namespace

bool is_load_report(const std::string& path) {
  // Only a regular file can be read twice: a pipe or FIFO is left to the run-report reader
  // (load reports are compared from files).
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return false;
  try {
    const nlohmann::json j =
        nlohmann::json::parse(read_input_file(path, "report", kMaxReportBytes), nullptr, false);
    return !j.is_discarded() && j.is_object() && j.value("kind", "") == "load";
  } catch (const UsageError&) {
    return false;
  }
}

LoadComparison compare_load_reports(const std::vector<std::string>& paths,
                                    const LoadCompareOptions& o) {
  if (o.labels.size() != paths.size()) usage_error("one label per report");
  std::vector<nlohmann::json> reports;
  for (const auto& p : paths) reports.push_back(read_report(p));
  const Metric* gate = nullptr;
  if (o.fail_if_slower_pct >= 0) {
    gate = find_metric(o.gate_metric);
    if (!gate) {
      std::string names;
      for (const auto& m : kMetrics) names += (names.empty() ? "" : ", ") + std::string(m.name);
      usage_error("--metric " + o.gate_metric + " is not a load metric; choose one of: " + names);
    }
  }
  LoadComparison out;
  nlohmann::json& j = out.json;
  j["kind"] = "latprof-compare-load";
  j["labels"] = o.labels;
  j["noise_rule"] =
      "|diff| <= 2 sqrt(se_a^2 + se_b^2); se: bootstrap standard error of the "
      "percentile over the report's successful requests";
  j["points"] = nlohmann::json::array();
  std::ostringstream t, md;
  t << "latprof compare: load reports against " << o.labels[0] << "\n";
  md << "# latprof compare (load reports)\n\nBaseline: " << o.labels[0] << "\n";
  std::vector<std::string> failures;
  nlohmann::json gate_rows = nlohmann::json::array();
  const auto base_points = points_of(reports[0]);
  for (const auto& [label, base] : base_points) {
    std::vector<const nlohmann::json*> pts;
    for (const auto& r : reports) {
      const nlohmann::json* found = nullptr;
      for (const auto& [l, p] : points_of(r))
        if (l == label) found = p;
      pts.push_back(found);
    }
    t << "\n" << label << "\n  " << std::string(30, ' ');
    md << "\n## " << label << "\n\n| metric |";
    for (const auto& l : o.labels) {
      t << " " << std::string(std::max<int>(1, 24 - int(l.size())), ' ') << l;
      md << " " << l << " |";
    }
    t << "\n";
    md << "\n|---|";
    for (size_t i = 0; i < o.labels.size(); ++i) md << "---:|";
    md << "\n";
    nlohmann::json pj = {{"point", label}, {"metrics", nlohmann::json::array()}};
    for (const Metric& m : kMetrics) {
      std::vector<Cell> cells;
      for (const auto* p : pts) cells.push_back(p ? cell_of(*p, m) : Cell{});
      if (!cells[0].present) continue;
      nlohmann::json mj = {{"name", m.name},
                           {"unit", m.unit},
                           {"higher_is_better", m.higher_is_better},
                           {"values", nlohmann::json::array()},
                           {"se", nlohmann::json::array()},
                           {"diff_pct", nlohmann::json::array()},
                           {"noise", nlohmann::json::array()}};
      char head[64];
      std::snprintf(head, sizeof head, "  %-30s",
                    (std::string(m.name) + " (" + m.unit + ")").c_str());
      t << head;
      md << "| " << m.name << " (" << m.unit << ") |";
      for (size_t i = 0; i < cells.size(); ++i) {
        const Cell& c = cells[i];
        std::string s = "-";
        nlohmann::json diff = nullptr, noise = nullptr;
        if (c.present) {
          s = fmt_value(c.value);
          if (i > 0 && cells[0].value != 0) {
            const double d = c.value - cells[0].value;
            const double pct = d / cells[0].value * 100;
            diff = pct;
            const bool known = std::isfinite(c.se) && std::isfinite(cells[0].se);
            const bool is_noise =
                known && std::abs(d) <= 2 * std::sqrt(c.se * c.se + cells[0].se * cells[0].se);
            noise = known ? nlohmann::json(is_noise) : nlohmann::json();
            s += " (" + std::string(pct >= 0 ? "+" : "") + fmt_fixed(pct, 1) + "%" +
                 (known ? (is_noise ? ", noise" : "") : ", ?") + ")";
            if (gate == &m) {
              const double worse = m.higher_is_better ? -pct : pct;
              const bool failed = worse > o.fail_if_slower_pct;
              gate_rows.push_back({{"point", label},
                                   {"report", o.labels[i]},
                                   {"worse_pct", worse},
                                   {"failed", failed}});
              if (failed)
                failures.push_back(std::string(m.name) + " of " + o.labels[i] + " at " + label +
                                   " is " + fmt_fixed(worse, 1) + "% worse than " + o.labels[0] +
                                   " (limit " + fmt_fixed(o.fail_if_slower_pct, 1) + "%)");
            }
          }
        }
        t << " " << std::string(std::max<int>(1, 24 - int(s.size())), ' ') << s;
        md << " " << s << " |";
        mj["values"].push_back(c.present ? nlohmann::json(c.value) : nlohmann::json());
        mj["se"].push_back(std::isfinite(c.se) ? nlohmann::json(c.se) : nlohmann::json());
        mj["diff_pct"].push_back(diff);
        mj["noise"].push_back(noise);
      }
      t << "\n";
      md << "\n";
      pj["metrics"].push_back(std::move(mj));
    }
    j["points"].push_back(std::move(pj));
  }
  const std::string legend =
      "(+x%: against the first report; noise: within 2 standard errors of the difference, the "
      "bootstrap over each report's requests; ?: spread unknown)";
  t << "\n" << legend << "\n";
  md << "\n" << legend << "\n";
  if (gate) {
    j["gate"] = {{"metric", gate->name},
                 {"fail_if_slower_pct", o.fail_if_slower_pct},
                 {"failed", !failures.empty()},
                 {"rows", gate_rows}};
    t << "gate: " << gate->name << " at most " << fmt_fixed(o.fail_if_slower_pct, 1)
      << "% worse: " << (failures.empty() ? "pass" : "FAIL") << "\n";
  } else {
    j["gate"] = nullptr;
  }
  for (const auto& f : failures)
    out.gate_failure += (out.gate_failure.empty() ? "regression: " : "; ") + f;
  out.text = t.str();
  out.markdown = md.str();
  return out;
}

}  // namespace latprof::load
