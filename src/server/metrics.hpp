#pragma once
// The server's Prometheus metrics (prometheus-cpp's registry, serialized in the text format by
// its TextSerializer and served at /metrics by the same HTTP server). Names are vLLM's with the
// prefix latprof: where they mean the same (see README, "latprof serve").
#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <memory>
#include <string>

namespace latprof::server {

class Metrics {
 public:
  Metrics();

  // Histograms, seconds unless said.
  prometheus::Histogram *ttft, *itl, *e2e, *queue, *prefill, *decode, *inference, *gateway,
      *tokenize, *detokenize, *serialize, *connection_wait, *prompt_tokens_hist,
      *generation_tokens_hist, *iteration_tokens;
  prometheus::Gauge *running, *waiting, *kv_usage;
  prometheus::Counter *offcpu, *runq;  // the engine's thread pool off its CPUs during steps
  prometheus::Counter *prompt_tokens, *generation_tokens, *preemptions, *steps,
      *prefix_cache_queries, *prefix_cache_hits;

  void success(const std::string& finished_reason);  // request_success_total{finished_reason}
  void cancelled(const std::string& reason);         // request_cancelled_total{reason}
  void rejected(const std::string& reason);          // request_rejected_total{reason}
  void http(int status);                             // http_responses_total{status}
  // The text exposition of every metric.
  std::string text() const;

 private:
  std::shared_ptr<prometheus::Registry> reg_;
  prometheus::Family<prometheus::Counter>* success_;
  prometheus::Family<prometheus::Counter>* cancelled_;
  prometheus::Family<prometheus::Counter>* rejected_;
  prometheus::Family<prometheus::Counter>* http_;
};

}  // namespace latprof::server
