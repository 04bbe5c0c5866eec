#pragma once
// The HTTP load client: libcurl's multi interface driven by one epoll event loop on one thread
// (curl_multi_socket_action), HTTP/1.1 keep-alive, server-sent events parsed as they stream.
// Every stamp is on one clock: steady_clock, in ms from the start of the run.
//
// A request's timeline (all stamps from the run start):
//   intended_ms       when the load shape wanted it sent (open loop: its arrival time; closed
//                     loop: when its slot freed)
//   sent_ms           when curl began it (its first step: connecting, or taking a kept-alive
//                     connection, seen by CURLOPT_DEBUGFUNCTION); the client queue is
//                     sent_ms - intended_ms and includes the wait for curl to reach the request
//   handed_ms         when the loop handed it to curl (curl_multi_add_handle)
//   request_sent_ms   when curl had written the last byte of the request (CURLOPT_DEBUGFUNCTION)
//   chunk_ms[]        when each content-carrying chunk was read: the moment the event loop woke
//                     for the socket that held it
//   done_ms           when the transfer ended
#include <atomic>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "load/openai.hpp"

namespace latprof::load {

// curl's phase times of one transfer (CURLINFO_*_TIME_T), in ms from the transfer's start
// (cumulative, as curl reports them).
struct PhaseTimes {
  double namelookup_ms = 0, connect_ms = 0, appconnect_ms = 0, pretransfer_ms = 0,
         starttransfer_ms = 0, total_ms = 0;
  int64_t new_connections = 0;  // 0: the request went over a kept-alive connection
};

struct RequestResult {
  int64_t index = 0;
  int64_t asked_input = 0, asked_output = 0;
  double intended_ms = 0, handed_ms = 0, sent_ms = 0, done_ms = 0;
  std::optional<double> request_sent_ms, first_byte_ms;
  std::vector<double> chunk_ms;       // content-carrying chunks
  std::vector<int64_t> chunk_tokens;  // tokens in each, where the server said (else 0)
  PhaseTimes phases;
  std::optional<int64_t> prompt_tokens, completion_tokens;  // usage, as the server reported it
  std::optional<int64_t> cached_tokens;              // usage.prompt_tokens_details.cached_tokens
  nlohmann::json latprof_timings, timings, metrics;  // the server's own, null if absent
  bool saw_done = false;
  int status = 0;          // HTTP status (0: no response)
  std::string error_kind;  // "" on success (see classify in client.cpp)
  std::string error_message;
  bool ok() const { return error_kind.empty(); }
};

// What to send and when. Open loop: `arrivals_ms` (times from the run start; requests past
// `max_in_flight` wait in the client). Closed loop: `concurrency` requests in flight, a new one
// as soon as one ends. Either stops issuing at `max_requests` or after `duration_ms`.
struct LoadPlan {
  std::vector<double> arrivals_ms;  // open loop when non-empty
  int64_t concurrency = 0;          // closed loop when > 0
  int64_t max_in_flight = 0;        // open loop cap (0: none)
  int64_t max_requests = std::numeric_limits<int64_t>::max();
  double duration_ms = std::numeric_limits<double>::infinity();
  double ramp_up_ms = 0;  // closed loop: slot k starts no earlier than k * ramp_up / concurrency
  // When it turns true (a signal handler sets it), no new request is sent; those in flight
  // finish (or time out) and the run ends with what it has.
  const std::atomic<bool>* stop = nullptr;
  // The server's Prometheus /metrics, scraped every metrics_interval_ms while the run lasts
  // ("" : not scraped).
  std::string metrics_url;
  double metrics_interval_ms = 1000;
  // Builds request `index`'s body, with the lengths it asks for.
  std::function<std::string(int64_t index, int64_t& input, int64_t& output)> make_body;
};

struct ClientOptions {
  std::string url;  // the endpoint, e.g. http://127.0.0.1:8000/v1/completions
  std::string api_key;
  Endpoint endpoint = Endpoint::completions;
  double request_timeout_s = 600;
};

// One scrape of the server's /metrics: the gauges the chain needs, summed over label sets, from
// the first name the server exports (vLLM's, latprof's, SGLang's or llama.cpp's; see README).
struct MetricsSample {
  double t_ms = 0;  // from the start of the run, when the response arrived
  std::optional<double> running, waiting, kv_cache_usage;
  // The latency histograms of SERVING.md's list (vLLM's names, with the prefix vllm:, latprof:
  // or sglang:), by name without the prefix: their _sum (seconds) and _count so far.
  std::map<std::string, std::pair<double, double>> histograms;
  // latprof serve's engine counters so far: engine_steps_total, engine_offcpu_seconds_total,
  // engine_runq_seconds_total (by name without the prefix; absent where the server has none).
  std::map<std::string, double> engine;
};
// The gauges of a Prometheus text exposition.
MetricsSample parse_prometheus(const std::string& text);

struct RunResult {
  std::vector<RequestResult> requests;  // in the order they were issued
  double wall_ms = 0;                   // start to the last transfer's end
  double cpu_ms = 0;                    // the event loop thread's CPU time
  int64_t max_in_flight = 0;
  std::vector<MetricsSample> metrics;
  std::string metrics_error;  // why scraping stopped ("" : it did not)
  bool stopped = false;       // plan.stop ended it early
};

// The event loop and its connections: runs one plan after another (warm-up, then the measured
// run, then a sweep's next point) over the same kept-alive connections. Never throws for a
// failed request (it is recorded with its error).
class Client {
 public:
  explicit Client(const ClientOptions& o);
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;
  // Stamps in the result are from the start of this run.
  RunResult run(const LoadPlan& plan);
  class Loop;  // client.cpp

 private:
  std::unique_ptr<Loop> loop_;
};

// One plan on a fresh client.
RunResult run_load(const ClientOptions& o, const LoadPlan& plan);

// A blocking GET (for /v1/models, /metrics): the body, or std::nullopt with `error` set.
std::optional<std::string> http_get(const std::string& url, const std::string& api_key,
                                    double timeout_s, std::string& error, int* status = nullptr);
// A blocking POST of a JSON body, likewise.
std::optional<std::string> http_post_json(const std::string& url, const std::string& api_key,
                                          const std::string& body, double timeout_s,
                                          std::string& error, int* status = nullptr);

// Checks that `url` is http(s)://HOST[:PORT][/PATH] and returns it without a trailing '/'.
// UsageError otherwise.
std::string normalize_base_url(const std::string& url, const char* flag);

}  // namespace latprof::load
