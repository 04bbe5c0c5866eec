#include "server/server.hpp"

#include <httplib.h>
#include <sys/socket.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <ctime>
#include <deque>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>
#include <unordered_map>

#include "core/atomic_file.hpp"
#include "core/error.hpp"
#include "engine/engine.hpp"
#include "model/detokenizer.hpp"
#include "server/api.hpp"
#include "server/gateway.hpp"
#include "server/metrics.hpp"
#include "server/request.hpp"

namespace latprof::server {

using nlohmann::json;

namespace {

// A client may send this many requests on one connection (cpp-httplib's default is 5).
constexpr size_t kKeepAliveMaxRequests = 100000;
// The warm-up request run before the engine serves its first client.
constexpr int64_t kWarmupPromptTokens = 16;
constexpr int64_t kWarmupOutputTokens = 4;
// --trace keeps at most this many events (about 200 bytes each); later ones are counted.
constexpr size_t kTraceMaxEvents = 2'000'000;

thread_local double tl_t0 = 0;
thread_local std::shared_ptr<ServedRequest> tl_live;

std::string fmt_g(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

std::string random_hex(uint64_t n) {
  static const char* d = "0123456789abcdef";
  std::string s;
  for (int i = 0; i < 16; ++i) s += d[(n >> (4 * i)) & 15];
  return s;
}

}  // namespace

struct Server::Impl {
  explicit Impl(const ServerOptions& o)
      : opt(o),
        clock(engine::Clock::steady()),
        limiter(o.rate_limit, o.rate_burst > 0 ? o.rate_burst : std::max(1.0, o.rate_limit)) {
    if (o.tls_cert.empty()) {
      http = std::make_unique<httplib::Server>();
    } else {
      auto tls = std::make_unique<httplib::SSLServer>(o.tls_cert.c_str(), o.tls_key.c_str());
      if (!tls->is_valid())
        usage_error("--tls-cert " + o.tls_cert + " and --tls-key " + o.tls_key +
                    " are not a PEM certificate and its private key (OpenSSL refused them)");
      http = std::move(tls);
    }
    model_id = o.served_model_name;
    created = int64_t(std::time(nullptr));
    id_seed = std::random_device{}();
  }

  ~Impl() {
    if (engine) engine->shutdown();  // no hook may run once the members below are gone
  }

  ServerOptions opt;
  engine::Clock clock;
  // Set by attach() once the model is loaded (ready); until then API requests get 503.
  ServingModel* model = nullptr;
  std::unique_ptr<engine::BlockPool> pool;
  std::unique_ptr<ServingExecutor> exec;
  std::unique_ptr<engine::Engine> engine;
  std::atomic<bool> ready{false};
  RateLimiter limiter;
  Metrics metrics;
  std::unique_ptr<httplib::Server> http;  // an SSLServer with --tls-cert
  ConnectionPool* conns = nullptr;        // owned by http
  std::string model_id;
  int64_t created = 0;
  uint64_t id_seed = 0;
  int bound_port = -1;
  std::thread listener;

  std::mutex lives_mu;
  std::condition_variable lives_cv;
  std::unordered_map<int64_t, std::shared_ptr<ServedRequest>> lives;
  std::atomic<int64_t> next_id{1};
  std::atomic<int64_t> n_waiting{0};
  std::atomic<int64_t> active_streams{0};
  std::atomic<bool> draining{false};
  std::mutex stop_mu;
  std::condition_variable stop_cv;
  bool stopped = false;
  std::mutex jsonl_mu;
  std::ofstream jsonl;
  // --trace: Chrome/Perfetto events kept until exit (at most kTraceMaxEvents).
  std::mutex trace_mu;
  std::vector<json> trace;
  int64_t trace_dropped = 0;

  void trace_event(json e) {
    if (opt.trace_path.empty()) return;
    std::lock_guard<std::mutex> lk(trace_mu);
    if (trace.size() >= kTraceMaxEvents) {
      ++trace_dropped;
      return;
    }
    trace.push_back(std::move(e));
  }
  static json span(const char* name, int64_t tid, double from_ms, double to_ms) {
    return {{"name", name}, {"ph", "X"},           {"pid", 1},
            {"tid", tid},   {"ts", from_ms * 1e3}, {"dur", std::max(0.0, to_ms - from_ms) * 1e3}};
  }
  void write_trace() {
    if (opt.trace_path.empty()) return;
    std::lock_guard<std::mutex> lk(trace_mu);
    json events = json::array();
    events.push_back({{"name", "process_name"},
                      {"ph", "M"},
                      {"pid", 1},
                      {"args", {{"name", "latprof serve " + model_id}}}});
    events.push_back({{"name", "thread_name"},
                      {"ph", "M"},
                      {"pid", 1},
                      {"tid", 0},
                      {"args", {{"name", "engine steps"}}}});
    for (json& e : trace) events.push_back(std::move(e));
    trace.clear();
    json doc = {{"traceEvents", std::move(events)},
                {"displayTimeUnit", "ms"},
                {"otherData",
                 {{"tool", "latprof serve"},
                  {"model", model_id},
                  {"clock", "steady_clock, ms from server start"},
                  {"events_dropped", trace_dropped}}}};
    write_file_atomic(opt.trace_path, doc.dump() + "\n");
  }

  double now() const { return clock.now_ms(); }

  // ---- engine thread ----
  std::shared_ptr<ServedRequest> find(int64_t id) {
    std::lock_guard<std::mutex> lk(lives_mu);
    const auto it = lives.find(id);
    return it == lives.end() ? nullptr : it->second;
  }

  bool on_token(int64_t id, int32_t token, double t) {
    const std::shared_ptr<ServedRequest> l = find(id);
    if (!l) return false;
    metrics.generation_tokens->Increment();
    std::lock_guard<std::mutex> lk(l->mu);
    const bool more = l->take_token(token);
    l->detok_last_ms = now() - t;
    l->detok_ms += l->detok_last_ms;
    l->cv.notify_all();
    return more;
  }

  void on_finish(const engine::RequestTimeline& tl, bool cancelled) {
    const std::shared_ptr<ServedRequest> l = find(tl.id);
    if (!l) return;
    exec->erase_sampling(tl.id);
    std::string cancel_reason, finish_reason;
    {
      std::lock_guard<std::mutex> lk(l->mu);
      if (cancelled && l->cancel_reason.empty() && !engine->failure().empty())
        l->cancel_reason = "engine_failed";
      cancel_reason = l->cancel_reason.empty() ? "cancelled" : l->cancel_reason;
      finish_reason = l->reason_to_end(cancelled);
    }
    // Counted before the request's thread is woken: a client that has its response reads
    // metrics that already hold it (the engine published its counts before this call).
    if (cancelled) {
      metrics.cancelled(cancel_reason);
    } else {
      metrics.success(finish_reason);
      metrics.prompt_tokens->Increment(double(l->prompt_tokens));
      metrics.prefix_cache_queries->Increment(double(l->prompt_tokens));
      metrics.prefix_cache_hits->Increment(double(tl.prefix_hit_tokens));
      metrics.prompt_tokens_hist->Observe(double(l->prompt_tokens));
      metrics.generation_tokens_hist->Observe(double(l->n_tokens));
      if (!tl.token_ms.empty()) {
        metrics.queue->Observe((tl.first_scheduled_ms - l->t_submit) / 1e3);
        metrics.ttft->Observe((tl.token_ms.front() - l->t0) / 1e3);
        metrics.prefill->Observe((tl.token_ms.front() - tl.first_scheduled_ms) / 1e3);
        metrics.decode->Observe((tl.token_ms.back() - tl.token_ms.front()) / 1e3);
        metrics.inference->Observe((tl.token_ms.back() - tl.first_scheduled_ms) / 1e3);
        for (size_t i = 1; i < tl.token_ms.size(); ++i)
          metrics.itl->Observe((tl.token_ms[i] - tl.token_ms[i - 1]) / 1e3);
      }
    }
    {
      std::lock_guard<std::mutex> lk(lives_mu);
      if (!l->scheduled) {
        l->scheduled = true;
        --n_waiting;
      }
    }
    {
      std::lock_guard<std::mutex> lk(l->mu);
      l->tl = tl;
      const double t = now();
      l->end(cancelled);
      const double d = now() - t;  // flushing the tail belongs to the last token
      l->detok_ms += d;
      l->detok_last_ms += d;
      l->cv.notify_all();
    }
    std::lock_guard<std::mutex> lk(lives_mu);
    lives.erase(tl.id);
    lives_cv.notify_all();
  }

  void on_step(const engine::StepRecord& rec) {
    if (!opt.trace_path.empty()) {
      json e = span("step", 0, rec.start_ms, rec.end_ms);
      e["args"] = {{"prefill_tokens", rec.prefill_tokens},
                   {"decode_tokens", rec.decode_tokens},
                   {"seqs", rec.seqs},
                   {"kv_usage", rec.kv_usage},
                   {"preempted", rec.preempted},
                   {"waiting", rec.waiting},
                   {"running", rec.running},
                   {"schedule_ms", rec.schedule_ms},
                   {"execute_ms", rec.execute_ms}};
      if (exec->last_offcpu_ms() >= 0) {
        e["args"]["offcpu_ms"] = exec->last_offcpu_ms();
        e["args"]["runq_ms"] = exec->last_runq_ms();
      }
      trace_event(std::move(e));
    }
    metrics.steps->Increment();
    // (on the engine's thread, right after the executor ran the step: its figures are this step's)
    if (exec->last_offcpu_ms() >= 0) {
      metrics.offcpu->Increment(exec->last_offcpu_ms() * 1e-3);
      metrics.runq->Increment(std::max(0.0, exec->last_runq_ms()) * 1e-3);
    }
    metrics.iteration_tokens->Observe(double(rec.prefill_tokens + rec.decode_tokens));
    if (rec.preempted > 0) metrics.preemptions->Increment(double(rec.preempted));
    std::lock_guard<std::mutex> lk(lives_mu);
    for (int64_t id : rec.request_ids) {
      const auto it = lives.find(id);
      if (it != lives.end() && !it->second->scheduled) {
        it->second->scheduled = true;
        --n_waiting;
      }
    }
  }

  // ---- connection threads ----
  void reply_error(httplib::Response& res, const ApiError& e, const std::string& reason) {
    res.status = e.status;
    res.set_content(e.body().dump(), "application/json");
    metrics.rejected(reason);
  }

  // Why a request that was handed to the engine ended without finishing (it is counted in
  // request_cancelled_total, not as a refusal).
  ApiError cancelled_error(const ServedRequest& l) const {
    if (l.cancel_reason == "engine_failed")
      return ApiError(503, "the request was cancelled: an engine step failed: " + engine->failure(),
                      "", "server_error", "engine_unavailable");
    return ApiError(503, "the request was cancelled: the server is shutting down", "",
                    "server_shutting_down", "shutting_down");
  }
  void reply_cancelled(httplib::Response& res, const ServedRequest& l) const {
    const ApiError e = cancelled_error(l);
    res.status = e.status;
    res.set_content(e.body().dump(), "application/json");
  }

  // Before the body is read: the request's clock starts, and a form-encoded type is set to JSON.
  httplib::Server::HandlerResponse received(const httplib::Request& req) {
    const double t = now();
    tl_t0 = ConnectionPool::take_first_request() ? std::min(t, ConnectionPool::accepted_ms()) : t;
    tl_live.reset();
    if (req.method == "POST") {
      // cpp-httplib parses an application/x-www-form-urlencoded body as a form and refuses one
      // over 8 KiB (413), and curl -d sends JSON with that type unless told otherwise. Every
      // body here is JSON whatever its declared type, so the type is set before the body is read
      // (the request object is cpp-httplib's own, not const; only the handler sees it const).
      auto& headers = const_cast<httplib::Request&>(req).headers;
      const auto [first, last] = headers.equal_range("Content-Type");
      for (auto it = first; it != last; ++it)
        if (it->second.rfind("application/x-www-form-urlencoded", 0) == 0)
          it->second = "application/json";
    }
    return httplib::Server::HandlerResponse::Unhandled;
  }

  // The gateway, once the body has been read (a refusal must not leave an unread body on a
  // keep-alive connection; bodies over --max-body-bytes are refused while they are skipped):
  // false when the request was refused (the answer is in res). api: an API route (key, rate
  // limit, loading and draining apply), not /health or /metrics.
  bool admit(const httplib::Request& req, httplib::Response& res, bool api) {
    if (ConnectionPool::refusing()) {
      res.set_header("Retry-After", "1");
      res.set_header("Connection", "close");
      reply_error(res,
                  ApiError(503,
                           "the server is at its connection limit (--max-connections and "
                           "--connection-backlog); retry later",
                           "", "server_overloaded", "overloaded"),
                  "overloaded");
      return false;
    }
    if (!api) return true;
    if (!ready) {
      res.set_header("Retry-After", "1");
      reply_error(res,
                  ApiError(503, "the model is loading; retry when /health answers 200", "",
                           "server_loading", "loading"),
                  "loading");
      return false;
    }
    std::string key = req.remote_addr;
    if (!opt.api_keys.empty()) {
      const std::string auth = req.get_header_value("Authorization");
      const std::string given = auth.rfind("Bearer ", 0) == 0 ? auth.substr(7) : "";
      if (!opt.api_keys.count(given)) {
        reply_error(res,
                    ApiError(401,
                             given.empty() ? "no API key given: send 'Authorization: Bearer KEY'"
                                           : "incorrect API key provided",
                             "", "invalid_request_error", "invalid_api_key"),
                    "unauthorized");
        return false;
      }
      key = given;
    }
    if (opt.rate_limit > 0) {
      int64_t retry = 0;
      if (!limiter.allow(key, now() / 1e3, retry)) {
        res.set_header("Retry-After", std::to_string(retry));
        reply_error(res,
                    ApiError(429,
                             "rate limit of " + fmt_g(opt.rate_limit) +
                                 " requests/s reached; retry after " + std::to_string(retry) + " s",
                             "", "rate_limit_error", "rate_limit_exceeded"),
                    "rate_limited");
        return false;
      }
    }
    if (draining && req.method == "POST") {
      res.set_header("Connection", "close");
      reply_error(
          res,
          ApiError(503, "the server is shutting down", "", "server_shutting_down", "shutting_down"),
          "draining");
      return false;
    }
    return true;
  }

  json usage_json(const ServedRequest& l) const {
    return {{"prompt_tokens", l.prompt_tokens},
            {"completion_tokens", l.n_tokens},
            {"total_tokens", l.prompt_tokens + l.n_tokens}};
  }

  // The body so far (a JSON object, dumped) closed with timings measured now: the stages end
  // when the response is serialized.
  std::string close_with_timings(ServedRequest& l, std::string body) {
    l.t_end = now();
    l.stages = l.stage_times();
    l.answered = true;
    const engine::RequestTimeline& tl = l.tl;
    const json timings = llama_timings(l.prompt_tokens, tl.prefix_hit_tokens,
                                       tl.token_ms.front() - tl.first_scheduled_ms, l.n_tokens,
                                       tl.token_ms.back() - tl.token_ms.front());
    body.pop_back();  // the closing brace
    body += ",\"timings\":" + timings.dump() + ",\"latprof_timings\":" + l.stages.to_json().dump() +
            "}";
    return body;
  }

  json chunk(const ServedRequest& l) const {
    return {{"id", l.object_id},
            {"object", l.req.chat ? "chat.completion.chunk" : "text_completion"},
            {"created", l.created},
            {"model", model_id}};
  }

  json choice_delta(const ServedRequest& l, const std::string& text, bool first,
                    const json& reason) const {
    if (!l.req.chat)
      return {{"index", 0}, {"text", text}, {"logprobs", nullptr}, {"finish_reason", reason}};
    json delta = json::object();
    if (first) delta["role"] = "assistant";
    if (!text.empty() || first) delta["content"] = text;
    return {{"index", 0}, {"delta", delta}, {"logprobs", nullptr}, {"finish_reason", reason}};
  }

  void handle_generate(const httplib::Request& req, httplib::Response& res, bool chat) {
    const Tokenizer& tok = model->tokenizer();
    auto l = std::make_shared<ServedRequest>(tok);
    l->t0 = tl_t0;
    try {
      l->req = parse_generate_request(req.body, chat, model->config().vocab_size);
    } catch (const ApiError& e) {
      return reply_error(res, e, "invalid");
    }
    GenerateRequest& g = l->req;
    if (!g.model.empty() && g.model != model_id)
      return reply_error(res,
                         ApiError(404,
                                  "the model '" + g.model +
                                      "' does not exist; this server "
                                      "serves '" +
                                      model_id + "'",
                                  "model", "invalid_request_error", "model_not_found"),
                         "model_not_found");
    l->t_tok0 = now();
    std::vector<int32_t> ids =
        g.prompt_ids_given
            ? g.prompt_ids
            : tok.encode(chat ? render_chat(opt.chat_template, g.messages) : g.prompt_text, true);
    l->t_tok1 = now();
    const int64_t n_in = int64_t(ids.size()), ctx = model->shape().max_model_len;
    const int64_t max_tokens = g.max_tokens.value_or(chat ? ctx - n_in : 16);
    if (n_in < 1 || n_in > ctx || max_tokens < 1 || max_tokens > ctx - n_in)  // no overflow
      return reply_error(
          res,
          ApiError(400,
                   "this model's maximum context length is " + std::to_string(ctx) +
                       " tokens; the request has " + std::to_string(n_in) + " in the " +
                       (chat ? "messages" : "prompt") + " and asks for " +
                       std::to_string(std::max<int64_t>(max_tokens, 1)) +
                       " in the completion; shorten the prompt or lower max_tokens",
                   g.max_tokens ? "max_tokens" : (chat ? "messages" : "prompt"),
                   "invalid_request_error", "context_length_exceeded"),
          "context_length");
    if (draining)
      return reply_error(
          res,
          ApiError(503, "the server is shutting down", "", "server_shutting_down", "shutting_down"),
          "draining");
    if (n_waiting.load() >= opt.max_waiting) {
      res.set_header("Retry-After", "1");
      return reply_error(res,
                         ApiError(503,
                                  "the waiting queue is full (--max-waiting " +
                                      std::to_string(opt.max_waiting) + "); retry later",
                                  "", "server_overloaded", "queue_full"),
                         "queue_full");
    }
    l->id = next_id++;
    l->object_id = (chat ? "chatcmpl-" : "cmpl-") +
                   random_hex(id_seed ^ uint64_t(l->id) * 0x9e3779b97f4a7c15ull);
    l->created = int64_t(std::time(nullptr));
    l->prompt_tokens = n_in;
    l->max_tokens = max_tokens;
    l->eos = tok.eos_id();
    for (const std::string& s : g.stop) l->max_stop = std::max(l->max_stop, s.size());
    if (!g.seed_given) g.sampling.seed = id_seed + uint64_t(l->id) * 0x2545F4914F6CDD1Dull;
    {
      std::lock_guard<std::mutex> lk(lives_mu);
      lives[l->id] = l;
    }
    exec->set_sampling(l->id, g.sampling);
    ++n_waiting;
    l->t_submit = now();
    try {
      engine->enqueue(l->id, std::move(ids), max_tokens);
    } catch (const std::exception& e) {
      exec->erase_sampling(l->id);
      --n_waiting;
      {
        std::lock_guard<std::mutex> lk(lives_mu);
        lives.erase(l->id);
      }
      if (dynamic_cast<const UsageError*>(&e))  // it could never fit the KV pool
        return reply_error(res,
                           ApiError(400, e.what(), "max_tokens", "invalid_request_error",
                                    "context_length_exceeded"),
                           "context_length");
      // The engine failed (see /health) or has shut down.
      return reply_error(res,
                         ApiError(503, std::string("the engine cannot take requests: ") + e.what(),
                                  "", "server_error", "engine_unavailable"),
                         "engine_unavailable");
    }
    if (g.stream) return stream(l, res);

    std::unique_lock<std::mutex> lk(l->mu);
    l->cv.wait(lk, [&] { return l->finished; });
    if (l->cancelled) return reply_cancelled(res, *l);
    json body = {{"id", l->object_id},
                 {"object", chat ? "chat.completion" : "text_completion"},
                 {"created", l->created},
                 {"model", model_id}};
    if (chat)
      body["choices"] = json::array({{{"index", 0},
                                      {"message", {{"role", "assistant"}, {"content", l->text}}},
                                      {"logprobs", nullptr},
                                      {"finish_reason", l->finish_reason}}});
    else
      body["choices"] = json::array({{{"index", 0},
                                      {"text", l->text},
                                      {"logprobs", nullptr},
                                      {"finish_reason", l->finish_reason}}});
    body["usage"] = usage_json(*l);
    std::string out = close_with_timings(*l, body.dump());
    res.set_header("Server-Timing", l->stages.server_timing());
    res.set_content(std::move(out), "application/json");
    tl_live = l;
  }

  void stream(const std::shared_ptr<ServedRequest>& l, httplib::Response& res) {
    {
      // The status is decided by the first event: a request cancelled before its first token
      // (shutdown) is answered 503, not an empty stream.
      std::unique_lock<std::mutex> lk(l->mu);
      l->cv.wait(lk, [&] { return l->finished || l->n_tokens > 0; });
      if (l->finished && l->cancelled) return reply_cancelled(res, *l);
    }
    ++active_streams;
    tl_live = l;
    auto first = std::make_shared<bool>(true);
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider(
        "text/event-stream",
        [this, l, first](size_t, httplib::DataSink& sink) {
          std::deque<ServedRequest::Delta> deltas;
          bool fin = false;
          {
            std::unique_lock<std::mutex> lk(l->mu);
            // Wake at least once a second so a stalled request still checks the socket.
            l->cv.wait_for(lk, std::chrono::seconds(1),
                           [&] { return l->finished || !l->deltas.empty(); });
            deltas.swap(l->deltas);
            fin = l->finished;
          }
          for (const ServedRequest::Delta& d : deltas) {
            const double t = now();
            json c = chunk(*l);
            c["choices"] = json::array({choice_delta(*l, d.text, *first, nullptr)});
            if (l->req.continuous_usage)
              c["usage"] = {{"prompt_tokens", l->prompt_tokens},
                            {"completion_tokens", d.tokens},
                            {"total_tokens", l->prompt_tokens + d.tokens}};
            *first = false;
            const std::string ev = "data: " + c.dump() + "\n\n";
            if (!sink.write(ev.data(), ev.size())) return client_gone(l);
            l->write_ms += now() - t;
          }
          if (!fin) return true;
          if (l->cancelled) {
            // Cancelled while streaming (drain timeout, engine failure): an error event ends it.
            const std::string ev =
                "data: " + cancelled_error(*l).body().dump() + "\n\ndata: [DONE]\n\n";
            sink.write(ev.data(), ev.size());
            sink.done();
            return true;
          }
          json c = chunk(*l);
          c["choices"] = json::array({choice_delta(*l, "", *first, l->finish_reason)});
          if (l->req.continuous_usage) c["usage"] = usage_json(*l);
          std::string last;
          if (l->req.include_usage) {
            json u = chunk(*l);
            u["choices"] = json::array();
            u["usage"] = usage_json(*l);
            last = "data: " + c.dump() + "\n\ndata: " + close_with_timings(*l, u.dump()) + "\n\n";
          } else {
            last = "data: " + close_with_timings(*l, c.dump()) + "\n\n";
          }
          last += "data: [DONE]\n\n";
          if (!sink.write(last.data(), last.size())) return client_gone(l);
          sink.done();
          return true;
        },
        [this, l](bool) {
          // Released once the response is over, however it ended.
          client_gone(l);  // a no-op when it finished
          --active_streams;
          lives_cv.notify_all();
        });
  }

  bool client_gone(const std::shared_ptr<ServedRequest>& l) {
    {
      std::lock_guard<std::mutex> lk(l->mu);
      if (l->finished || !l->cancel_reason.empty()) return false;
      l->cancel_reason = "client_disconnected";
    }
    engine->cancel(l->id);
    return false;
  }

  // After the response's last byte was written (cpp-httplib's logger).
  void written(const httplib::Request& req, const httplib::Response& res) {
    metrics.http(res.status);
    const std::shared_ptr<ServedRequest> l = std::move(tl_live);
    tl_live.reset();
    if (!l || !l->answered) return;
    const double t_written = now();
    const StageTimes& s = l->stages;
    metrics.e2e->Observe((t_written - l->t0) / 1e3);
    metrics.gateway->Observe(s.gateway_ms / 1e3);
    metrics.tokenize->Observe(s.tokenize_ms / 1e3);
    metrics.detokenize->Observe(s.detokenize_ms / 1e3);
    metrics.serialize->Observe(s.serialize_ms / 1e3);
    if (!opt.trace_path.empty()) {
      // One track per request: its stages on the server's clock.
      const engine::RequestTimeline& tl = l->tl;
      const int64_t tid = l->id;
      trace_event({{"name", "thread_name"},
                   {"ph", "M"},
                   {"pid", 1},
                   {"tid", tid},
                   {"args", {{"name", "request " + std::to_string(l->id) + " " + l->object_id}}}});
      trace_event(span("gateway", tid, l->t0, l->t_tok0));
      trace_event(span("tokenize", tid, l->t_tok0, l->t_tok1));
      trace_event(span("gateway", tid, l->t_tok1, l->t_submit));
      trace_event(span("queue", tid, l->t_submit, tl.first_scheduled_ms));
      trace_event(span("prefill", tid, tl.first_scheduled_ms, tl.token_ms.front()));
      json d = span("decode", tid, tl.token_ms.front(), tl.token_ms.back());
      d["args"] = {{"tokens", l->n_tokens}, {"preemptions", tl.preemptions}};
      trace_event(std::move(d));
      trace_event(span("serialize", tid, tl.token_ms.back(), l->t_end));
      trace_event(span("write", tid, l->t_end, t_written));
    }
    if (!jsonl.is_open()) return;
    json line = {{"id", l->object_id},
                 {"path", req.path},
                 {"stream", l->req.stream},
                 {"status", res.status},
                 {"prompt_tokens", l->prompt_tokens},
                 {"completion_tokens", l->n_tokens},
                 {"finish_reason", l->finish_reason},
                 {"preemptions", l->tl.preemptions},
                 {"latprof_timings", s.to_json()},
                 {"written_ms", t_written - l->t0},
                 {"stream_write_ms", l->write_ms}};
    std::vector<double> tokens;
    for (double t : l->tl.token_ms) tokens.push_back(t - l->t0);
    line["token_ms"] = tokens;
    std::lock_guard<std::mutex> lk(jsonl_mu);
    jsonl << line.dump() << '\n';
    jsonl.flush();
  }

  void routes() {
    http->new_task_queue = [this] {
      conns = new ConnectionPool(
          size_t(opt.max_connections), size_t(opt.connection_backlog), [this] { return now(); },
          [this](double ms) { metrics.connection_wait->Observe(ms / 1e3); });
      return conns;
    };
    http->set_read_timeout(time_t(opt.read_timeout_s), 0);
    http->set_write_timeout(time_t(opt.write_timeout_s), 0);
    http->set_keep_alive_timeout(time_t(std::max(1.0, opt.keep_alive_timeout_s)));
    http->set_keep_alive_max_count(kKeepAliveMaxRequests);
    // Without TCP_NODELAY (cpp-httplib's default is off) a response written in two pieces
    // (headers, body) or a stream's small chunks wait for the client's delayed ACK: 40 ms stalls.
    http->set_tcp_nodelay(true);
    http->set_payload_max_length(size_t(opt.max_body_bytes));
    http->set_pre_routing_handler(
        [this](const httplib::Request& q, httplib::Response&) { return received(q); });
    http->set_logger(
        [this](const httplib::Request& q, const httplib::Response& r) { written(q, r); });
    http->set_error_handler(httplib::Server::HandlerWithResponse(
        [this](const httplib::Request& q, httplib::Response& r) {
          if (!r.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
          if (r.status == 413) {
            // cpp-httplib skipped a body over --max-body-bytes: a validation error here.
            reply_error(r,
                        ApiError(400,
                                 "the request body is larger than --max-body-bytes " +
                                     std::to_string(opt.max_body_bytes),
                                 "body", "invalid_request_error", "body_too_large"),
                        "body_too_large");
            return httplib::Server::HandlerResponse::Handled;
          }
          const std::string msg = r.status == 404 ? "no route " + q.method + " " + q.path
                                                  : "HTTP error " + std::to_string(r.status);
          r.set_content(ApiError(r.status, msg).body().dump(), "application/json");
          return httplib::Server::HandlerResponse::Handled;
        }));
    http->set_exception_handler(
        [](const httplib::Request&, httplib::Response& r, std::exception_ptr ep) {
          std::string what = "unknown";
          try {
            std::rethrow_exception(ep);
          } catch (const std::exception& e) {
            what = e.what();
          } catch (...) {
          }
          r.status = 500;
          r.set_content(ApiError(500, "internal error: " + what, "", "server_error").body().dump(),
                        "application/json");
        });
    http->Get("/health", [this](const httplib::Request& q, httplib::Response& r) {
      if (!admit(q, r, false)) return;
      const std::string failure = ready ? engine->failure() : "";
      const char* status = !failure.empty() ? "failed"
                           : draining       ? "draining"
                           : ready          ? "ok"
                                            : "loading";
      json body = {{"status", status}};
      if (!failure.empty()) body["error"] = failure;  // a step threw; every request is refused
      r.status = std::string(status) == "ok" ? 200 : 503;
      r.set_content(body.dump(), "application/json");
    });
    http->Get("/metrics", [this](const httplib::Request& q, httplib::Response& r) {
      if (!admit(q, r, false)) return;
      if (ready) {
        metrics.running->Set(double(engine->online_running()));
        metrics.waiting->Set(double(n_waiting.load()));
        metrics.kv_usage->Set(engine->online_kv_usage());
      }
      r.set_content(metrics.text(), "text/plain; version=0.0.4");
    });
    http->Get("/v1/models", [this](const httplib::Request& q, httplib::Response& r) {
      if (!admit(q, r, true)) return;
      json m = {{"id", model_id},
                {"object", "model"},
                {"created", created},
                {"owned_by", "latprof"},
                {"root", model->config().name},
                {"max_model_len", model->shape().max_model_len}};
      r.set_content(json{{"object", "list"}, {"data", json::array({m})}}.dump(),
                    "application/json");
    });
    http->Post("/v1/completions", [this](const httplib::Request& q, httplib::Response& r) {
      if (admit(q, r, true)) handle_generate(q, r, false);
    });
    http->Post("/v1/chat/completions", [this](const httplib::Request& q, httplib::Response& r) {
      if (admit(q, r, true)) handle_generate(q, r, true);
    });
    http->Post("/tokenize", [this](const httplib::Request& q, httplib::Response& r) {
      if (!admit(q, r, true)) return;
      try {
        const TokenizeRequest t = parse_tokenize_request(q.body);
        const std::string text = t.chat ? render_chat(opt.chat_template, t.messages) : t.prompt;
        const std::vector<int32_t> ids = model->tokenizer().encode(text, t.add_special_tokens);
        r.set_content(json{{"tokens", ids},
                           {"count", ids.size()},
                           {"max_model_len", model->shape().max_model_len}}
                          .dump(),
                      "application/json");
      } catch (const ApiError& e) {
        reply_error(r, e, "invalid");
      }
    });
    http->Post("/detokenize", [this](const httplib::Request& q, httplib::Response& r) {
      if (!admit(q, r, true)) return;
      try {
        const std::vector<int32_t> ids =
            parse_detokenize_request(q.body, model->config().vocab_size);
        StreamingDetokenizer d(model->tokenizer());
        std::string text;
        for (int32_t id : ids) text += d.push(id);
        text += d.finish();
        r.set_content(json{{"prompt", text}}.dump(), "application/json");
      } catch (const ApiError& e) {
        reply_error(r, e, "invalid");
      }
    });
  }
};

Server::Server(const ServerOptions& o) : impl_(std::make_unique<Impl>(o)) {
  if (!o.jsonl_path.empty()) {
    impl_->jsonl.open(o.jsonl_path, std::ios::app);
    if (!impl_->jsonl) usage_error("--jsonl " + o.jsonl_path + " cannot be opened for appending");
  }
}

Server::~Server() {
  if (impl_->listener.joinable()) {
    impl_->draining = true;
    if (impl_->engine) impl_->engine->shutdown();
    impl_->http->stop();
    impl_->listener.join();
  }
}

const std::string& Server::model_id() const {
  return impl_->model_id;
}
int Server::port() const {
  return impl_->bound_port;
}
std::string Server::url() const {
  return (impl_->opt.tls_cert.empty() ? "http://" : "https://") + impl_->opt.host + ":" +
         std::to_string(impl_->bound_port);
}

void Server::listen() {
  Impl& m = *impl_;
  m.routes();
  // cpp-httplib sets SO_REUSEPORT (a second server on the same port would bind and take half
  // the connections) and listens with a backlog of 5 (a burst of connections overflows the
  // kernel's accept queue: resets and 1 s retransmits). Only SO_REUSEADDR here, and the
  // backlog is raised once bound.
  int listen_fd = -1;
  m.http->set_socket_options([&listen_fd](socket_t fd) {
    const int yes = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    listen_fd = fd;
  });
  if (m.opt.port == 0)
    m.bound_port = m.http->bind_to_any_port(m.opt.host);
  else
    m.bound_port = m.http->bind_to_port(m.opt.host, m.opt.port) ? m.opt.port : -1;
  if (m.bound_port < 0)
    usage_error("cannot listen on " + m.opt.host + ":" + std::to_string(m.opt.port) +
                " (address in use, or not an address of this machine); choose another --host "
                "or --port");
  if (listen_fd >= 0) ::listen(listen_fd, SOMAXCONN);
  m.listener = std::thread([&m] { m.http->listen_after_bind(); });
  // Connections are queued by the kernel from bind on; wait until the accept loop runs.
  for (int i = 0; i < 5000 && !m.http->is_running(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
}

void Server::attach(ServingModel& model) {
  Impl& m = *impl_;
  LATPROF_ASSERT(!m.model, "a model is already attached");
  const EngineShape& e = model.shape();
  m.model = &model;
  if (m.model_id.empty()) m.model_id = model.config().name;
  m.pool = std::make_unique<engine::BlockPool>(e.kv_blocks, e.block_size);
  m.exec = std::make_unique<ServingExecutor>(model);
  engine::SchedulerConfig sc{e.max_step_tokens, e.max_seqs, e.max_model_len};
  sc.enable_prefix_caching = model.prefix_cache();
  // Warm-up: one short request through the same pool and executor before the first client,
  // so no client meets cold threads, pages or code paths.
  {
    engine::Engine warm(sc, *m.pool, *m.exec, m.clock);
    const int64_t n_in = std::min<int64_t>(kWarmupPromptTokens, e.max_model_len - 1);
    std::vector<int32_t> prompt;
    for (int64_t i = 0; i < n_in; ++i) prompt.push_back(int32_t(i % model.config().vocab_size));
    warm.submit(0, std::move(prompt),
                std::min<int64_t>(kWarmupOutputTokens, e.max_model_len - n_in), 0);
    warm.run();
  }
  m.engine = std::make_unique<engine::Engine>(sc, *m.pool, *m.exec, m.clock);
  engine::Engine::OnlineHooks hooks;
  hooks.token = [&m](int64_t id, int32_t tok, double t) { return m.on_token(id, tok, t); };
  hooks.finish = [&m](const engine::RequestTimeline& tl, bool c) { m.on_finish(tl, c); };
  hooks.step = [&m](const engine::StepRecord& r) { m.on_step(r); };
  m.engine->start(std::move(hooks));
  m.ready = true;
}

void Server::drain() {
  Impl& m = *impl_;
  if (m.draining.exchange(true)) return wait();
  // Requests still waiting for their first step are answered 503 at once.
  {
    std::lock_guard<std::mutex> lk(m.lives_mu);
    for (auto& [id, l] : m.lives) {
      std::lock_guard<std::mutex> ll(l->mu);
      if (!l->scheduled && l->cancel_reason.empty()) {
        l->cancel_reason = "shutdown";
        m.engine->cancel(id);  // lives exist only with an engine
      }
    }
  }
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                            std::chrono::duration<double>(m.opt.drain_timeout_s));
  {
    std::unique_lock<std::mutex> lk(m.lives_mu);
    m.lives_cv.wait_until(lk, deadline, [&] { return m.lives.empty(); });
    for (auto& [id, l] : m.lives) {
      std::lock_guard<std::mutex> ll(l->mu);
      if (l->cancel_reason.empty()) l->cancel_reason = "drain_timeout";
      m.engine->cancel(id);
    }
  }
  // Streams write their last chunks before the HTTP server stops (its stop cuts streams).
  {
    std::unique_lock<std::mutex> lk(m.lives_mu);
    m.lives_cv.wait_for(lk, std::chrono::seconds(5),
                        [&] { return m.lives.empty() && m.active_streams.load() == 0; });
  }
  if (m.engine) m.engine->shutdown();
  m.http->stop();
  if (m.listener.joinable()) m.listener.join();
  m.write_trace();
  std::lock_guard<std::mutex> lk(m.stop_mu);
  m.stopped = true;
  m.stop_cv.notify_all();
}

void Server::wait() {
  Impl& m = *impl_;
  std::unique_lock<std::mutex> lk(m.stop_mu);
  m.stop_cv.wait(lk, [&] { return m.stopped; });
}

}  // namespace latprof::server
