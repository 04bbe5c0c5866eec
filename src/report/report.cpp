#include "report/report.hpp"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>

#include "core/error.hpp"
#include "core/input_file.hpp"
#include "report/report_fields.hpp"
#include "report/report_values.hpp"
#include "roofline/predict.hpp"

namespace latprof {

Percentiles percentiles(std::vector<double> s) {
  Percentiles p;
  p.count = int64_t(s.size());
  if (s.empty()) return p;
  std::sort(s.begin(), s.end());
  auto at = [&](double q) {
    const double pos = q * double(s.size() - 1);
    const size_t lo = size_t(std::floor(pos));
    const size_t hi = std::min(lo + 1, s.size() - 1);
    return s[lo] + (s[hi] - s[lo]) * (pos - double(lo));
  };
  double sum = 0;
  for (double v : s) sum += v;
  p.mean = sum / double(s.size());
  double var = 0;
  for (double v : s) var += (v - p.mean) * (v - p.mean);
  p.stddev = s.size() > 1 ? std::sqrt(var / double(s.size() - 1)) : 0;
  p.min = s.front();
  p.max = s.back();
  p.p50 = at(0.50);
  p.p90 = at(0.90);
  p.p95 = at(0.95);
  p.p99 = at(0.99);
  return p;
}

namespace {

using nlohmann::json;
using namespace fields;

// JSON has no NaN or Infinity: write null (read back as NaN).
json num(double v) {
  return std::isfinite(v) ? json(v) : json();
}

template <class T>
json value_json(const T& v);

// Writes the fields a describe() names into the object `j`.
struct Writer {
  json& j;
  template <class T>
  void operator()(const char* name, const T& v, const Spec& s) {
    if constexpr (std::is_same_v<T, std::string>) {
      if (v.empty() && (s.flags & kOmitEmpty)) return;
      j[name] = v.empty() && (s.flags & kNullWhenEmpty) ? json() : json(v);
    } else {
      j[name] = value_json(v);
    }
  }
  template <class F>
  void object(const char* name, const Spec&, F&& body) {
    Writer w{j[name] = json::object()};
    body(w);
  }
  template <class F>
  void opaque(const char* name, const json& v, const Spec& s, F&&) {
    if (v.is_null() && (s.flags & kOptional)) return;
    j[name] = v;
  }
  template <class T>
  void derived(const char* name, const T& v, const Spec& s) {
    (*this)(name, v, s);
  }
};

template <class T>
json value_json(const T& v) {
  if constexpr (std::is_same_v<T, double>) {
    return num(v);
  } else if constexpr (is_record_v<T>) {
    json o = json::object();
    Writer w{o};
    describe(w, v);
    return o;
  } else if constexpr (requires { v.begin(); } && !std::is_same_v<T, std::string> &&
                       !std::is_same_v<T, json>) {
    json a = json::array();
    for (const auto& x : v) a.push_back(value_json(x));
    return a;
  } else {
    return json(v);
  }
}

// Reads the fields a describe() names from the object `j`. A field that is absent keeps its
// default (older 1.x reports, predictions); null reads as NaN (numbers) or "" (strings); a value
// of the wrong type is a usage error naming the field.
struct Reader {
  const json& j;
  std::string path;  // "metrics.", "stages[2]."
  const std::string& origin;

  [[noreturn]] void fail(const std::string& where, const json& x, const char* expected) const {
    usage_error(origin + ": malformed latprof report: '" + where + "' is " +
                std::string(x.type_name()) + ", expected " + expected);
  }
  const json* find(const char* name) const {
    return j.is_object() && j.contains(name) ? &j[name] : nullptr;
  }
  template <class T>
  void operator()(const char* name, T& v, const Spec&) {
    if (const json* x = find(name)) read(*x, v, path + name);
  }
  template <class F>
  void object(const char* name, const Spec&, F&& body) {
    const json* x = find(name);
    if (!x) return;
    if (!x->is_object()) fail(path + name, *x, "an object");
    Reader sub{*x, path + name + ".", origin};
    body(sub);
  }
  template <class F>
  void opaque(const char* name, json& v, const Spec&, F&&) {
    if (const json* x = find(name)) v = *x;
  }
  template <class T>
  void derived(const char*, const T&, const Spec&) {}

  template <class T>
  void read(const json& x, T& v, const std::string& where) const {
    if constexpr (std::is_same_v<T, double>) {
      if (x.is_null())
        v = std::nan("");
      else if (x.is_number())
        v = x.get<double>();
      else
        fail(where, x, "a number or null");
    } else if constexpr (std::is_same_v<T, bool>) {
      if (!x.is_boolean()) fail(where, x, "a boolean");
      v = x.get<bool>();
    } else if constexpr (std::is_integral_v<T>) {
      // An integer, as JSON Schema has it: 3.0 reads as 3, within T's range (a float outside it
      // cannot be converted). Ranges narrower than T's are report_values.cpp's.
      const double d = x.is_number() ? x.get<double>() : 0;
      const bool integral =
          x.is_number_integer() || (x.is_number_float() && std::isfinite(d) && std::floor(d) == d &&
                                    d >= double(std::numeric_limits<T>::min()) &&
                                    d < 2.0 * double(std::numeric_limits<T>::max() / 2 + 1));
      if (!integral || (std::is_unsigned_v<T> && d < 0))
        fail(where, x, std::is_unsigned_v<T> ? "an unsigned integer" : "an integer");
      v = x.get<T>();
    } else if constexpr (std::is_same_v<T, std::string>) {
      if (x.is_null())
        v.clear();
      else if (x.is_string())
        v = x.get<std::string>();
      else
        fail(where, x, "a string");
    } else if constexpr (std::is_same_v<T, json>) {
      v = x;
    } else if constexpr (is_record_v<T>) {
      if (!x.is_object()) fail(where, x, "an object");
      Reader sub{x, where + ".", origin};
      describe(sub, v);
    } else {  // a vector
      if (!x.is_array()) fail(where, x, "an array");
      v.assign(x.size(), {});
      for (size_t i = 0; i < x.size(); ++i) {
        typename T::value_type item{};
        read(x[i], item, where + "[" + std::to_string(i) + "]");
        v[i] = std::move(item);
      }
    }
  }
};

// The numeric fields of a row, in order, for row_fields().
struct RowNumbers {
  std::vector<RowField>* out = nullptr;  // collect names, units, meanings
  size_t want = 0;                       // or pick the want-th value
  double* value = nullptr;
  size_t at = 0;
  template <class T>
  void operator()(const char* name, const T& v, const Spec& s) {
    if constexpr (std::is_arithmetic_v<T> && !std::is_same_v<T, bool>) {
      if (out) out->push_back({name, s.unit, s.meaning, {}});
      if (value && at == want) *value = double(v);
      ++at;
    }
  }
  template <class T>
  void derived(const char* name, const T& v, const Spec& s) {
    (*this)(name, v, s);
  }
};

}  // namespace

nlohmann::json percentiles_to_json(const Percentiles& p) {
  return value_json(p);
}

nlohmann::json row_to_json(const Row& r) {
  return value_json(r);
}

nlohmann::json report_to_json(const RunReport& r) {
  json j = json::object();
  Writer w{j};
  describe(w, r);
  return j;
}

nlohmann::json run_identity_json(const RunReport& r) {
  return {{"model", r.run.model},
          {"dtype", r.run.dtype},
          {"backend", r.run.backend},
          {"device", r.run.device},
          {"input_tokens", r.run.input_tokens},
          {"output_tokens", r.run.output_tokens},
          {"batch", r.run.batch},
          {"threads", r.run.threads},
          {"repeat", r.run.repeat}};
}

RunReport report_from_json(const nlohmann::json& j, const std::string& origin) {
  if (!j.is_object() || !j.contains("schema_version") || !j.contains("metrics") ||
      !j.contains("stages"))
    usage_error(origin + ": not a latprof run report (no schema_version, metrics and stages)");
  const std::string ver =
      j["schema_version"].is_string() ? j["schema_version"].get<std::string>() : "";
  const int major = std::atoi(ver.c_str());
  if (major != kSchemaMajor)
    usage_error(origin + ": report schema version " + ver +
                " is not supported (this latprof reads " + std::to_string(kSchemaMajor) +
                ".x); re-run it with this latprof");
  // Types first, as the field table reads them; then ranges (report_values.cpp), and roofs
  // that the roofline can use (positive bandwidth and peak).
  RunReport r;
  Reader rd{j, "", origin};
  describe(rd, r);
  check_report_values(j, origin);
  if (j.contains("ceilings")) (void)ceilings_from_json(j["ceilings"], origin);
  return r;
}

std::vector<double> decode_step_offcpu_ms(const RunReport& r) {
  std::vector<double> off;
  for (const StepRow& s : r.steps)
    if (s.pure_decode()) {
      if (s.offcpu_ms < 0) return {};
      off.push_back(s.offcpu_ms);
    }
  if (off.size() != r.decode_step_ms.size()) return {};
  return off;
}

Precision run_precision(const RunInfo& ri, const std::string& act_dtype) {
  return precision_from_flags(ri.dtype.empty() ? "fp16" : ri.dtype, kv_dtype_of(ri), act_dtype);
}

RunReport load_report(const std::string& path) {
  check_input_path(path, "report", false, /*allow_fifo=*/true);
  const std::string text = read_input_file(path, "report", kMaxReportBytes);
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    usage_error(path + ": not valid JSON (truncated or not a report): " + std::string(e.what()));
  }
  return report_from_json(j, path);
}

const std::vector<RowField>& row_fields() {
  static const std::vector<RowField> f = [] {
    std::vector<RowField> v;
    RowNumbers names{&v};
    const Row proto;
    describe(names, proto);
    for (size_t k = 0; k < v.size(); ++k)
      v[k].get = [k](const Row& r) {
        double x = 0;
        RowNumbers pick{nullptr, k, &x};
        describe(pick, r);
        return x;
      };
    return v;
  }();
  return f;
}

const std::vector<MetricField>& metric_fields() {
  using M = Metrics;
  static const std::vector<MetricField> f = {
      {"ttft_ms", "ms", "time to first token", false, [](const M& m) { return m.ttft_ms; }},
      {"tpot_ms", "ms", "time per output token after the first", false,
       [](const M& m) { return m.tpot_ms; }},
      {"e2e_ms", "ms", "end-to-end request latency", false, [](const M& m) { return m.e2e_ms; }},
      {"itl_p50_ms", "ms", "inter-token latency, median", false,
       [](const M& m) { return m.itl_ms.p50; }},
      {"itl_p95_ms", "ms", "inter-token latency, 95th percentile", false,
       [](const M& m) { return m.itl_ms.p95; }},
      {"itl_p99_ms", "ms", "inter-token latency, 99th percentile", false,
       [](const M& m) { return m.itl_ms.p99; }},
      {"prefill_tokens_per_s", "token/s", "prompt tokens / prefill time", true,
       [](const M& m) { return m.prefill_tokens_per_s; }},
      {"decode_tokens_per_s", "token/s", "generated tokens / decode time", true,
       [](const M& m) { return m.decode_tokens_per_s; }},
      {"mfu", "1", "model FLOPs utilization (prefill + decode)", true,
       [](const M& m) { return m.mfu; }},
      {"mbu", "1", "memory bandwidth utilization (decode)", true, [](const M& m) { return m.mbu; }},
  };
  return f;
}

const MetricField* find_metric_field(const std::string& name) {
  for (const auto& f : metric_fields())
    if (name == f.name || name + "_ms" == f.name) return &f;
  return nullptr;
}

}  // namespace latprof
