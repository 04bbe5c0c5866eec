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
  static const json* find(const json& o, const char* key) {
    return o.is_object() && o.contains(key) && !o[key].is_null() ? &o[key] : nullptr;
  }
  // A field the reader has read as a number: finite and >= 0 (any finite number when
  // `signed_ok`).
  void range(const json& o, const char* key, const std::string& at, bool signed_ok = false) const {
    const json* v = find(o, key);
    if (!v) return;
    const double d = v->get<double>();
    if (!std::isfinite(d)) bad(at + key, *v, "a finite number");
    if (!signed_ok && d < 0) bad(at + key, *v, "a number >= 0");
  }
  // A number the field table does not describe (the reader skips it): its type, then its range.
  void number(const json& o, const char* key, const std::string& at) const {
    const json* v = find(o, key);
    if (v && !v->is_number()) bad(at + key, *v, "a number >= 0");
    range(o, key, at);
  }
  // A field the reader has read as an integer (possibly written as 3.0): in [lo, hi].
  void integer(const json& o, const char* key, const std::string& at, int64_t lo,
               int64_t hi) const {
    const json* v = find(o, key);
    if (!v) return;
    bool in;
    if (v->is_number_unsigned())
      in = v->get<uint64_t>() <= uint64_t(hi) && int64_t(v->get<uint64_t>()) >= lo;
    else if (v->is_number_integer())
      in = v->get<int64_t>() >= lo && v->get<int64_t>() <= hi;
    else
      in = v->get<double>() >= double(lo) && v->get<double>() <= double(hi);
    if (!in) {
      const std::string want =
          "an integer from " + std::to_string(lo) + " to " + std::to_string(hi);
      bad(at + key, *v, want.c_str());
    }
  }
  // Integers the reader has read: each a token id.
  void token_ids(const json& o, const char* key, const std::string& at) const {
    const json* a = find(o, key);
    if (!a) return;
    for (size_t i = 0; i < a->size(); ++i) {
      const double d = (*a)[i].get<double>();
      if (d < 0 || d > double(std::numeric_limits<int32_t>::max()))
        bad(at + key + "[" + std::to_string(i) + "]", (*a)[i], "a token id (an integer >= 0)");
    }
  }
  // Numbers (or nulls) the reader has read: each a number >= 0, null not allowed.
  void numbers(const json& o, const char* key, const std::string& at) const {
    const json* a = find(o, key);
    if (!a) return;
    for (size_t i = 0; i < a->size(); ++i) {
      const json& v = (*a)[i];
      if (v.is_null() || !std::isfinite(v.get<double>()) || v.get<double>() < 0)
        bad(at + key + "[" + std::to_string(i) + "]", v, "a number >= 0");
    }
  }
  void row(const json& r, const std::string& at) const {
    const std::string p = at + ".";
    for (const char* k :
         {"time_ms", "time_min_ms", "time_max_ms", "share", "flops", "model_flops", "weight_bytes",
          "activation_bytes", "kv_bytes", "arithmetic_intensity", "achieved_flops_per_s",
          "achieved_bytes_per_s", "floor_ms", "roofline_fraction", "mfu", "mbu"})
      range(r, k, p);
    // Written but not read back: bytes (derived), and a prediction's expected_ms, compute_ms
    // and memory_ms.
    for (const char* k : {"bytes", "expected_ms", "compute_ms", "memory_ms"}) number(r, k, p);
    integer(r, "calls", p, 0, std::numeric_limits<int64_t>::max());
  }
  void percentiles(const json& m, const char* key, const std::string& at) const {
    const json* d = find(m, key);
    if (!d) return;
    const std::string p = at + key + ".";
    for (const char* k : {"mean", "p50", "p90", "p95", "p99", "max", "min", "stddev"})
      range(*d, k, p);
    integer(*d, "count", p, 0, std::numeric_limits<int64_t>::max());
  }
};

}  // namespace

void check_report_values(const json& j, const std::string& origin) {
  if (!j.is_object()) usage_error(origin + ": not a JSON object");
  const Checker c{origin};
  // Not in the field table: the reader does not look at them.
  if (const json* k = Checker::find(j, "kind"); k && !k->is_string()) c.bad("kind", *k, "a string");
  if (const json* m = Checker::find(j, "model"); m && !m->is_object())
    c.bad("model", *m, "an object");

  if (const json* r = Checker::find(j, "run")) {
    constexpr int64_t kBig = int64_t(1) << 40;
    c.integer(*r, "input_tokens", "run.", 0, kBig);
    c.integer(*r, "output_tokens", "run.", 0, kBig);
    c.integer(*r, "batch", "run.", 1, kBig);
    c.integer(*r, "threads", "run.", 0, 1 << 20);
    c.integer(*r, "repeat", "run.", 0, 1 << 30);
    c.integer(*r, "warmup", "run.", 0, 1 << 30);
    c.integer(*r, "top_k", "run.", 0, std::numeric_limits<int32_t>::max());
    c.range(*r, "temperature", "run.");
    c.token_ids(*r, "prompt_token_ids", "run.");
    c.token_ids(*r, "output_token_ids", "run.");
  }
  if (const json* m = Checker::find(j, "metrics")) {
    for (const char* k : {"ttft_ms", "tpot_ms", "e2e_ms", "prefill_tokens_per_s",
                          "decode_tokens_per_s", "mfu", "mbu", "setup_ms"})
      c.range(*m, k, "metrics.");
    c.percentiles(*m, "itl_ms", "metrics.");
    c.percentiles(*m, "e2e_repeats_ms", "metrics.");
    if (const json* f = Checker::find(*m, "decode_step_fit"))
      for (const char* k : {"intercept_ms", "slope_us_per_token", "r2", "kv_bytes_per_s"})
        c.range(*f, k, "metrics.decode_step_fit.", true);
  }
  for (const char* list : {"stages", "ops"})
    if (const json* rows = Checker::find(j, list))
      for (size_t i = 0; i < rows->size(); ++i)
        c.row((*rows)[i], std::string(list) + "[" + std::to_string(i) + "]");
  c.numbers(j, "decode_step_ms", "");
  c.numbers(j, "repeat_e2e_ms", "");
}

}  // namespace latprof
