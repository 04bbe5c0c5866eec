#pragma once
// Load shapes shared by the in-process load mode (`latprof run --requests`) and the HTTP load
// client: request lengths (a number or a distribution), arrival processes (open loop: times
// drawn in advance, whatever the server does), JSON Lines datasets and SLO thresholds.
// Definitions follow vLLM's `bench serve` (../shared/SERVING.md, "Load shapes").
#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <vector>

namespace latprof::workload {

// A token count: "300" (constant), "uniform:LO:HI" (integers LO..HI inclusive) or
// "normal:MEAN:STDDEV" (rounded). Samples are clamped to [1, cap].
struct LengthDist {
  enum class Kind { constant, uniform, normal };
  Kind kind = Kind::constant;
  double a = 1, b = 0;  // constant: a; uniform: [a, b]; normal: mean a, stddev b
  // Throws UsageError naming `flag` when the text is not one of the forms above.
  static LengthDist parse(const std::string& text, const std::string& flag);
  static LengthDist constant_of(int64_t n) { return {Kind::constant, double(n), 0}; }
  int64_t sample(std::mt19937_64& rng, int64_t cap) const;
  // The largest value a sample can take (before the cap): for a normal, mean + 6 stddev.
  int64_t upper() const;
  std::string describe() const;  // as parsed: "300", "uniform:100:500", "normal:300:50"
};

enum class Arrival { poisson, gamma, constant };
Arrival parse_arrival(const std::string& text);  // UsageError on anything else
const char* arrival_name(Arrival a);
// "inf" or a positive, finite number of requests per second.
double parse_rate(const std::string& text);

// Arrival times in ms from the start of the run, non-decreasing, the first at 0. rate: requests
// per second (infinity: every request at 0). Poisson: exponential gaps of mean 1/rate. Gamma:
// shape = burstiness, scale = 1 / (rate * burstiness) (1 is Poisson; below 1 burstier).
// Constant: gaps of exactly 1/rate.
std::vector<double> arrival_times(int64_t n, double rate, Arrival kind, double burstiness,
                                  uint64_t seed);

// One line of a JSON Lines dataset: {"input_tokens": N, "output_tokens": M} or
// {"prompt": "text", "output_tokens": M}; an optional "arrival_ms" replays a trace.
struct DatasetEntry {
  int64_t input_tokens = 0;  // 0 when the prompt is text
  std::string prompt;
  int64_t output_tokens = 0;
  std::optional<double> arrival_ms;
};
// Throws UsageError naming the file, the line and the problem. At most max_entries lines.
std::vector<DatasetEntry> read_dataset(const std::string& path, int64_t max_entries);

// Per-request thresholds, "ttft:500ms,tpot:50ms" (any of ttft, tpot, itl, e2e; ms or s).
struct Slo {
  std::optional<double> ttft_ms, tpot_ms, itl_ms, e2e_ms;
  static Slo parse(const std::string& text);  // UsageError
  bool empty() const { return !ttft_ms && !tpot_ms && !itl_ms && !e2e_ms; }
  // A request meets the SLO when each threshold holds; itl: every gap; a missing figure (a
  // one-token request has no TPOT or ITL) meets its threshold.
  bool met(double ttft_ms, std::optional<double> tpot_ms, const std::vector<double>& itl_ms,
           double e2e_ms) const;
  std::string describe() const;
};

}  // namespace latprof::workload
