#pragma once
// `latprof load`: the load shapes of one invocation (a single point, or a sweep of rates or
// concurrencies), run against an OpenAI-compatible endpoint, and the report.
#include <atomic>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace latprof::load {

struct LoadOptions {
  std::string url;  // base URL, http(s)://HOST:PORT
  std::string api_key;
  std::string model;  // "" = the first id of GET /v1/models
  std::string endpoint = "completions";
  std::string input = "500", output = "200";  // numbers or distributions (LengthDist)
  std::string rate;                           // "" or a list: "4", "1,2,4", "inf"
  std::string concurrency;                    // "" or a list: "8", "1,2,4"
  std::string arrival = "poisson";
  double burstiness = 1;
  int64_t max_concurrency = 0;  // cap on the open loop (0: none)
  int64_t requests = 0;         // 0: 100, or unbounded with --duration
  double duration_s = 0;        // 0: none
  double ramp_up_s = 0;         // closed loop: slots start evenly over this time
  int64_t warmup = 0;
  uint64_t seed = 0;
  double request_timeout_s = 600;
  std::string slo;
  std::string dataset;      // JSON Lines (workload::read_dataset)
  std::string trace;        // Mooncake JSONL or Azure CSV (--trace-replay)
  std::string metrics_url;  // "" : URL/metrics; "none": not scraped
  bool find_max_rate = false;
  double slo_attainment = 0.99;
  std::string rate_range = "0.1:100";
  std::vector<std::string> argv;
  // Set by a signal handler: stop sending, let requests in flight finish, report what ran.
  const std::atomic<bool>* stop = nullptr;
  bool quiet = false;
  bool no_ignore_eos = false;  // for servers that refuse the field
  std::string tokenizer;       // chat prompts: "" (a word a token), "server" (/tokenize) or a path
  // --cost-model NAME|CONFIG --dtype --kv-dtype --hw|--hw-file: each request's physical floor
  std::string cost_model, dtype = "fp16", kv_dtype = "fp16", hw, hw_file;
  std::string engine_report;  // or: a latprof run report of the server's engine
};

struct LoadOutput {
  nlohmann::json report;
  std::string text;  // the printed summary
  std::string csv;   // one row per request
  // "" when some request succeeded; else what failed ("every request failed: timeout 4")
  std::string all_failed;
  bool interrupted = false;  // LoadOptions::stop ended the run early
};

// Throws UsageError on a bad option or an unreachable server when the model must be asked for.
LoadOutput run_load_command(const LoadOptions& o);

}  // namespace latprof::load
