#include "server/metrics.hpp"

#include <prometheus/text_serializer.h>

#include <sstream>

namespace latprof::server {

namespace {

// Latency buckets (s): vLLM's TTFT buckets stretched down to 0.1 ms, where a CPU tiny model and
// the server's own stages live.
const prometheus::Histogram::BucketBoundaries kSeconds = {
    0.0001, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08,  0.1,   0.25,  0.5,
    0.75,   1.0,    2.5,   5.0,    7.5,   10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0};
const prometheus::Histogram::BucketBoundaries kTokens = {
    1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384};

}  // namespace

Metrics::Metrics() : reg_(std::make_shared<prometheus::Registry>()) {
  auto hist = [&](const char* name, const char* help,
                  const prometheus::Histogram::BucketBoundaries& b = kSeconds) {
    return &prometheus::BuildHistogram()
                .Name(std::string("latprof:") + name)
                .Help(help)
                .Register(*reg_)
                .Add({}, b);
  };
  auto gauge = [&](const char* name, const char* help) {
    return &prometheus::BuildGauge()
                .Name(std::string("latprof:") + name)
                .Help(help)
                .Register(*reg_)
                .Add({});
  };
  auto counter = [&](const char* name, const char* help) {
    return &prometheus::BuildCounter()
                .Name(std::string("latprof:") + name)
                .Help(help)
                .Register(*reg_);
  };
  ttft = hist("time_to_first_token_seconds",
              "First byte of the request received to its first token in host memory");
  itl = hist("inter_token_latency_seconds", "Gap between successive tokens of a request");
  e2e = hist("e2e_request_latency_seconds",
             "First byte of the request received to the last byte of its response written");
  queue = hist("request_queue_time_seconds", "Handed to the engine to first scheduled");
  prefill = hist("request_prefill_time_seconds", "First scheduled to first token");
  decode = hist("request_decode_time_seconds", "First token to last token");
  inference = hist("request_inference_time_seconds", "First scheduled to last token");
  gateway = hist("request_gateway_time_seconds",
                 "Request parsing, authentication, rate limit and validation");
  tokenize = hist("request_tokenize_time_seconds", "Prompt tokenization");
  detokenize = hist("request_detokenize_time_seconds", "Detokenization of the output tokens");
  serialize = hist("request_serialize_time_seconds",
                   "Last token to the response (or final chunk) serialized");
  connection_wait =
      hist("connection_wait_seconds", "An accepted connection's wait for a connection thread");
  prompt_tokens_hist = hist("request_prompt_tokens", "Prompt tokens per request", kTokens);
  generation_tokens_hist =
      hist("request_generation_tokens", "Generated tokens per request", kTokens);
  iteration_tokens = hist("iteration_tokens_total", "Tokens per engine step", kTokens);
  running = gauge("num_requests_running", "Requests in the engine's running set");
  waiting = gauge("num_requests_waiting", "Requests waiting to be scheduled");
  kv_usage = gauge("kv_cache_usage_perc", "Fraction of the KV cache blocks in use (0-1)");
  prompt_tokens = &counter("prompt_tokens_total", "Prompt tokens of finished requests")->Add({});
  generation_tokens =
      &counter("generation_tokens_total", "Tokens generated (all requests)")->Add({});
  preemptions = &counter("num_preemptions_total", "Requests preempted for KV blocks")->Add({});
  steps = &counter("engine_steps_total", "Engine steps run")->Add({});
  offcpu = &counter("engine_offcpu_seconds_total",
                    "Time the engine's CPU thread pool was not running on a CPU during its steps "
                    "(hypervisor steal, other processes), per thread")
                ->Add({});
  runq = &counter("engine_runq_seconds_total",
                  "The part of engine_offcpu_seconds_total spent waiting for a CPU behind other "
                  "tasks (run delay), per thread")
              ->Add({});
  prefix_cache_queries =
      &counter("prefix_cache_queries_total", "Prompt tokens looked up in the prefix cache")
           ->Add({});
  prefix_cache_hits =
      &counter("prefix_cache_hits_total", "Prompt tokens found in the prefix cache")->Add({});
  success_ = counter("request_success_total", "Finished requests by finish reason");
  cancelled_ = counter("request_cancelled_total",
                       "Requests cancelled before they finished (their KV blocks freed)");
  rejected_ = counter("request_rejected_total", "Requests refused by the gateway, by reason");
  http_ = counter("http_responses_total", "HTTP responses by status code");
}

void Metrics::success(const std::string& r) {
  success_->Add({{"finished_reason", r}}).Increment();
}
void Metrics::cancelled(const std::string& r) {
  cancelled_->Add({{"reason", r}}).Increment();
}
void Metrics::rejected(const std::string& r) {
  rejected_->Add({{"reason", r}}).Increment();
}
void Metrics::http(int status) {
  http_->Add({{"status", std::to_string(status)}}).Increment();
}

std::string Metrics::text() const {
  std::ostringstream out;
  prometheus::TextSerializer().Serialize(out, reg_->Collect());
  return out.str();
}

}  // namespace latprof::server
