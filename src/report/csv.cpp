#include "report/csv.hpp"

#include <cmath>
#include <cstdint>

namespace latprof {

namespace {

std::string quote(const std::string& s) {
  if (s.find_first_of(",\"\r\n") == std::string::npos) return s;
  std::string o = "\"";
  for (char c : s) {
    if (c == '"') o += '"';
    o += c;
  }
  return o + "\"";
}

// Shortest text that reads back as the same double; empty when not finite.
// Integral values (counts, FLOPs, bytes) without a fractional part.
std::string number(double v) {
  if (!std::isfinite(v)) return "";
  if (std::fabs(v) < 9e15 && std::floor(v) == v) return std::to_string(int64_t(v));
  return nlohmann::json(v).dump();
}

nlohmann::json num(double v) {
  return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json();
}

std::string join(const std::vector<std::string>& cells) {
  std::string line;
  for (size_t i = 0; i < cells.size(); ++i) {
    if (i) line += ',';
    line += quote(cells[i]);
  }
  return line + "\r\n";
}

}  // namespace

std::vector<std::string> csv_header() {
  std::vector<std::string> h = {"kind", "model", "dtype", "backend", "device", "stage", "op"};
  for (const auto& f : row_fields()) h.push_back(f.name);
  h.push_back("bound");
  return h;
}

std::string report_csv(const RunReport& r) {
  std::string out = join(csv_header());
  auto row = [&](const Row& x, bool op) {
    std::vector<std::string> c = {op ? "op" : "stage", r.run.model,  r.run.dtype,
                                  r.run.backend,       r.run.device, op ? x.stage : x.name,
                                  op ? x.name : ""};
    for (const auto& f : row_fields()) c.push_back(number(f.get(x)));
    c.push_back(x.bound);
    out += join(c);
  };
  for (const Row& s : r.stages) row(s, false);
  for (const Row& o : r.ops) row(o, true);
  return out;
}

const std::vector<RequestColumn>& request_columns() {
  using V = const RequestView&;
  auto itl = [](V v, double Percentiles::*stat) {
    return v.itl_ms.empty() ? std::string() : number(percentiles(v.itl_ms).*stat);
  };
  static const std::vector<RequestColumn> cols = {
      {"id", "", "request number, from 0", [](V v) { return std::to_string(v.id); }},
      {"input_tokens", "token", "prompt tokens, with BOS",
       [](V v) { return std::to_string(v.input_tokens); }},
      {"output_tokens", "token", "tokens generated",
       [](V v) { return std::to_string(v.output_tokens); }},
      {"arrival_ms", "ms", "when it arrived, from the first arrival",
       [](V v) { return number(v.arrival_ms); }},
      {"queue_ms", "ms", "arrival to the start of its first engine step",
       [](V v) { return number(v.queue_ms); }},
      {"ttft_ms", "ms", "arrival to its first token", [](V v) { return number(v.ttft_ms); }},
      {"tpot_ms", "ms", "(last token - first token) / (tokens - 1); empty with one token",
       [](V v) { return number(v.tpot_ms); }},
      {"e2e_ms", "ms", "arrival to its last token", [](V v) { return number(v.e2e_ms); }},
      {"itl_p50_ms", "ms", "median gap between its successive tokens; empty with one token",
       [=](V v) { return itl(v, &Percentiles::p50); }},
      {"itl_p99_ms", "ms", "99th percentile of its gaps",
       [=](V v) { return itl(v, &Percentiles::p99); }},
      {"itl_max_ms", "ms", "its longest gap", [=](V v) { return itl(v, &Percentiles::max); }},
      {"preemptions", "count", "times it was preempted and recomputed",
       [](V v) { return std::to_string(v.preemptions); }},
      {"prefix_hit_tokens", "token", "prompt tokens found in the prefix cache",
       [](V v) { return std::to_string(v.prefix_hit_tokens); }},
      {"slo_met", "", "true when every --slo threshold held (true when none is set)",
       [](V v) { return v.slo_met ? std::string(*v.slo_met ? "true" : "false") : std::string(); }},
      {"class_compute_ms", "ms", "latency class: own work bound by compute (and host work)",
       [](V v) { return number(v.compute_ms); }},
      {"class_memory_ms", "ms", "latency class: own work bound by memory bandwidth",
       [](V v) { return number(v.memory_ms); }},
      {"class_communication_ms", "ms", "latency class: between devices; 0 on one device",
       [](V v) { return number(v.communication_ms); }},
      {"class_scheduling_ms", "ms",
       "latency class: the rest (queueing, sharing steps, waiting between steps); the four add "
       "up to e2e_ms",
       [](V v) { return number(v.scheduling_ms); }},
  };
  return cols;
}

std::vector<std::string> requests_csv_header() {
  std::vector<std::string> h;
  for (const auto& c : request_columns()) h.push_back(c.name);
  return h;
}

std::string requests_csv(const RunReport& r) {
  std::string out = join(requests_csv_header());
  for (const RequestView& v : request_views(r)) {
    std::vector<std::string> cells;
    for (const auto& c : request_columns()) cells.push_back(c.cell(v));
    out += join(cells);
  }
  return out;
}

std::string csv_export(const RunReport& r) {
  return is_load_report(r) ? requests_csv(r) : report_csv(r);
}

std::vector<std::string> csv_split(const std::string& line) {
  std::vector<std::string> cells(1);
  bool quoted = false;
  for (size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (quoted) {
      if (c == '"' && i + 1 < line.size() && line[i + 1] == '"') {
        cells.back() += '"';
        ++i;
      } else if (c == '"') {
        quoted = false;
      } else {
        cells.back() += c;
      }
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      cells.emplace_back();
    } else if (c != '\r' && c != '\n') {
      cells.back() += c;
    }
  }
  return cells;
}

const std::vector<SummaryField>& load_summary_fields() {
  static const std::vector<SummaryField> f = {
      {"ttft_p50_ms", "ttft_ms", "p50"},
      {"ttft_p99_ms", "ttft_ms", "p99"},
      {"tpot_p50_ms", "tpot_ms", "p50"},
      {"tpot_p99_ms", "tpot_ms", "p99"},
      {"itl_p99_ms", "itl_ms", "p99"},
      {"e2e_p99_ms", "e2e_ms", "p99"},
      {"request_throughput", "request_throughput", nullptr},
      {"output_tokens_per_s", "output_tokens_per_s", nullptr},
      {"goodput", "goodput", nullptr},
      {"slo_attainment", "slo_attainment", nullptr},
  };
  return f;
}

nlohmann::json jsonl_record(const RunReport& r) {
  auto str = [](const nlohmann::json& j, const char* k) {
    return j.is_object() && j.contains(k) ? j[k] : nlohmann::json();
  };
  nlohmann::json j = {
      {"timestamp", r.created_utc},        {"commit", str(r.tool, "git_commit")},
      {"dirty", str(r.tool, "git_dirty")}, {"tool_version", str(r.tool, "version")},
      {"schema_version", kSchemaVersion},  {"hostname", str(r.machine, "hostname")}};
  j.update(run_identity_json(r));
  for (const auto& f : metric_fields()) j[f.name] = num(f.get(r.metrics));
  j["e2e_stddev_ms"] =
      r.metrics.e2e_repeats_ms.count >= 2 ? num(r.metrics.e2e_repeats_ms.stddev) : nlohmann::json();
  if (is_load_report(r)) {
    j["requests"] = str(r.load, "requests");
    j["rate"] = str(r.load, "rate");
    j["slo"] = str(r.load, "slo");
    const nlohmann::json& s = r.summary;
    for (const auto& f : load_summary_fields()) {
      const nlohmann::json v = str(s, f.key);
      j[f.name] = f.stat ? str(v, f.stat) : v;
    }
  }
  return j;
}

}  // namespace latprof
