#include "load/load_report.hpp"

#include <algorithm>
#include <cmath>
#include <iomanip>
#include <sstream>

#include "report/report.hpp"

namespace latprof::load {

namespace {

nlohmann::json num_or_null(std::optional<double> v) {
  return v && std::isfinite(*v) ? nlohmann::json(*v) : nlohmann::json();
}

// A duration field of a server's timings object: a finite number >= 0, else absent.
std::optional<double> field_ms(const nlohmann::json& o, const char* key) {
  if (!o.is_object()) return std::nullopt;
  const auto it = o.find(key);
  if (it == o.end() || !it->is_number()) return std::nullopt;
  const double v = it->get<double>();
  if (!std::isfinite(v) || v < 0) return std::nullopt;
  return v;
}

enum Part {
  kClientQueue,
  kNetwork,
  kGateway,
  kQueue,
  kTokenize,
  kPrefill,
  kDecode,
  kDetokenize,
  kSerialize,
  kUnattributed
};

double e2e_of(const RequestResult& r) {
  return r.chunk_ms.empty() ? r.done_ms - r.sent_ms : r.chunk_ms.back() - r.sent_ms;
}

int64_t output_tokens_of(const RequestResult& r) {
  if (r.completion_tokens) return *r.completion_tokens;
  return int64_t(r.chunk_ms.size());
}

}  // namespace

double Chain::sum() const {
  double s = 0;
  for (const auto& p : ms)
    if (p) s += *p;
  return s;
}

Chain request_chain(const RequestResult& r) {
  Chain c;
  c.ms[kClientQueue] = std::max(0.0, r.sent_ms - r.intended_ms);
  const double e2e = e2e_of(r);
  std::optional<double> server_total;  // what the server says it spent on the request
  if (r.latprof_timings.is_object()) {
    const auto& t = r.latprof_timings;
    const char* keys[] = {"gateway_ms", "queue_ms",      "tokenize_ms", "prefill_ms",
                          "decode_ms",  "detokenize_ms", "serialize_ms"};
    for (int i = 0; i < 7; ++i) c.ms[kGateway + i] = field_ms(t, keys[i]);
    server_total = field_ms(t, "total_ms");
  } else if (r.timings.is_object()) {  // llama.cpp: prompt and generation, nothing else
    c.ms[kPrefill] = field_ms(r.timings, "prompt_ms");
    c.ms[kDecode] = field_ms(r.timings, "predicted_ms");
  } else if (r.metrics.is_object()) {  // vLLM --enable-per-request-metrics
    c.ms[kQueue] = field_ms(r.metrics, "queue_time_ms");
    c.ms[kPrefill] = field_ms(r.metrics, "time_to_first_token_ms");
    const auto gen = field_ms(r.metrics, "generation_time_ms");
    if (gen && c.ms[kPrefill] && *gen >= *c.ms[kPrefill]) c.ms[kDecode] = *gen - *c.ms[kPrefill];
  }
  double server_parts = 0;
  for (int i = kGateway; i <= kSerialize; ++i)
    if (c.ms[i]) {
      c.ms[i] = std::max(0.0, *c.ms[i]);
      server_parts += *c.ms[i];
    }
  // What the server does not break down: its total less its parts (never below 0: parts that
  // overshoot the total by rounding leave nothing), or without a total the rest of e2e.
  c.ms[kUnattributed] = std::max(0.0, (server_total ? *server_total : e2e) - server_parts);
  // The server's figures may cover a little more than the client's e2e (its total runs to the
  // trailing usage chunk, after the last content chunk): take the excess off the chain from the
  // end (unattributed, then serialize, detokenize, ...), so that the parts add up.
  double excess = server_parts + *c.ms[kUnattributed] - e2e;
  for (int j = kUnattributed; j >= kGateway && excess > 0; --j) {
    if (!c.ms[j] || j == kNetwork) continue;
    const double take = std::min(*c.ms[j], excess);
    *c.ms[j] -= take;
    excess -= take;
  }
  // The network is the client's time the server's account does not cover (known only when the
  // server gives its total).
  if (server_total) {
    double covered = 0;
    for (int i = kGateway; i <= kUnattributed; ++i)
      if (i != kNetwork && c.ms[i]) covered += *c.ms[i];
    c.ms[kNetwork] = std::max(0.0, e2e - covered);
  }
  return c;
}

std::optional<double> tpot_ms(const RequestResult& r) {
  const int64_t n = output_tokens_of(r);
  if (n < 2 || r.chunk_ms.empty()) return std::nullopt;
  return (r.chunk_ms.back() - r.chunk_ms.front()) / double(n - 1);
}

RequestRecord to_record(const RequestResult& r) {
  RequestRecord rec;
  rec.id = r.index;
  rec.input_tokens = r.prompt_tokens.value_or(r.asked_input);
  rec.output_tokens = output_tokens_of(r);
  rec.arrival_ms = r.sent_ms;
  const bool counted = r.chunk_tokens.size() == r.chunk_ms.size() && r.chunk_ms.size() > 1 &&
                       std::all_of(r.chunk_tokens.begin() + 1, r.chunk_tokens.end(),
                                   [](int64_t k) { return k > 0; });
  if (counted) {
    rec.token_ms.push_back(r.chunk_ms[0]);
    for (size_t i = 1; i < r.chunk_ms.size(); ++i) {
      const double prev = r.chunk_ms[i - 1], gap = r.chunk_ms[i] - prev;
      const int64_t k = r.chunk_tokens[i];
      for (int64_t j = 1; j <= k; ++j) rec.token_ms.push_back(prev + gap * double(j) / double(k));
    }
  } else {
    rec.token_ms = r.chunk_ms;
  }
  rec.finished_ms = r.chunk_ms.empty() ? r.done_ms : r.chunk_ms.back();
  rec.queue_ms = field_ms(r.latprof_timings, "queue_ms");
  if (!rec.queue_ms) rec.queue_ms = field_ms(r.metrics, "queue_time_ms");
  return rec;
}

namespace {

nlohmann::json phases_json(const RequestResult& r) {
  const PhaseTimes& p = r.phases;
  return {{"dns", p.namelookup_ms},
          {"connect", std::max(0.0, p.connect_ms - p.namelookup_ms)},
          {"tls", p.appconnect_ms > 0 ? nlohmann::json(p.appconnect_ms - p.connect_ms) : nullptr},
          {"request_sent",
           num_or_null(r.request_sent_ms ? std::optional<double>(*r.request_sent_ms - r.sent_ms)
                                         : std::nullopt)},
          {"first_byte", p.starttransfer_ms > 0 ? nlohmann::json(p.starttransfer_ms) : nullptr},
          {"total", p.total_ms},
          {"new_connection", p.new_connections > 0}};
}

nlohmann::json chain_json(const Chain& c) {
  nlohmann::json j = nlohmann::json::object();
  for (size_t i = 0; i < Chain::kCount; ++i) j[Chain::kParts[i]] = num_or_null(c.ms[i]);
  return j;
}

nlohmann::json server_json(const RequestResult& r) {
  nlohmann::json s = nlohmann::json::object();
  if (!r.latprof_timings.is_null()) s["latprof_timings"] = r.latprof_timings;
  if (!r.timings.is_null()) s["timings"] = r.timings;
  if (!r.metrics.is_null()) s["metrics"] = r.metrics;
  return s.empty() ? nlohmann::json() : s;
}

nlohmann::json dist(const std::vector<double>& v) {
  return v.empty() ? nlohmann::json() : percentiles_to_json(percentiles(v));
}

// Prompt tokens the server found in its prefix cache, as it reported them.
std::optional<int64_t> prefix_hits(const RequestResult& r) {
  if (r.timings.is_object() && r.timings.contains("cache_n") &&
      r.timings["cache_n"].is_number_integer() && r.timings["cache_n"].get<int64_t>() >= 0)
    return r.timings["cache_n"].get<int64_t>();                          // llama.cpp, latprof serve
  if (r.cached_tokens && *r.cached_tokens >= 0) return r.cached_tokens;  // OpenAI's usage
  return std::nullopt;
}

}  // namespace

nlohmann::json load_request_to_json(const RequestResult& r, const workload::Slo& slo) {
  nlohmann::json j;
  const double client_queue = std::max(0.0, r.sent_ms - r.intended_ms);
  if (r.ok()) {
    const RequestRecord rec = to_record(r);
    j = request_to_json(rec, slo);
    const auto tp = tpot_ms(r);
    j["tpot_ms"] = num_or_null(tp);
    j["slo_met"] = slo.met(rec.ttft_ms(), tp, rec.itl_ms(), rec.e2e_ms());
    j["ttft_from_intended_ms"] = rec.token_ms.front() - r.intended_ms;
    j["e2e_from_intended_ms"] = rec.finished_ms - r.intended_ms;
    j["chunk_gap_ms"] = token_gaps_ms(r.chunk_ms);
    j["chain_ms"] = chain_json(request_chain(r));
    j["error"] = nullptr;
  } else {
    // The fields of a successful request, null: a failed request has no latency figures.
    j = {{"id", r.index},
         {"input_tokens", r.prompt_tokens ? nlohmann::json(*r.prompt_tokens) : nlohmann::json()},
         {"output_tokens", nullptr},
         {"arrival_ms", r.sent_ms},
         {"queue_ms", nullptr},
         {"ttft_ms", nullptr},
         {"tpot_ms", nullptr},
         {"e2e_ms", nullptr},
         {"itl_ms", nullptr},
         {"slo_met", false},
         {"classes_ms", nullptr},
         {"ttft_from_intended_ms", nullptr},
         {"e2e_from_intended_ms", nullptr},
         {"chunk_gap_ms", nullptr},
         {"chain_ms", nullptr},
         {"error",
          {{"kind", r.error_kind},
           {"status", r.status > 0 ? nlohmann::json(r.status) : nlohmann::json()},
           {"message", r.error_message}}}};
  }
  // What a client cannot see.
  j["preemptions"] = nullptr;
  j["prefix_hit_tokens"] = prefix_hits(r) ? nlohmann::json(*prefix_hits(r)) : nlohmann::json();
  j["classes_ms"] = nullptr;
  j["intended_ms"] = r.intended_ms;
  j["client_queue_ms"] = client_queue;
  j["asked_input_tokens"] = r.asked_input;
  j["asked_output_tokens"] = r.asked_output;
  j["chunks"] = int64_t(r.chunk_ms.size());
  j["done_ms"] = r.done_ms;
  j["status"] = r.status > 0 ? nlohmann::json(r.status) : nlohmann::json();
  j["phases_ms"] = phases_json(r);
  j["server"] = server_json(r);
  return j;
}

nlohmann::json load_summary_to_json(const RunResult& run, const workload::Slo& slo) {
  std::vector<RequestRecord> ok;
  std::vector<double> tpot, client_queue, ttft_int, e2e_int, chunk_gaps;
  std::vector<std::vector<double>> chain(Chain::kCount);
  std::map<std::string, int64_t> errors;
  int64_t good = 0, tokens = 0, chunks = 0;
  for (const RequestResult& r : run.requests) {
    client_queue.push_back(std::max(0.0, r.sent_ms - r.intended_ms));
    if (!r.ok()) {
      ++errors[r.error_kind];
      continue;
    }
    ok.push_back(to_record(r));
    const RequestRecord& rec = ok.back();
    const auto tp = tpot_ms(r);
    if (tp) tpot.push_back(*tp);
    good += slo.met(rec.ttft_ms(), tp, rec.itl_ms(), rec.e2e_ms());
    ttft_int.push_back(rec.token_ms.front() - r.intended_ms);
    e2e_int.push_back(rec.finished_ms - r.intended_ms);
    const auto g = token_gaps_ms(r.chunk_ms);
    chunk_gaps.insert(chunk_gaps.end(), g.begin(), g.end());
    const Chain c = request_chain(r);
    for (size_t i = 0; i < Chain::kCount; ++i)
      if (c.ms[i]) chain[i].push_back(*c.ms[i]);
    tokens += rec.output_tokens;
    chunks += int64_t(r.chunk_ms.size());
  }
  LoadSummary s = summarize(ok, slo);
  // TPOT from usage.completion_tokens (vLLM's definition), which the chunk count need not match.
  s.tpot_ms = percentiles(tpot);
  if (s.duration_s > 0) {
    s.goodput = double(good) / s.duration_s;
    s.output_tokens_per_s = double(tokens) / s.duration_s;
  }
  s.slo_attainment = ok.empty() ? 0 : double(good) / double(ok.size());
  nlohmann::json j = summary_to_json(s);
  j["preemptions"] = nullptr;
  j["prefix_hit_tokens"] = nullptr;
  j["requests_total"] = int64_t(run.requests.size());
  j["requests_failed"] = int64_t(run.requests.size() - ok.size());
  j["errors"] = errors;
  j["client_queue_ms"] = dist(client_queue);
  j["ttft_from_intended_ms"] = dist(ttft_int);
  j["e2e_from_intended_ms"] = dist(e2e_int);
  j["chunk_gap_ms"] = dist(chunk_gaps);
  nlohmann::json cj = nlohmann::json::object();
  for (size_t i = 0; i < Chain::kCount; ++i) cj[Chain::kParts[i]] = dist(chain[i]);
  j["chain_ms"] = cj;
  // Over the whole run (first send to the last transfer's end), failures included, beside
  // summarize's busy interval (first send to the last successful finish).
  const double wall_s = run.wall_ms / 1e3;
  j["wall_s"] = wall_s;
  j["request_throughput_wall"] = wall_s > 0 ? double(ok.size()) / wall_s : 0.0;
  j["output_tokens_per_s_wall"] = wall_s > 0 ? double(tokens) / wall_s : 0.0;
  j["in_flight"] = in_flight_json(run.requests);
  j["client"] = {{"cpu_ms", run.cpu_ms},
                 {"cpu_us_per_token", tokens > 0 ? nlohmann::json(run.cpu_ms * 1e3 / double(tokens))
                                                 : nlohmann::json()},
                 {"cpu_us_per_chunk", chunks > 0 ? nlohmann::json(run.cpu_ms * 1e3 / double(chunks))
                                                 : nlohmann::json()},
                 {"max_in_flight", run.max_in_flight}};
  return j;
}

nlohmann::json in_flight_json(const std::vector<RequestResult>& requests) {
  // Steps of the two counts: (time, requests delta, tokens delta), integrated in time order.
  struct Event {
    double ms;
    int64_t requests, tokens;
  };
  std::vector<Event> ev;
  for (const RequestResult& r : requests) {
    if (!(r.done_ms >= r.sent_ms)) continue;
    const int64_t prompt = r.prompt_tokens.value_or(r.asked_input);
    int64_t held = prompt;
    ev.push_back({r.sent_ms, 1, prompt});
    for (size_t i = 0; i < r.chunk_ms.size(); ++i) {
      const int64_t k = i < r.chunk_tokens.size() && r.chunk_tokens[i] > 0 ? r.chunk_tokens[i] : 1;
      ev.push_back({std::clamp(r.chunk_ms[i], r.sent_ms, r.done_ms), 0, k});
      held += k;
    }
    ev.push_back({r.done_ms, -1, -held});
  }
  nlohmann::json j = {
      {"requests_effective", nullptr}, {"requests_active", nullptr}, {"requests_max", 0},
      {"tokens_effective", nullptr},   {"tokens_active", nullptr},   {"tokens_max", 0}};
  if (ev.empty()) return j;
  // Ends before starts at the same instant, so a request handing over to the next does not
  // count twice.
  std::stable_sort(ev.begin(), ev.end(), [](const Event& a, const Event& b) {
    return a.ms < b.ms || (a.ms == b.ms && a.requests < b.requests);
  });
  double req_area = 0, tok_area = 0, active_ms = 0;
  int64_t req = 0, tok = 0, req_max = 0, tok_max = 0;
  for (size_t i = 0; i < ev.size(); ++i) {
    if (i > 0) {
      const double dt = ev[i].ms - ev[i - 1].ms;
      req_area += double(req) * dt;
      tok_area += double(tok) * dt;
      if (req > 0) active_ms += dt;
    }
    req += ev[i].requests;
    tok += ev[i].tokens;
    req_max = std::max(req_max, req);
    tok_max = std::max(tok_max, tok);
  }
  const double window = ev.back().ms - ev.front().ms;
  j["requests_max"] = req_max;
  j["tokens_max"] = tok_max;
  if (window > 0) {
    j["requests_effective"] = req_area / window;
    j["tokens_effective"] = tok_area / window;
  }
  if (active_ms > 0) {
    j["requests_active"] = req_area / active_ms;
    j["tokens_active"] = tok_area / active_ms;
  }
  return j;
}

std::vector<std::string> load_notes(const RunResult& run) {
  std::vector<std::string> notes;
  int64_t prompt_diff = 0, output_diff = 0, ok = 0, hit_requests = 0, hit_tokens = 0,
          hit_prompt_tokens = 0;
  double prompt_asked = 0, prompt_got = 0;
  for (const RequestResult& r : run.requests) {
    if (!r.ok()) continue;
    ++ok;
    if (const auto h = prefix_hits(r); h && r.prompt_tokens) {
      hit_prompt_tokens += *r.prompt_tokens;
      hit_tokens += *h;
      hit_requests += 2 * *h >= *r.prompt_tokens && *h > 0;
    }
    if (r.prompt_tokens && r.asked_input > 0 && *r.prompt_tokens != r.asked_input) {
      ++prompt_diff;
      prompt_asked += double(r.asked_input);
      prompt_got += double(*r.prompt_tokens);
    }
    if (r.completion_tokens && *r.completion_tokens != r.asked_output) ++output_diff;
  }
  std::ostringstream o;
  for (const RequestResult& r : run.requests)
    if (!r.ok() && r.error_kind.starts_with("http_4") &&
        r.error_message.find("ignore_eos") != std::string::npos) {
      notes.push_back("the server refuses ignore_eos (" + r.error_kind + ": " + r.error_message +
                      "); --no-ignore-eos leaves it out, and output lengths then vary");
      break;
    }
  if (prompt_diff > 0) {
    o << prompt_diff << " of " << ok
      << " requests had a prompt length (usage.prompt_tokens) other than asked: "
      << (prompt_got / double(prompt_diff)) << " tokens on average where "
      << (prompt_asked / double(prompt_diff))
      << " were asked (the server retokenized or added tokens); input_tokens holds the server's "
         "figure";
    notes.push_back(o.str());
    o.str("");
  }
  if (output_diff > 0) {
    o << output_diff << " of " << ok
      << " requests generated a number of tokens other than max_tokens (usage.completion_tokens): "
         "the server may ignore ignore_eos or cap the length";
    notes.push_back(o.str());
    o.str("");
  }
  // A chat template's tokens, shared by every request, are a small part of a prompt; a request
  // that found half of its prompt in the server's prefix cache sent a prompt the server had seen
  // (a dataset's repeated texts, a trace's shared blocks, an earlier run's prompts).
  if (hit_requests > 0) {
    o << hit_requests << " of " << ok
      << " requests found at least half of their prompt in the server's prefix cache ("
      << hit_tokens << " of " << hit_prompt_tokens << " prompt tokens, " << std::fixed
      << std::setprecision(1) << 100.0 * double(hit_tokens) / double(hit_prompt_tokens)
      << "%, in prefix_hit_tokens): their prefill covered only the rest, so TTFT is lower than "
         "for prompts the server has not seen (another --seed draws other prompts)";
    notes.push_back(o.str());
  }
  return notes;
}

std::string requests_csv(const RunResult& run, const workload::Slo& slo, const std::string& point,
                         bool header) {
  std::ostringstream o;
  const char* cols[] = {"point",
                        "id",
                        "intended_ms",
                        "client_queue_ms",
                        "input_tokens",
                        "output_tokens",
                        "ttft_ms",
                        "tpot_ms",
                        "e2e_ms",
                        "ttft_from_intended_ms",
                        "e2e_from_intended_ms",
                        "chunks",
                        "status",
                        "error_kind"};
  if (header) {
    for (size_t i = 0; i < std::size(cols); ++i) o << (i ? "," : "") << cols[i];
    for (size_t i = 0; i < Chain::kCount; ++i) o << ",chain_" << Chain::kParts[i] << "_ms";
    o << "\n";
  }
  auto cell = [&](const nlohmann::json& v) {
    if (v.is_null()) return std::string();
    if (v.is_string()) return v.get<std::string>();  // error kinds: [a-z0-9_], no quoting needed
    return v.dump();
  };
  for (const RequestResult& r : run.requests) {
    const nlohmann::json j = load_request_to_json(r, slo);
    o << point << "," << j["id"] << "," << cell(j["intended_ms"]) << ","
      << cell(j["client_queue_ms"]) << "," << cell(j["input_tokens"]) << ","
      << cell(j["output_tokens"]) << "," << cell(j["ttft_ms"]) << "," << cell(j["tpot_ms"]) << ","
      << cell(j["e2e_ms"]) << "," << cell(j["ttft_from_intended_ms"]) << ","
      << cell(j["e2e_from_intended_ms"]) << "," << cell(j["chunks"]) << "," << cell(j["status"])
      << "," << (r.ok() ? std::string() : r.error_kind);
    for (size_t i = 0; i < Chain::kCount; ++i)
      o << "," << (j["chain_ms"].is_null() ? std::string() : cell(j["chain_ms"][Chain::kParts[i]]));
    o << "\n";
  }
  return o.str();
}

}  // namespace latprof::load
