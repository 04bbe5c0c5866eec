#pragma once
// The server's gateway pieces that need no HTTP: API keys, a per-key token-bucket rate limiter,
// and the bounded pool of connection threads that replaces cpp-httplib's unbounded task queue.
#include <httplib.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

namespace latprof::server {

// API keys from --api-key and --api-keys FILE (one key per line; blank lines and lines starting
// with # are skipped). Throws UsageError for an unreadable file or one without a key.
std::set<std::string> load_api_keys(const std::vector<std::string>& keys, const std::string& file);

// A token bucket per client key: `rate` requests per second on average, bursts of up to
// `burst`. Thread-safe.
class RateLimiter {
 public:
  RateLimiter(double rate, double burst) : rate_(rate), burst_(burst) {}
  // True when a request of `key` may pass now (a token is taken); otherwise false and
  // retry_after_s is how long until a token is free (seconds, rounded up, >= 1).
  bool allow(const std::string& key, double now_s, int64_t& retry_after_s);

 private:
  struct Bucket {
    double tokens;
    double last_s;
  };
  double rate_, burst_;
  std::mutex mu_;
  std::map<std::string, Bucket> buckets_;
};

// Connection threads for cpp-httplib: `threads` workers take accepted connections from a queue
// of at most `backlog`; a connection beyond that is handed to a refusal thread instead, which
// answers each of its requests 503 at once (refusing() is true on it). Each worker knows when
// its connection was accepted (accepted_ms()), so the wait for a thread is counted.
class ConnectionPool : public httplib::TaskQueue {
 public:
  // waited(ms): called on the connection thread as it takes a connection, with how long the
  // connection waited for a thread since it was accepted.
  ConnectionPool(size_t threads, size_t backlog, std::function<double()> now_ms,
                 std::function<void(double)> waited = nullptr);
  ~ConnectionPool() override;
  void enqueue(std::function<void()> fn) override;
  void shutdown() override;

  // On a connection thread: this connection is being refused (pool and backlog full).
  static bool refusing();
  // On a connection thread: when its connection was accepted (engine clock, ms), and whether
  // the request now being read is its first (then the wait for a thread counts as its own).
  static double accepted_ms();
  static bool take_first_request();
  size_t queued() const;
  int64_t refused() const { return refused_; }

 private:
  struct Task {
    std::function<void()> fn;
    double accepted_ms;
  };
  void work(bool refuser);

  std::function<double()> now_ms_;
  std::function<void(double)> waited_;
  size_t backlog_;
  mutable std::mutex mu_;
  std::condition_variable cv_, refuse_cv_;
  std::deque<Task> queue_, refuse_queue_;
  std::vector<std::thread> threads_;
  bool shutdown_ = false;
  size_t idle_ = 0;  // workers waiting for a connection
  int64_t refused_ = 0;
};

}  // namespace latprof::server
