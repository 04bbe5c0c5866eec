#include "core/workload.hpp"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.hpp"

namespace latprof::workload {

namespace {

// A finite number, the whole of `text`; nullopt otherwise.
std::optional<double> number(const std::string& text) {
  if (text.empty() || std::isspace(static_cast<unsigned char>(text[0]))) return std::nullopt;
  errno = 0;
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (end != text.c_str() + text.size() || errno == ERANGE || !std::isfinite(v))
    return std::nullopt;
  return v;
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string cur;
  std::istringstream in(s);
  while (std::getline(in, cur, sep)) out.push_back(cur);
  if (!s.empty() && s.back() == sep) out.push_back("");
  return out;
}

// Largest token count a distribution may name: far above any context, far below overflow.
constexpr double kMaxTokens = 1e9;

std::string fmt_num(double v) {
  std::ostringstream o;
  o << v;
  return o.str();
}

}  // namespace

LengthDist LengthDist::parse(const std::string& text, const std::string& flag) {
  const std::string forms = "; use a number, uniform:LO:HI or normal:MEAN:STDDEV";
  const auto parts = split(text, ':');
  auto num = [&](const std::string& p) {
    const auto v = number(p);
    if (!v) usage_error(flag + " '" + text + "': '" + p + "' is not a number" + forms);
    if (*v < 0 || *v > kMaxTokens)
      usage_error(flag + " '" + text + "': " + p + " is outside 0.." + fmt_num(kMaxTokens) +
                  " tokens");
    return *v;
  };
  LengthDist d;
  if (parts.size() == 1) {
    d.kind = Kind::constant;
    d.a = num(parts[0]);
    if (d.a < 1 || d.a != std::floor(d.a))
      usage_error(flag + " must be a whole number of at least 1 token (got '" + text + "')" +
                  forms);
  } else if (parts.size() == 3 && parts[0] == "uniform") {
    d.kind = Kind::uniform;
    d.a = num(parts[1]);
    d.b = num(parts[2]);
    if (d.a != std::floor(d.a) || d.b != std::floor(d.b) || d.a < 1 || d.b < d.a)
      usage_error(flag + " '" + text + "': uniform:LO:HI needs whole numbers 1 <= LO <= HI");
  } else if (parts.size() == 3 && parts[0] == "normal") {
    d.kind = Kind::normal;
    d.a = num(parts[1]);
    d.b = num(parts[2]);
    if (d.a < 1) usage_error(flag + " '" + text + "': the mean must be at least 1 token");
  } else {
    usage_error(flag + " '" + text + "' is not a token count" + forms);
  }
  return d;
}

int64_t LengthDist::sample(std::mt19937_64& rng, int64_t cap) const {
  double v = a;
  if (kind == Kind::uniform) {
    v = double(std::uniform_int_distribution<int64_t>(int64_t(a), int64_t(b))(rng));
  } else if (kind == Kind::normal && b > 0) {
    v = std::round(std::normal_distribution<double>(a, b)(rng));
  }
  return std::clamp<int64_t>(int64_t(std::clamp(v, 1.0, kMaxTokens)), 1, std::max<int64_t>(1, cap));
}

int64_t LengthDist::upper() const {
  switch (kind) {
    case Kind::constant:
      return int64_t(a);
    case Kind::uniform:
      return int64_t(b);
    case Kind::normal:
      return int64_t(std::min(kMaxTokens, std::ceil(a + 6 * b)));
  }
  return int64_t(a);
}

std::string LengthDist::describe() const {
  switch (kind) {
    case Kind::constant:
      return fmt_num(a);
    case Kind::uniform:
      return "uniform:" + fmt_num(a) + ":" + fmt_num(b);
    case Kind::normal:
      return "normal:" + fmt_num(a) + ":" + fmt_num(b);
  }
  return "";
}

Arrival parse_arrival(const std::string& text) {
  if (text == "poisson") return Arrival::poisson;
  if (text == "gamma") return Arrival::gamma;
  if (text == "constant") return Arrival::constant;
  usage_error("--arrival '" + text + "' is not an arrival process; use poisson, gamma or constant");
}

const char* arrival_name(Arrival a) {
  return a == Arrival::poisson ? "poisson" : a == Arrival::gamma ? "gamma" : "constant";
}

double parse_rate(const std::string& text) {
  if (text == "inf") return std::numeric_limits<double>::infinity();
  const auto v = number(text);
  if (!v || *v <= 0)
    usage_error("--rate '" + text + "' must be a positive number of requests per second or inf");
  return *v;
}

std::vector<double> arrival_times(int64_t n, double rate, Arrival kind, double burstiness,
                                  uint64_t seed) {
  if (!(rate > 0)) usage_error("--rate must be positive");
  if (kind == Arrival::gamma && !(burstiness > 0 && std::isfinite(burstiness)))
    usage_error("--burstiness must be a positive number (1 is Poisson, below 1 burstier)");
  std::vector<double> t;
  t.reserve(size_t(std::max<int64_t>(0, n)));
  std::mt19937_64 rng(seed);
  const double mean_ms = std::isinf(rate) ? 0.0 : 1e3 / rate;
  double now = 0;
  for (int64_t i = 0; i < n; ++i) {
    t.push_back(now);
    if (mean_ms == 0) continue;
    switch (kind) {
      case Arrival::poisson:
        now += std::exponential_distribution<double>(1.0 / mean_ms)(rng);
        break;
      case Arrival::gamma:
        now += std::gamma_distribution<double>(burstiness, mean_ms / burstiness)(rng);
        break;
      case Arrival::constant:
        now += mean_ms;
        break;
    }
  }
  return t;
}

std::vector<DatasetEntry> read_dataset(const std::string& path, int64_t max_entries) {
  std::ifstream in(path, std::ios::binary);
  if (!in) usage_error("--dataset " + path + ": cannot open the file");
  std::vector<DatasetEntry> out;
  std::string line;
  int64_t lineno = 0;
  constexpr size_t kMaxLine = size_t(16) << 20;  // 16 MiB per line
  auto bad = [&](const std::string& what) {
    usage_error("--dataset " + path + ":" + std::to_string(lineno) + ": " + what);
  };
  auto count = [&](const nlohmann::json& j, const char* key, bool required) -> int64_t {
    if (!j.contains(key)) {
      if (required) bad(std::string("missing \"") + key + "\"");
      return 0;
    }
    const auto& v = j[key];
    if (!v.is_number_integer() || v.get<int64_t>() < 1 || v.get<int64_t>() > int64_t(kMaxTokens))
      bad(std::string("\"") + key + "\" must be a whole number of tokens from 1 to 1e9");
    return v.get<int64_t>();
  };
  while (std::getline(in, line)) {
    ++lineno;
    if (line.size() > kMaxLine) bad("line longer than 16 MiB");
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    if (int64_t(out.size()) >= max_entries) break;
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception&) {
      bad("not a JSON object");
    }
    if (!j.is_object()) bad("not a JSON object");
    DatasetEntry e;
    if (j.contains("prompt")) {
      if (!j["prompt"].is_string() || j["prompt"].get<std::string>().empty())
        bad("\"prompt\" must be a non-empty string");
      if (j.contains("input_tokens")) bad("give \"prompt\" or \"input_tokens\", not both");
      e.prompt = j["prompt"].get<std::string>();
    } else {
      e.input_tokens = count(j, "input_tokens", true);
    }
    e.output_tokens = count(j, "output_tokens", true);
    if (j.contains("arrival_ms")) {
      const auto& a = j["arrival_ms"];
      if (!a.is_number() || !std::isfinite(a.get<double>()) || a.get<double>() < 0)
        bad("\"arrival_ms\" must be a number >= 0");
      e.arrival_ms = a.get<double>();
    }
    out.push_back(std::move(e));
  }
  if (out.empty()) usage_error("--dataset " + path + " holds no requests");
  return out;
}

Slo Slo::parse(const std::string& text) {
  if (text.empty()) usage_error("--slo needs thresholds, e.g. ttft:500ms,tpot:50ms");
  Slo s;
  for (const std::string& item : split(text, ',')) {
    const auto kv = split(item, ':');
    if (kv.size() != 2)
      usage_error("--slo '" + text + "': '" + item + "' is not METRIC:VALUE (e.g. ttft:500ms)");
    std::string v = kv[1];
    double unit = 1;
    if (v.size() > 2 && v.ends_with("ms")) {
      v.resize(v.size() - 2);
    } else if (v.size() > 1 && v.ends_with("s")) {
      v.resize(v.size() - 1);
      unit = 1e3;
    } else {
      usage_error("--slo '" + text + "': '" + kv[1] + "' needs a unit, ms or s");
    }
    const auto x = number(v);
    if (!x || *x <= 0) usage_error("--slo '" + text + "': '" + kv[1] + "' is not a positive time");
    std::optional<double>* slot = kv[0] == "ttft"   ? &s.ttft_ms
                                  : kv[0] == "tpot" ? &s.tpot_ms
                                  : kv[0] == "itl"  ? &s.itl_ms
                                  : kv[0] == "e2e"  ? &s.e2e_ms
                                                    : nullptr;
    if (!slot)
      usage_error("--slo '" + text + "': unknown metric '" + kv[0] +
                  "'; use ttft, tpot, itl or e2e");
    if (*slot) usage_error("--slo '" + text + "': " + kv[0] + " given twice");
    *slot = *x * unit;
  }
  return s;
}

bool Slo::met(double ttft, std::optional<double> tpot, const std::vector<double>& itl,
              double e2e) const {
  if (ttft_ms && ttft > *ttft_ms) return false;
  if (tpot_ms && tpot && *tpot > *tpot_ms) return false;
  if (itl_ms)
    for (double g : itl)
      if (g > *itl_ms) return false;
  if (e2e_ms && e2e > *e2e_ms) return false;
  return true;
}

std::string Slo::describe() const {
  std::string s;
  auto add = [&](const char* name, const std::optional<double>& v) {
    if (!v) return;
    if (!s.empty()) s += ',';
    s.append(name).append(":").append(fmt_num(*v)).append("ms");
  };
  add("ttft", ttft_ms);
  add("tpot", tpot_ms);
  add("itl", itl_ms);
  add("e2e", e2e_ms);
  return s;
}

}  // namespace latprof::workload
