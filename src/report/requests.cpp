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

std::pair<double, double> LatencyClassifier::split_ms(const OpCosts& ops) const {
  double compute = 0, memory = 0;
  for (int i = 0; i < kNumOps; ++i) {
    const Op op = static_cast<Op>(i);
    const RooflinePoint r = roofline_point(ops[i], c_.peak_for(op, p_), c_.mem_bw_bytes_per_s);
    (op == Op::sample || r.bound == "compute" ? compute : memory) += r.floor_ms;
  }
  return {compute, memory};
}

void LatencyClassifier::add_step(double step_ms, const OpCosts& all,
                                 const std::vector<std::pair<int64_t, OpCosts>>& own) {
  const auto [ac, am] = split_ms(all);
  const double predicted = ac + am;
  if (!(predicted > 0) || !(step_ms > 0)) return;
  const double scale = step_ms / predicted;
  for (const auto& [id, ops] : own) {
    auto [c, m] = split_ms(ops);
    c *= scale;
    m *= scale;
    if (c + m > step_ms) {  // alone it would have taken the whole step at most
      const double f = step_ms / (c + m);
      c *= f;
      m *= f;
    }
    LatencyClasses& a = acc_[id];
    a.compute_ms += c;
    a.memory_ms += m;
  }
}

LatencyClasses LatencyClassifier::classes(int64_t request, double e2e_ms) const {
  LatencyClasses l;
  if (const auto it = acc_.find(request); it != acc_.end()) l = it->second;
  // The steps a request was in lie within its life, so its own cost fits in e2e; rounding
  // aside, the rest is scheduling.
  const double own = l.compute_ms + l.memory_ms;
  if (own > e2e_ms && own > 0) {
    l.compute_ms *= e2e_ms / own;
    l.memory_ms *= e2e_ms / own;
  }
  l.communication_ms = 0;
  l.scheduling_ms = std::max(0.0, e2e_ms - l.compute_ms - l.memory_ms);
  return l;
}

LoadSummary summarize(const std::vector<RequestRecord>& requests, const workload::Slo& slo) {
  LoadSummary s;
  s.requests = int64_t(requests.size());
  s.slo = slo.describe();
  if (requests.empty()) return s;
  std::vector<double> ttft, tpot, itl, e2e, queue, cc, cm, cn, cs;
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
    if (r.classes_ms) {
      cc.push_back(r.classes_ms->compute_ms);
      cm.push_back(r.classes_ms->memory_ms);
      cn.push_back(r.classes_ms->communication_ms);
      cs.push_back(r.classes_ms->scheduling_ms);
    }
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
  s.compute_ms = percentiles(cc);
  s.memory_ms = percentiles(cm);
  s.communication_ms = percentiles(cn);
  s.scheduling_ms = percentiles(cs);
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
          {"prefix_hit_tokens", s.prefix_hit_tokens},
          {"classes_ms", s.compute_ms.count > 0
                             ? nlohmann::json{{"compute", dist(s.compute_ms)},
                                              {"memory", dist(s.memory_ms)},
                                              {"communication", dist(s.communication_ms)},
                                              {"scheduling", dist(s.scheduling_ms)}}
                             : nlohmann::json()}};
}

}  // namespace latprof
