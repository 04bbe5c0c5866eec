// latprof serve: an instrumented OpenAI-compatible server on the continuous-batching engine.
#include <pthread.h>

#include <cmath>
#include <csignal>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <memory>
#include <thread>

#include "cli/commands.hpp"
#include "core/atomic_file.hpp"
#include "core/error.hpp"
#include "core/format.hpp"
#include "core/input_file.hpp"
#include "model/open.hpp"
#include "runner/model.hpp"
#include "server/chat_template.hpp"
#include "server/gateway.hpp"
#include "server/server.hpp"
#include "server/serving_model.hpp"

namespace latprof::cli {

namespace {

struct ServeFlags {
  server::ServeModelOptions model;
  server::ServerOptions srv;
  std::vector<std::string> api_keys;
  std::string api_keys_file, chat_template, max_body = "8MiB", prefix_cache = "on";
  bool no_graph = false;
};

std::string g(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

void check_range(double v, double lo, double hi, const char* flag, const char* unit) {
  if (!std::isfinite(v) || v < lo || v > hi)
    usage_error(std::string(flag) + " must be from " + g(lo) + " to " + g(hi) + unit + " (got " +
                g(v) + ")");
}

}  // namespace

CommandFn add_serve_command(CLI::App& app) {
  auto f = std::make_shared<ServeFlags>();
  CLI::App* sub = app.add_subcommand(
      "serve", "Serve an OpenAI-compatible API on the engine, timing every stage of each request");
  auto& m = f->model;
  auto& s = f->srv;
  sub->add_option("--model,-m", m.model,
                  "Built-in model name, a model config .json, a GGUF file or a Hugging Face "
                  "directory")
      ->capture_default_str();
  sub->add_option("--dtype", m.dtype,
                  "Weight precision: fp16, int8 (W8A16) or int8-w8a8 (CPU backend). Not given: "
                  "int8 for a GGUF whose matrices are Q8_0, else fp16")
      ->capture_default_str();
  sub->add_option("--kv-dtype", m.kv_dtype, kKvDtypeHelp)->capture_default_str();
  sub->add_option("--backend", m.backend, "auto, cpu or cuda")->capture_default_str();
  sub->add_option("--threads,-t", m.threads, "CPU threads (0: all cores)")->capture_default_str();
  sub->add_option("--seed", m.seed, "Seed of a built-in model's synthetic weights")
      ->capture_default_str();
  sub->add_flag("--no-graph", f->no_graph, "CUDA: no CUDA graphs for decode steps");
  sub->add_option("--kv-block-size", m.kv_block_size, "Positions per KV block (a power of two)")
      ->capture_default_str();
  sub->add_option("--kv-cache-memory", m.kv_cache_memory,
                  "KV cache size, e.g. 2GiB (default: what fits beside the weights in 90% of the "
                  "available memory, at most what --max-seqs full-length requests use)");
  sub->add_option("--max-model-len", m.max_model_len,
                  "Positions of one request, prompt and output (0: the model's context)")
      ->capture_default_str();
  sub->add_option("--max-batched-tokens", m.max_batched_tokens,
                  "Token budget of one engine step, prefill chunks and decodes together (0: the "
                  "backend's default, CPU 512, CUDA 8192)")
      ->capture_default_str();
  sub->add_option("--max-seqs", m.max_seqs, "Sequences in one engine step")->capture_default_str();
  sub->add_option("--prefix-cache", f->prefix_cache,
                  "Reuse cached KV blocks of identical prompt prefixes: on or off")
      ->capture_default_str();
  sub->add_option("--host", s.host, "Address to listen on")->capture_default_str();
  sub->add_option("--port,-p", s.port, "Port to listen on (0: any free port)")
      ->capture_default_str();
  sub->add_option("--served-model-name", s.served_model_name,
                  "Model id of the API (default: the model's name)");
  sub->add_option("--api-key", f->api_keys,
                  "Key clients must send as 'Authorization: Bearer KEY' (repeatable)");
  sub->add_option("--api-keys", f->api_keys_file, "File of API keys, one per line");
  sub->add_option("--rate-limit", s.rate_limit,
                  "Requests per second per API key (or client address without keys); 0: none")
      ->capture_default_str();
  sub->add_option("--rate-burst", s.rate_burst,
                  "Requests a key may send at once before --rate-limit applies (0: max(1, rate))")
      ->capture_default_str();
  sub->add_option("--max-waiting", s.max_waiting,
                  "Requests waiting for the engine; beyond it a request gets 503")
      ->capture_default_str();
  sub->add_option("--max-connections", s.max_connections,
                  "Connection threads (concurrent connections served)")
      ->capture_default_str();
  sub->add_option("--connection-backlog", s.connection_backlog,
                  "Accepted connections waiting for a thread; beyond it a connection gets 503")
      ->capture_default_str();
  sub->add_option("--max-body-bytes", f->max_body, "Largest request body, e.g. 8MiB")
      ->capture_default_str();
  sub->add_option("--read-timeout", s.read_timeout_s, "Seconds a client may take to send")
      ->capture_default_str();
  sub->add_option("--write-timeout", s.write_timeout_s, "Seconds a write to a client may block")
      ->capture_default_str();
  sub->add_option("--keep-alive-timeout", s.keep_alive_timeout_s,
                  "Seconds an idle keep-alive connection is kept")
      ->capture_default_str();
  sub->add_option("--drain-timeout", s.drain_timeout_s,
                  "Seconds running requests may take to finish after SIGTERM")
      ->capture_default_str();
  sub->add_option("--chat-template", f->chat_template,
                  "chatml, llama3, llama2, mistral, plain, or a Jinja template file (recognised "
                  "by its text); default: the model file's template, else plain");
  sub->add_option("--tls-cert", s.tls_cert, "PEM certificate: serve HTTPS (with --tls-key)");
  sub->add_option("--tls-key", s.tls_key, "PEM private key of --tls-cert");
  sub->add_option("--jsonl", s.jsonl_path, "Append one JSON line per finished request");
  sub->add_option("--trace", s.trace_path,
                  "Write the server's timeline at exit (Chrome/Perfetto JSON): a track per "
                  "request with its stages, a track of engine steps");
  return [=]() -> int {
    ServeFlags& fl = *f;
    auto& so = fl.srv;
    if (so.port < 0 || so.port > 65535)
      usage_error("--port must be from 0 to 65535 (got " + std::to_string(so.port) + ")");
    check_range(so.rate_limit, 0, 1e6, "--rate-limit", " requests/s");
    check_range(so.rate_burst, 0, 1e6, "--rate-burst", " requests");
    if (so.max_waiting < 1 || so.max_waiting > 1'000'000)
      usage_error("--max-waiting must be from 1 to 1000000 (got " + std::to_string(so.max_waiting) +
                  ")");
    if (so.max_connections < 1 || so.max_connections > 4096)
      usage_error("--max-connections must be from 1 to 4096 (got " +
                  std::to_string(so.max_connections) + ")");
    if (so.connection_backlog < 0 || so.connection_backlog > 65536)
      usage_error("--connection-backlog must be from 0 to 65536 (got " +
                  std::to_string(so.connection_backlog) + ")");
    const double body = parse_bytes(fl.max_body, "--max-body-bytes");
    check_range(body, 1024, double(1 << 30), "--max-body-bytes", " bytes");
    so.max_body_bytes = int64_t(body);
    check_range(so.read_timeout_s, 1, 3600, "--read-timeout", " s");
    check_range(so.write_timeout_s, 1, 3600, "--write-timeout", " s");
    check_range(so.drain_timeout_s, 0, 86400, "--drain-timeout", " s");
    check_range(so.keep_alive_timeout_s, 1, 3600, "--keep-alive-timeout", " s");
    so.api_keys = server::load_api_keys(fl.api_keys, fl.api_keys_file);
    if (so.tls_cert.empty() != so.tls_key.empty())
      usage_error("--tls-cert and --tls-key go together: give both, or neither for plain HTTP");
    for (const std::string* f : {&so.tls_cert, &so.tls_key})
      if (!f->empty()) read_input_file(*f, f == &so.tls_cert ? "--tls-cert" : "--tls-key", 1 << 20);
    if (!so.jsonl_path.empty()) check_writable(so.jsonl_path, "--jsonl");
    if (!so.trace_path.empty()) check_writable(so.trace_path, "--trace");
    if (!so.trace_path.empty() && !so.jsonl_path.empty())
      check_distinct_outputs({{"--jsonl", so.jsonl_path}, {"--trace", so.trace_path}});
    fl.model.graphs = !fl.no_graph;
    if (fl.prefix_cache != "on" && fl.prefix_cache != "off")
      usage_error("--prefix-cache must be on or off (got '" + fl.prefix_cache + "')");
    fl.model.prefix_cache = fl.prefix_cache == "on";
    // --dtype not given: the model file's own precision (int8 for Q8_0 matrices).
    const std::string file_dtype = model_file_dtype(fl.model.model);
    const bool dtype_implied = sub->count("--dtype") == 0;
    if (dtype_implied) fl.model.dtype = implied_dtype(file_dtype);
    // Chat template: a family name, a template file, or the model's own.
    if (!fl.chat_template.empty()) {
      if (server::chat_template_from_name(fl.chat_template, so.chat_template)) {
        so.chat_template_source = "--chat-template";
      } else {
        const std::string text =
            read_input_file(fl.chat_template, "--chat-template", size_t(1) << 20);
        so.chat_template = server::detect_chat_template(text);
        so.chat_template_source = fl.chat_template;
      }
    } else {
      const std::string text = server::model_chat_template(fl.model.model);
      so.chat_template = server::detect_chat_template(text);
      so.chat_template_source = text.empty() ? "none (plain)" : "the model file";
    }
    if (so.served_model_name.empty() && std::filesystem::exists(fl.model.model))
      so.served_model_name = std::filesystem::path(fl.model.model).stem().string();

    // SIGTERM and SIGINT are taken by one thread (sigwait), so every other thread, created
    // after this, has them blocked.
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGINT);
    pthread_sigmask(SIG_BLOCK, &sigs, nullptr);

    std::unique_ptr<server::ServingModel> loaded;  // outlives the server, which serves it
    server::Server srv(so);
    srv.listen();
    std::printf("latprof serve: loading %s; %s/health answers 503 until it is ready\n",
                fl.model.model.c_str(), srv.url().c_str());
    std::fflush(stdout);
    // Loading and the warm-up run OpenMP parallel regions, and OpenMP keeps a team of threads
    // for every thread that ran one. Beside the engine thread's own team, the main thread's would
    // make more threads than CPUs (libgomp counts idle teams too), and libgomp then lets every
    // worker spin only ~1,000 iterations before it sleeps: each of a decode step's ~100 parallel
    // regions paid a futex wake-up (TPOT 20.7-21.1 ms against 17.8 for `latprof run` on the same
    // request, reports/serve.md). On a thread of their own, their team ends with the thread.
    {
      std::exception_ptr failed;
      std::thread loader([&] {
        try {
          loaded = std::make_unique<server::ServingModel>(fl.model);
          srv.attach(*loaded);
        } catch (...) {
          failed = std::current_exception();
        }
      });
      loader.join();
      if (failed) std::rethrow_exception(failed);
    }
    server::ServingModel& model = *loaded;
    const EngineShape& e = model.shape();
    std::printf(
        "latprof serve: %s (%s, %s on %s) as '%s', KV cache (%s) %lld blocks of %lld tokens (%s), "
        "max model len %lld, chat template %s (%s), loaded in %s\n",
        model.config().name.c_str(), fl.model.dtype.c_str(),
        model.backend().device().backend.c_str(), model.backend().device().name.c_str(),
        srv.model_id().c_str(), kv_dtype_name(model.backend().kv_type()), (long long)e.kv_blocks,
        (long long)e.block_size, fmt_bytes(model.kv_bytes()).c_str(), (long long)e.max_model_len,
        server::chat_template_name(so.chat_template), so.chat_template_source.c_str(),
        fmt_ms(model.load_ms()).c_str());
    if (const std::string n =
            file_dtype_note(file_dtype, model.model().weight_type(), dtype_implied);
        !n.empty())
      std::printf("latprof serve: %s\n", n.c_str());
    std::printf("latprof serve: listening on %s\n", srv.url().c_str());
    std::fflush(stdout);
    std::thread signals([&] {
      int sig = 0;
      sigwait(&sigs, &sig);
      std::fprintf(stderr, "latprof serve: %s, draining (up to %s s)\n",
                   sig == SIGTERM ? "SIGTERM" : "SIGINT", g(so.drain_timeout_s).c_str());
      srv.drain();
    });
    srv.wait();
    signals.join();
    std::fprintf(stderr, "latprof serve: stopped\n");
    return 0;
  };
}

}  // namespace latprof::cli
