// latprof load: profile any OpenAI-compatible endpoint under load (README: "latprof load").
#include <atomic>
#include <csignal>
#include <cstdio>
#include <memory>

#include "cli/commands.hpp"
#include "core/atomic_file.hpp"
#include "core/error.hpp"
#include "core/utf8.hpp"
#include "load/load.hpp"
#include "load/load_export.hpp"

namespace latprof::cli {

namespace {
// SIGINT or SIGTERM: the first stops the run (requests in flight finish, the report is written);
// a second ends the process at once.
std::atomic<bool> g_stop{false};
volatile sig_atomic_t g_signal = 0;
void on_stop_signal(int sig) {
  if (g_stop.load()) {
    std::signal(sig, SIG_DFL);
    std::raise(sig);
    return;
  }
  g_signal = sig;
  g_stop.store(true);
}
void install_stop_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = 0;  // no SA_RESTART: epoll_wait returns at once with EINTR
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}
}  // namespace

CommandFn add_load_command(CLI::App& app, std::vector<std::string> argv) {
  auto o = std::make_shared<load::LoadOptions>();
  for (std::string& a : argv) a = utf8_sanitize(a);
  o->argv = std::move(argv);
  auto json_path = std::make_shared<std::string>();
  auto csv_path = std::make_shared<std::string>();
  auto trace_path = std::make_shared<std::string>();
  auto jsonl_path = std::make_shared<std::string>();
  auto html_path = std::make_shared<std::string>();
  CLI::App* sub = app.add_subcommand(
      "load",
      "Profile an OpenAI-compatible endpoint under load: TTFT, TPOT, ITL, E2E from the client, "
      "the client's own queue, and the request chain joined with the server's own timings");
  sub->add_option("--url", o->url, "The server, http://HOST:PORT (a trailing /v1 is accepted)")
      ->required();
  sub->add_option("--api-key", o->api_key, "Sent as 'Authorization: Bearer KEY'");
  sub->add_option("--model", o->model,
                  "The API's model name (default: the first id of GET /v1/models)");
  sub->add_option("--endpoint", o->endpoint, "completions (token-id prompts) or chat")
      ->capture_default_str();
  sub->add_option("--input,-i", o->input,
                  "Prompt tokens per request: N, uniform:LO:HI or normal:MEAN:STDDEV")
      ->capture_default_str();
  sub->add_option("--output,-o", o->output,
                  "Tokens generated per request (max_tokens with ignore_eos): N or a distribution")
      ->capture_default_str();
  sub->add_option("--rate", o->rate,
                  "Open loop: requests per second (or inf); a list such as 1,2,4 sweeps");
  sub->add_option("--arrival", o->arrival, "Open loop arrivals: poisson, gamma or constant")
      ->capture_default_str();
  sub->add_option("--burstiness", o->burstiness,
                  "Gamma arrivals' shape (1 is Poisson, below 1 burstier)")
      ->capture_default_str();
  sub->add_option("--concurrency", o->concurrency,
                  "Closed loop: requests in flight (default 1); a list such as 1,2,4 sweeps");
  sub->add_option("--max-concurrency", o->max_concurrency,
                  "Open loop: at most this many in flight; the wait for a slot is client_queue_ms");
  sub->add_option("--requests,-n", o->requests,
                  "Measured requests per point (default 100; unbounded with --duration)");
  sub->add_option("--duration", o->duration_s, "Stop sending new requests after this many seconds");
  sub->add_option("--ramp-up", o->ramp_up_s,
                  "Closed loop: start the slots evenly over this many seconds");
  sub->add_option("--warmup", o->warmup, "Requests sent first and left out of the figures")
      ->capture_default_str();
  sub->add_option("--seed", o->seed, "Seed of the prompts, lengths and arrival times")
      ->check(
          [](const std::string& v) {
            return v.starts_with("-") ? "must be an integer >= 0 (got " + v + ")" : std::string();
          },
          "SEED >= 0")
      ->capture_default_str();
  sub->add_option("--request-timeout", o->request_timeout_s,
                  "Seconds before a request is abandoned (counted as a timeout)")
      ->capture_default_str();
  sub->add_option("--slo", o->slo, "Thresholds for goodput, e.g. ttft:500ms,tpot:50ms");
  sub->add_flag(
      "--find-max-rate", o->find_max_rate,
      "Find by bisection the highest rate meeting --slo for --slo-attainment of requests");
  sub->add_option("--slo-attainment", o->slo_attainment,
                  "With --find-max-rate: the share of requests that must meet the SLO")
      ->capture_default_str();
  sub->add_option("--rate-range", o->rate_range, "With --find-max-rate: LO:HI requests per second")
      ->capture_default_str();
  sub->add_option("--dataset", o->dataset,
                  "JSON Lines of {input_tokens|prompt, output_tokens[, arrival_ms]}");
  sub->add_option("--trace-replay", o->trace,
                  "Replay a trace: Mooncake JSONL (timestamp, input_length, output_length) or "
                  "Azure CSV (TIMESTAMP, ContextTokens, GeneratedTokens)");
  sub->add_option("--metrics-url", o->metrics_url,
                  "The server's Prometheus metrics, scraped every second (default: URL/metrics; "
                  "none: not scraped)");
  sub->add_option("--cost-model", o->cost_model,
                  "Physics: the served model's shapes (a built-in name or a model config .json); "
                  "each request's roofline floor and how far above it it was");
  sub->add_option("--dtype", o->dtype, "Physics: weights fp16, int8 or int8-w8a8")
      ->capture_default_str();
  sub->add_option("--kv-dtype", o->kv_dtype, "Physics: KV cache fp16, bf16, int8 or fp32")
      ->capture_default_str();
  sub->add_option("--hw", o->hw, "Physics: the server's device (latprof hw --list)");
  sub->add_option("--hw-file", o->hw_file, "Physics: a hardware JSON file");
  sub->add_option("--engine-report", o->engine_report,
                  "Physics from a 'latprof run --json' report of the server's engine: its model, "
                  "dtype and measured ceilings (instead of --cost-model and --hw)");
  sub->add_option("--json", *json_path, "Write the report as JSON");
  sub->add_option("--csv", *csv_path, "Write one CSV row per request");
  sub->add_option("--trace", *trace_path,
                  "Write a Chrome/Perfetto trace: a track per request, requests in flight and the "
                  "server's gauges as counters");
  sub->add_option("--jsonl", *jsonl_path,
                  "Append one JSON line per run (the report without per-request records)");
  sub->add_option("--tokenizer", o->tokenizer,
                  "Chat prompts of exact lengths: a tokenizer.json (or a Hugging Face directory), "
                  "or 'server' to size them with the server's /tokenize");
  sub->add_option("--html", *html_path,
                  "Write a self-contained HTML report (latency against load, TTFT and ITL "
                  "distributions, requests over time)");
  sub->add_flag("--no-ignore-eos", o->no_ignore_eos,
                "Leave ignore_eos out of requests (for servers that refuse it; output lengths "
                "then vary, and a note says so)");
  sub->add_flag("--quiet,-q", o->quiet, "Print nothing but errors");
  return [=]() -> int {
    if (sub->get_option("--duration")->count() > 0 && !(o->duration_s > 0))
      usage_error("--duration must be a number of seconds > 0");
    if (sub->get_option("--requests")->count() > 0 && o->requests < 1)
      usage_error("--requests must be from 1 to 10000000");
    const std::vector<std::pair<std::string, std::string>> outputs = {{"--json", *json_path},
                                                                      {"--csv", *csv_path},
                                                                      {"--trace", *trace_path},
                                                                      {"--jsonl", *jsonl_path},
                                                                      {"--html", *html_path}};
    for (const auto& [flag, path] : outputs)
      if (!path.empty()) check_writable(path, flag.c_str());
    check_distinct_outputs(outputs);
    std::vector<std::string> inputs;
    if (!o->dataset.empty()) inputs.push_back(o->dataset);
    if (!o->trace.empty()) inputs.push_back(o->trace);
    if (!o->hw_file.empty()) inputs.push_back(o->hw_file);
    if (!o->engine_report.empty()) inputs.push_back(o->engine_report);
    if (!o->tokenizer.empty() && o->tokenizer != "server") inputs.push_back(o->tokenizer);
    for (const auto& [flag, path] : outputs)
      if (!path.empty()) check_not_an_input(path, flag.c_str(), inputs);
    install_stop_handlers();
    o->stop = &g_stop;
    const load::LoadOutput out = load::run_load_command(*o);
    if (!o->quiet) std::fputs(out.text.c_str(), stdout);
    if (!json_path->empty()) write_file_atomic(*json_path, out.report.dump(2) + "\n");
    if (!csv_path->empty()) write_file_atomic(*csv_path, out.csv);
    if (!trace_path->empty())
      write_file_atomic(*trace_path, load::load_trace_json(out.report).dump() + "\n");
    if (!html_path->empty()) write_file_atomic(*html_path, load::load_html(out.report));
    if (!jsonl_path->empty()) append_line_atomic(*jsonl_path, load::load_jsonl_line(out.report));
    if (out.interrupted) {
      std::fprintf(stderr,
                   "latprof: interrupted by %s: requests in flight were finished and the "
                   "report holds what ran\n",
                   g_signal == SIGTERM ? "SIGTERM" : "SIGINT");
      return 128 + (g_signal ? int(g_signal) : SIGINT);
    }
    if (!out.all_failed.empty()) {  // reported in full above; the exit status says it too
      std::fprintf(stderr, "latprof: %s\n", out.all_failed.c_str());
      return 1;
    }
    return 0;
  };
}

}  // namespace latprof::cli
