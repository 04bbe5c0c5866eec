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
  return j;
}

}  // namespace latprof
