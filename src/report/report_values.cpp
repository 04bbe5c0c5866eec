#include "report/report_values.hpp"

#include <cmath>
#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>

#include "core/error.hpp"

namespace latprof {

namespace {

using nlohmann::json;

struct Checker {
  const std::string& origin;

  [[noreturn]] void bad(const std::string& field, const json& v, const char* want) const {
    std::string shown = v.dump();
    if (shown.size() > 60) shown = shown.substr(0, 57) + "...";
    usage_error(origin + ": " + field + " is " + shown + "; it must be " + want);
  }
  // A JSON object at `field` (or absent/null when optional).
  bool object(const json& parent, const char* key, const std::string& field) const {
    if (!parent.contains(key) || parent[key].is_null()) return false;
    if (!parent[key].is_object()) bad(field, parent[key], "an object");
    return true;
  }
  bool array(const json& parent, const char* key, const std::string& field) const {
    if (!parent.contains(key) || parent[key].is_null()) return false;
    if (!parent[key].is_array()) bad(field, parent[key], "a list");
    return true;
  }
  void string(const json& o, const char* key, const std::string& at) const {
    if (o.contains(key) && !o[key].is_null() && !o[key].is_string())
      bad(at + key, o[key], "a string");
  }
  // A finite number >= 0 (or any finite number when `signed_ok`).
  void number(const json& o, const char* key, const std::string& at, bool signed_ok = false) const {
    if (!o.contains(key) || o[key].is_null()) return;
    const json& v = o[key];
    if (!v.is_number()) bad(at + key, v, signed_ok ? "a number" : "a number >= 0");
    const double d = v.get<double>();
    if (!std::isfinite(d)) bad(at + key, v, "a finite number");
    if (!signed_ok && d < 0) bad(at + key, v, "a number >= 0");
  }
  // An integer in [lo, hi].
  void integer(const json& o, const char* key, const std::string& at, int64_t lo,
               int64_t hi) const {
    if (!o.contains(key) || o[key].is_null()) return;
    const json& v = o[key];
    const std::string want = "an integer from " + std::to_string(lo) + " to " + std::to_string(hi);
    if (!v.is_number_integer()) bad(at + key, v, want.c_str());
    if (v.is_number_unsigned()) {
      if (v.get<uint64_t>() > uint64_t(hi) || int64_t(v.get<uint64_t>()) < lo)
        bad(at + key, v, want.c_str());
    } else if (v.get<int64_t>() < lo || v.get<int64_t>() > hi) {
      bad(at + key, v, want.c_str());
    }
  }
  void token_ids(const json& o, const char* key, const std::string& at) const {
    if (!array(o, key, at + key)) return;
    for (size_t i = 0; i < o[key].size(); ++i) {
      const json& v = o[key][i];
      if (!v.is_number_integer() || v.get<int64_t>() < 0 ||
          v.get<int64_t>() > std::numeric_limits<int32_t>::max())
        bad(at + key + "[" + std::to_string(i) + "]", v, "a token id (an integer >= 0)");
    }
  }
  void numbers(const json& o, const char* key, const std::string& at) const {
    if (!array(o, key, at + key)) return;
    for (size_t i = 0; i < o[key].size(); ++i) {
      const json& v = o[key][i];
      if (!v.is_number() || !std::isfinite(v.get<double>()) || v.get<double>() < 0)
        bad(at + key + "[" + std::to_string(i) + "]", v, "a number >= 0");
    }
  }
  void row(const json& r, const std::string& at) const {
    if (!r.is_object()) bad(at, r, "an object (one stage or op row)");
    const std::string p = at + ".";
    for (const char* k : {"name", "stage", "bound"}) string(r, k, p);
    for (const char* k : {"time_ms",
                          "time_min_ms",
                          "time_max_ms",
                          "share",
                          "flops",
                          "model_flops",
                          "bytes",
                          "weight_bytes",
                          "activation_bytes",
                          "kv_bytes",
                          "arithmetic_intensity",
                          "achieved_flops_per_s",
                          "achieved_bytes_per_s",
                          "floor_ms",
                          "roofline_fraction",
                          "mfu",
                          "mbu",
                          "expected_ms",
                          "compute_ms",
                          "memory_ms"})
      number(r, k, p);
    integer(r, "calls", p, 0, std::numeric_limits<int64_t>::max());
  }
  void percentiles(const json& m, const char* key, const std::string& at) const {
    if (!object(m, key, at + key)) return;
    const std::string p = at + key + ".";
    for (const char* k : {"mean", "p50", "p90", "p95", "p99", "max", "min", "stddev"})
      number(m[key], k, p);
    integer(m[key], "count", p, 0, std::numeric_limits<int64_t>::max());
  }
};

}  // namespace

void check_report_values(const json& j, const std::string& origin) {
  if (!j.is_object()) usage_error(origin + ": not a JSON object");
  const Checker c{origin};
  c.string(j, "created_utc", "");
  c.string(j, "kind", "");
  if (c.object(j, "run", "run")) {
    const json& r = j["run"];
    for (const char* k : {"model", "model_source", "weights", "dtype", "backend", "device",
                          "tokenizer", "output_text"})
      c.string(r, k, "run.");
    constexpr int64_t kBig = int64_t(1) << 40;
    c.integer(r, "input_tokens", "run.", 0, kBig);
    c.integer(r, "output_tokens", "run.", 0, kBig);
    c.integer(r, "batch", "run.", 1, kBig);
    c.integer(r, "threads", "run.", 0, 1 << 20);
    c.integer(r, "repeat", "run.", 0, 1 << 30);
    c.integer(r, "warmup", "run.", 0, 1 << 30);
    c.integer(r, "top_k", "run.", 0, std::numeric_limits<int32_t>::max());
    if (r.contains("seed") && !r["seed"].is_null() &&
        !(r["seed"].is_number_unsigned() ||
          (r["seed"].is_number_integer() && r["seed"].get<int64_t>() >= 0)))
      c.bad("run.seed", r["seed"], "an integer >= 0");
    c.number(r, "temperature", "run.");
    if (r.contains("graphs") && !r["graphs"].is_null() && !r["graphs"].is_boolean())
      c.bad("run.graphs", r["graphs"], "true or false");
    c.token_ids(r, "prompt_token_ids", "run.");
    c.token_ids(r, "output_token_ids", "run.");
  }
  if (c.object(j, "metrics", "metrics")) {
    const json& m = j["metrics"];
    for (const char* k : {"ttft_ms", "tpot_ms", "e2e_ms", "prefill_tokens_per_s",
                          "decode_tokens_per_s", "mfu", "mbu", "setup_ms"})
      c.number(m, k, "metrics.");
    c.percentiles(m, "itl_ms", "metrics.");
    c.percentiles(m, "e2e_repeats_ms", "metrics.");
    if (c.object(m, "decode_step_fit", "metrics.decode_step_fit"))
      for (const char* k : {"intercept_ms", "slope_us_per_token", "r2", "kv_bytes_per_s"})
        c.number(m["decode_step_fit"], k, "metrics.decode_step_fit.", true);
  }
  for (const char* list : {"stages", "ops"})
    if (c.array(j, list, list))
      for (size_t i = 0; i < j[list].size(); ++i)
        c.row(j[list][i], std::string(list) + "[" + std::to_string(i) + "]");
  c.numbers(j, "decode_step_ms", "");
  c.numbers(j, "repeat_e2e_ms", "");
  if (c.array(j, "checks", "checks"))
    for (size_t i = 0; i < j["checks"].size(); ++i) {
      const json& k = j["checks"][i];
      const std::string at = "checks[" + std::to_string(i) + "]";
      if (!k.is_object()) c.bad(at, k, "an object");
      for (const char* f : {"level", "subject", "message"}) c.string(k, f, at + ".");
    }
  if (c.array(j, "notes", "notes"))
    for (size_t i = 0; i < j["notes"].size(); ++i)
      if (!j["notes"][i].is_string())
        c.bad("notes[" + std::to_string(i) + "]", j["notes"][i], "a string");
  c.object(j, "ceilings", "ceilings");
  c.object(j, "model", "model");
}

}  // namespace latprof
