#include "report/load_view.hpp"

#include "report/report_fields.hpp"

namespace latprof {

namespace {

double number_of(const nlohmann::json& j, const char* k) {
  return j.is_object() && j.contains(k) && j[k].is_number() ? j[k].get<double>()
                                                            : RequestView::kNone;
}

int64_t integer_of(const nlohmann::json& j, const char* k) {
  return j.is_object() && j.contains(k) && j[k].is_number() ? j[k].get<int64_t>() : 0;
}

// Reads a distribution object field by field, in the report's own description of it.
struct DistributionReader {
  const nlohmann::json& j;
  template <class T>
  void operator()(const char* name, T& v, const fields::Spec&) {
    if (j.contains(name) && j[name].is_number()) v = j[name].get<T>();
  }
};

}  // namespace

bool is_load_report(const RunReport& r) {
  return r.requests.is_array();
}

std::vector<RequestView> request_views(const RunReport& r) {
  std::vector<RequestView> out;
  if (!r.requests.is_array()) return out;
  for (const auto& j : r.requests) {
    if (!j.is_object()) continue;
    RequestView v;
    v.id = integer_of(j, "id");
    v.input_tokens = integer_of(j, "input_tokens");
    v.output_tokens = integer_of(j, "output_tokens");
    v.arrival_ms = number_of(j, "arrival_ms");
    v.queue_ms = number_of(j, "queue_ms");
    v.ttft_ms = number_of(j, "ttft_ms");
    v.tpot_ms = number_of(j, "tpot_ms");
    v.e2e_ms = number_of(j, "e2e_ms");
    if (j.contains("itl_ms") && j["itl_ms"].is_array())
      for (const auto& g : j["itl_ms"]) v.itl_ms.push_back(g.is_number() ? g.get<double>() : 0.0);
    v.preemptions = integer_of(j, "preemptions");
    v.prefix_hit_tokens = integer_of(j, "prefix_hit_tokens");
    if (j.contains("slo_met") && j["slo_met"].is_boolean()) v.slo_met = j["slo_met"].get<bool>();
    if (j.contains("classes_ms") && j["classes_ms"].is_object()) {
      const auto& c = j["classes_ms"];
      v.compute_ms = number_of(c, "compute");
      v.memory_ms = number_of(c, "memory");
      v.communication_ms = number_of(c, "communication");
      v.scheduling_ms = number_of(c, "scheduling");
    }
    out.push_back(std::move(v));
  }
  return out;
}

Percentiles summary_distribution(const RunReport& r, const char* key, const char* sub) {
  Percentiles p;
  if (!r.summary.is_object() || !r.summary.contains(key)) return p;
  const nlohmann::json* j = &r.summary[key];
  if (sub) {
    if (!j->is_object() || !j->contains(sub)) return p;
    j = &(*j)[sub];
  }
  if (!j->is_object()) return p;
  DistributionReader read{*j};
  fields::describe(read, p);
  return p;
}

double summary_number(const RunReport& r, const char* key) {
  return number_of(r.summary, key);
}

}  // namespace latprof
