#include "load/traces.hpp"

#include <cmath>
#include <ctime>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.hpp"

namespace latprof::load {

namespace {

constexpr int64_t kMaxTokens = 1'000'000'000;
constexpr size_t kMaxLine = size_t(1) << 20;

std::vector<std::string> split_csv(const std::string& line) {
  std::vector<std::string> out;
  std::string cur;
  std::stringstream ss(line);
  while (std::getline(ss, cur, ',')) {
    while (!cur.empty() && (cur.back() == '\r' || cur.back() == ' ')) cur.pop_back();
    while (!cur.empty() && cur.front() == ' ') cur.erase(cur.begin());
    out.push_back(cur);
  }
  return out;
}

// "2023-11-16 18:15:46.6805900" (UTC) -> ms since the epoch; NaN when it is not that.
double azure_time_ms(const std::string& s) {
  std::tm tm{};
  const char* end = strptime(s.c_str(), "%Y-%m-%d %H:%M:%S", &tm);
  if (!end) return std::nan("");
  double frac = 0;
  if (*end == '.') {
    double scale = 0.1;
    for (++end; *end >= '0' && *end <= '9'; ++end, scale /= 10) frac += (*end - '0') * scale;
  }
  if (*end) return std::nan("");
  return (double(timegm(&tm)) + frac) * 1e3;
}

}  // namespace

std::vector<workload::DatasetEntry> read_trace(const std::string& path, int64_t max_entries,
                                               std::vector<std::vector<int64_t>>* hash_ids) {
  if (hash_ids) hash_ids->clear();
  std::ifstream in(path, std::ios::binary);
  if (!in) usage_error("--trace-replay " + path + ": cannot open the file");
  std::vector<workload::DatasetEntry> out;
  std::string line;
  int64_t lineno = 0;
  auto bad = [&](const std::string& what) {
    usage_error("--trace-replay " + path + ":" + std::to_string(lineno) + ": " + what);
  };
  auto tokens = [&](int64_t v, const char* name) {
    if (v < 1 || v > kMaxTokens) bad(std::string(name) + " must be a whole number from 1 to 1e9");
    return v;
  };
  int first = in.peek();
  while (first == ' ' || first == '\n' || first == '\r' || first == '\t') {
    in.get();
    first = in.peek();
  }
  const bool mooncake = first == '{';
  int col_t = -1, col_in = -1, col_out = -1;
  while (std::getline(in, line)) {
    ++lineno;
    if (line.size() > kMaxLine) bad("line longer than 1 MiB");
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    if (int64_t(out.size()) >= max_entries) break;
    workload::DatasetEntry e;
    if (mooncake) {
      const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
      if (j.is_discarded() || !j.is_object()) bad("not a JSON object");
      for (const char* k : {"timestamp", "input_length", "output_length"})
        if (!j.contains(k) || !j[k].is_number())
          bad(std::string("missing or non-numeric \"") + k +
              "\" (Mooncake: timestamp in ms, "
              "input_length, output_length)");
      const double t = j["timestamp"].get<double>();
      if (!std::isfinite(t) || t < 0) bad("\"timestamp\" must be a number of ms >= 0");
      if (!j["input_length"].is_number_integer() || !j["output_length"].is_number_integer())
        bad("input_length and output_length must be whole numbers");
      e.arrival_ms = t;
      e.input_tokens = tokens(j["input_length"].get<int64_t>(), "input_length");
      e.output_tokens = tokens(j["output_length"].get<int64_t>(), "output_length");
      std::vector<int64_t> ids;
      if (j.contains("hash_ids")) {
        if (!j["hash_ids"].is_array()) bad("\"hash_ids\" must be an array of integers");
        for (const auto& h : j["hash_ids"]) {
          if (!h.is_number_integer()) bad("\"hash_ids\" must be an array of integers");
          ids.push_back(h.get<int64_t>());
        }
      }
      if (hash_ids) hash_ids->push_back(std::move(ids));
    } else {
      const auto cells = split_csv(line);
      if (col_t < 0) {  // the header
        for (size_t i = 0; i < cells.size(); ++i) {
          if (cells[i] == "TIMESTAMP") col_t = int(i);
          if (cells[i] == "ContextTokens") col_in = int(i);
          if (cells[i] == "GeneratedTokens") col_out = int(i);
        }
        if (col_t < 0 || col_in < 0 || col_out < 0)
          bad("not a Mooncake JSONL trace (first byte '{') nor an Azure CSV trace (header with "
              "TIMESTAMP, ContextTokens, GeneratedTokens)");
        continue;
      }
      const int need = std::max({col_t, col_in, col_out});
      if (int(cells.size()) <= need) bad("fewer columns than the header");
      const double t = azure_time_ms(cells[size_t(col_t)]);
      if (!std::isfinite(t))
        bad("TIMESTAMP '" + cells[size_t(col_t)] + "' is not YYYY-MM-DD HH:MM:SS[.fraction]");
      auto integer = [&](const std::string& c, const char* name) {
        char* end = nullptr;
        errno = 0;
        const long long v = std::strtoll(c.c_str(), &end, 10);
        if (c.empty() || *end || errno)
          bad(std::string(name) + " '" + c + "' is not a whole number");
        return tokens(v, name);
      };
      e.arrival_ms = t;
      e.input_tokens = integer(cells[size_t(col_in)], "ContextTokens");
      e.output_tokens = integer(cells[size_t(col_out)], "GeneratedTokens");
      if (hash_ids) hash_ids->emplace_back();
    }
    out.push_back(std::move(e));
  }
  if (out.empty()) usage_error("--trace-replay " + path + " holds no requests");
  return out;
}

}  // namespace latprof::load
