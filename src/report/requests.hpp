#pragma once
// Latency under load: one record per request and the summary over them, shared by the
// in-process load mode (`latprof run --requests`), the server and the HTTP load client. A figure
// a producer cannot see (the HTTP client sees no server queue) is absent and written as null.
// Definitions (vLLM `bench serve`, latencies from the request's arrival):
//   ttft_ms = first token - arrival; e2e_ms = finished - arrival;
//   tpot_ms = (last token - first token) / (output tokens - 1); itl_ms = gaps between tokens.
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <vector>

#include "core/workload.hpp"
#include "model/cost_model.hpp"
#include "report/report.hpp"
#include "roofline/ceilings.hpp"

namespace latprof {

// The per-token figures of one request from its tokens' arrival times (one place for the
// definitions): the gaps between successive tokens (ITL samples), and TPOT = (last - first) /
// (tokens - 1), absent with fewer than two tokens.
std::vector<double> token_gaps_ms(const std::vector<double>& token_ms);
std::optional<double> tpot_from_tokens_ms(const std::vector<double>& token_ms);

struct LatencyClasses {
  double compute_ms = 0, memory_ms = 0, communication_ms = 0, scheduling_ms = 0;
  double total() const { return compute_ms + memory_ms + communication_ms + scheduling_ms; }
};

// The four latency classes of each request (README, "Latency classes"). Per step, a request's
// own cost is the roofline time of a step holding only its tokens (cost model and ceilings),
// scaled by the step's measured / predicted time and capped at the step's time; each op's part
// counts as compute or memory by the roof that bounds it (sampling, host work, as compute).
// Scheduling is the rest of the request's end-to-end time: the rest of each step it shared,
// queueing, time in no step while others ran, preemption recompute. Communication is zero on
// one device. The four add up to e2e by construction.
class LatencyClassifier {
 public:
  LatencyClassifier(const Ceilings& c, const Precision& p) : c_(c), p_(p) {}
  // One step: its measured time, the cost of all its work, and each request's own work in it.
  void add_step(double step_ms, const OpCosts& all,
                const std::vector<std::pair<int64_t, OpCosts>>& own);
  LatencyClasses classes(int64_t request, double e2e_ms) const;

 private:
  std::pair<double, double> split_ms(const OpCosts& ops) const;  // (compute, memory) floors
  Ceilings c_;
  Precision p_;
  std::map<int64_t, LatencyClasses> acc_;
};

struct RequestRecord {
  int64_t id = 0;
  int64_t input_tokens = 0;
  int64_t output_tokens = 0;
  double arrival_ms = 0;  // from the start of the run
  // Stamps relative to the run start, as the producer saw them: each output token's arrival.
  std::vector<double> token_ms;
  double finished_ms = 0;
  std::optional<double> queue_ms;  // waiting in the scheduler's queue before its first step
  int64_t preemptions = 0;
  int64_t prefix_hit_tokens = 0;
  std::optional<LatencyClasses> classes_ms;

  double ttft_ms() const { return token_ms.empty() ? 0 : token_ms.front() - arrival_ms; }
  double e2e_ms() const { return finished_ms - arrival_ms; }
  std::optional<double> tpot_ms() const;
  std::vector<double> itl_ms() const;
};

struct LoadSummary {
  int64_t requests = 0;
  Percentiles ttft_ms, tpot_ms, itl_ms, e2e_ms, queue_ms;
  double duration_s = 0;           // first arrival to last finish
  double request_throughput = 0;   // requests / duration
  double output_tokens_per_s = 0;  // output tokens / duration
  double goodput = 0;              // requests meeting every SLO / duration (all when no SLO)
  double slo_attainment = 0;       // fraction of requests meeting every SLO
  int64_t preemptions = 0;
  int64_t prefix_hit_tokens = 0;
  // Per class, its distribution over the requests that have classes (none: count 0).
  Percentiles compute_ms, memory_ms, communication_ms, scheduling_ms;
  std::string slo;  // the thresholds, as given ("" when none)
};

LoadSummary summarize(const std::vector<RequestRecord>& requests, const workload::Slo& slo);
nlohmann::json request_to_json(const RequestRecord& r, const workload::Slo& slo);
nlohmann::json summary_to_json(const LoadSummary& s);

}  // namespace latprof
