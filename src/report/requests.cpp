#include "report/requests.hpp"

#include <algorithm>
#include <cmath>

namespace latprof {

namespace {
nlohmann::json num_or_null(std::optional<double> v) {
  return v && std::isfinite(*v) ? nlohmann::json(*v) : nlohmann::json();
}
}  // namespace

std::vector<double> token_gaps_ms(const std::vector<double>& token_ms) {
  std::vector<double> g;
  for (size_t i = 1; i < token_ms.size(); ++i) g.push_back(token_ms[i] - token_ms[i - 1]);
  return g;
}

std::optional<double> tpot_from_tokens_ms(const std::vector<double>& token_ms) {
  if (token_ms.size() < 2) return std::nullopt;
  return (token_ms.back() - token_ms.front()) / double(token_ms.size() - 1);
}

std::optional<double> RequestRecord::tpot_ms() const {
  return tpot_from_tokens_ms(token_ms);
}

std::vector<double> RequestRecord::itl_ms() const {
  return token_gaps_ms(token_ms);
}

LoadSummary summarize(const std::vector<RequestRecord>& requests, const workload::Slo& slo) {
  LoadSummary s;
  s.requests = int64_t(requests.size());
  s.slo = slo.describe();
  if (requests.empty()) return s;
  std::vector<double> ttft, tpot, itl, e2e, queue;
  double first = requests.front().arrival_ms, last = requests.front().finished_ms;
  int64_t tokens = 0, good = 0;
  for (const RequestRecord& r : requests) {
    ttft.push_back(r.ttft_ms());
    e2e.push_back(r.e2e_ms());
    const auto tp = r.tpot_ms();
    if (tp) tpot.push_back(*tp);
    const auto gaps = r.itl_ms();
    itl.insert(itl.end(), gaps.begin(), gaps.end());
    if (r.queue_ms) queue.push_back(*r.queue_ms);
    first = std::min(first, r.arrival_ms);
    last = std::max(last, r.finished_ms);
    tokens += int64_t(r.token_ms.size());
    good += slo.met(r.ttft_ms(), tp, gaps, r.e2e_ms());
    s.preemptions += r.preemptions;
    s.prefix_hit_tokens += r.prefix_hit_tokens;
  }
  s.ttft_ms = percentiles(ttft);
  s.tpot_ms = percentiles(tpot);
  s.itl_ms = percentiles(itl);
  s.e2e_ms = percentiles(e2e);
  s.queue_ms = percentiles(queue);
  s.duration_s = (last - first) / 1e3;
  if (s.duration_s > 0) {
    s.request_throughput = double(s.requests) / s.duration_s;
    s.output_tokens_per_s = double(tokens) / s.duration_s;
    s.goodput = double(good) / s.duration_s;
  }
  s.slo_attainment = double(good) / double(s.requests);
  return s;
}

nlohmann::json request_to_json(const RequestRecord& r, const workload::Slo& slo) {
  nlohmann::json j = {{"id", r.id},
                      {"input_tokens", r.input_tokens},
                      {"output_tokens", r.output_tokens},
                      {"arrival_ms", r.arrival_ms},
                      {"queue_ms", num_or_null(r.queue_ms)},
                      {"ttft_ms", r.ttft_ms()},
                      {"tpot_ms", num_or_null(r.tpot_ms())},
                      {"e2e_ms", r.e2e_ms()},
                      {"itl_ms", r.itl_ms()},
                      {"preemptions", r.preemptions},
                      {"prefix_hit_tokens", r.prefix_hit_tokens},
                      {"slo_met", slo.met(r.ttft_ms(), r.tpot_ms(), r.itl_ms(), r.e2e_ms())}};
  if (r.classes_ms)
    j["classes_ms"] = {{"compute", r.classes_ms->compute_ms},
                       {"memory", r.classes_ms->memory_ms},
                       {"communication", r.classes_ms->communication_ms},
                       {"scheduling", r.classes_ms->scheduling_ms}};
  else
    j["classes_ms"] = nullptr;
  return j;
}

nlohmann::json summary_to_json(const LoadSummary& s) {
  auto dist = [](const Percentiles& p) {
    return p.count > 0 ? percentiles_to_json(p) : nlohmann::json();
  };
  return {{"requests", s.requests},
          {"ttft_ms", dist(s.ttft_ms)},
          {"tpot_ms", dist(s.tpot_ms)},
          {"itl_ms", dist(s.itl_ms)},
          {"e2e_ms", dist(s.e2e_ms)},
          {"queue_ms", dist(s.queue_ms)},
          {"duration_s", s.duration_s},
          {"request_throughput", s.request_throughput},
          {"output_tokens_per_s", s.output_tokens_per_s},
          {"goodput", s.goodput},
          {"slo_attainment", s.slo_attainment},
          {"slo", s.slo.empty() ? nlohmann::json() : nlohmann::json(s.slo)},
          {"preemptions", s.preemptions},
          {"prefix_hit_tokens", s.prefix_hit_tokens}};
}

}  // namespace latprof
