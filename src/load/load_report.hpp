#pragma once
// The load client's requests and summary in the structure `latprof run --requests` writes
// (report/requests.hpp), extended with what only a client sees: its own queue, latency from the
// intended send time (coordinated omission), chunk gaps, curl's phase times, errors, and the
// request chain that joins the client's view with the server's own timings.
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "core/workload.hpp"
#include "load/client.hpp"
#include "report/requests.hpp"

namespace latprof::load {

// The parts of a request's latency, in ms; they add up to client_queue_ms + e2e_ms. A part
// nobody reported is absent (null in JSON).
struct Chain {
  static constexpr const char* kParts[] = {"client_queue", "network",     "gateway", "queue",
                                           "tokenize",     "prefill",     "decode",  "detokenize",
                                           "serialize",    "unattributed"};
  static constexpr size_t kCount = sizeof(kParts) / sizeof(kParts[0]);
  std::optional<double> ms[kCount];
  double sum() const;
};

// From a successful request: client_queue = sent - intended; the server's parts as it reported
// them (latprof serve's latprof_timings, llama.cpp's timings, vLLM's metrics); network = e2e -
// the server's reported total (only where it reports one); unattributed = the rest of e2e.
Chain request_chain(const RequestResult& r);

// The record report/requests.hpp summarizes: arrival = the actual send; token times = the
// content chunks (a chunk of k tokens, where the server says k, as k equal gaps after the first
// chunk, as vLLM counts them); finished = the last content chunk.
RequestRecord to_record(const RequestResult& r);
// vLLM's TPOT: (e2e - ttft) / (output tokens - 1), output tokens from usage.completion_tokens.
std::optional<double> tpot_ms(const RequestResult& r);

nlohmann::json load_request_to_json(const RequestResult& r, const workload::Slo& slo);

// The summary over one run: summary_to_json's fields (percentiles over successful requests)
// plus the client's own.
nlohmann::json load_summary_to_json(const RunResult& run, const workload::Slo& slo);
// Requests and tokens in flight, time-weighted as AIPerf's "effective" (over the window from the
// first send to the last end) and "active" (over the time at least one request was in flight)
// metrics, with their maxima. A request is in flight from sent_ms to done_ms; its tokens are its
// prompt (usage.prompt_tokens, else the length asked) plus the tokens received so far: the KV
// positions the server must hold for it, as the client sees them.
nlohmann::json in_flight_json(const std::vector<RequestResult>& requests);

// Lines worth telling the user (prompt lengths that differ from what was asked, ...).
std::vector<std::string> load_notes(const RunResult& run);

// One CSV row per request; `point` is the first column (the rate or concurrency of a sweep's
// point), the header comes first when `header`.
std::string requests_csv(const RunResult& run, const workload::Slo& slo, const std::string& point,
                         bool header);

}  // namespace latprof::load
