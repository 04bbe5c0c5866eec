#pragma once
// latprof serve: an OpenAI-compatible HTTP server (cpp-httplib) on the continuous-batching engine
// in online mode, measuring every stage of each request on one clock (the engine's):
//
//   received ── gateway ── tokenize ── gateway ── queue ── prefill ── decode ── serialize ── sent
//   (headers in)  (auth, rate limit,    (context   (waiting  (first     (first to   (last token
//                  parse, validate)      check)     in the    scheduled  last token, to the body
//                                                   engine)   to first   own detok   or final
//                                                             token)     removed)    chunk built)
//
// with detokenize (each of the request's own tokens, on the engine thread) beside them; the
// durations add up to total_ms exactly (see README, "latprof serve").
#include <atomic>
#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "server/chat_template.hpp"
#include "server/serving_model.hpp"

namespace latprof::server {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8000;                 // 0: any free port (port() tells which)
  std::string served_model_name;   // "": the model's name
  std::set<std::string> api_keys;  // empty: no authentication
  double rate_limit = 0;           // requests per second per key (or client address); 0: none
  double rate_burst = 0;           // bucket size; 0: max(1, rate_limit)
  int64_t max_waiting = 1024;      // requests waiting in the engine's queue; beyond: 503
  int max_connections = 256;       // connection threads
  int connection_backlog = 64;     // accepted connections waiting for a thread; beyond: 503
  int64_t max_body_bytes = 8 << 20;
  double read_timeout_s = 30, write_timeout_s = 30, keep_alive_timeout_s = 5;
  double drain_timeout_s = 30;
  ChatTemplate chat_template = ChatTemplate::plain;
  std::string chat_template_source = "none";  // where chat_template came from
  std::string jsonl_path;                     // one line per finished request ("": none)
  std::string trace_path;                     // Perfetto trace written at exit ("": none)
  std::string tls_cert, tls_key;              // PEM files: HTTPS (OpenSSL) when set
};

class Server {
 public:
  explicit Server(const ServerOptions& o);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Binds and starts the HTTP threads; returns once it accepts connections. Until attach(),
  // /health answers 503 and API requests 503 (loading). Throws UsageError when the address
  // cannot be bound.
  void listen();
  // Serves `model` (loaded): a warm-up request, then the engine's loop; /health answers 200.
  // The model must outlive the server.
  void attach(ServingModel& model);
  int port() const;
  std::string url() const;
  // Stops accepting API requests (503), cancels queued ones, lets running requests finish for
  // up to drain_timeout_s, cancels the rest, then stops. Thread-safe; returns when stopped.
  void drain();
  // Blocks until the server has stopped.
  void wait();
  const std::string& model_id() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace latprof::server
