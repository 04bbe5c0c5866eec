#include "load/client.hpp"

#include <curl/curl.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <ctime>
#include <memory>
#include <queue>
#include <stdexcept>
#include <unordered_map>

#include "core/error.hpp"
#include "core/utf8.hpp"
#include "load/sse.hpp"

namespace latprof::load {

namespace {

using Clock = std::chrono::steady_clock;

// curl_global_init once per process, before any other thread could call curl.
void curl_once() {
  static const bool ok = curl_global_init(CURL_GLOBAL_DEFAULT) == CURLE_OK;
  if (!ok) throw std::runtime_error("curl_global_init failed");
}

double thread_cpu_ms() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) * 1e3 + double(ts.tv_nsec) / 1e6;
}

// Many concurrent streams need many descriptors: raise the soft limit to the hard one.
void raise_fd_limit() {
  rlimit r{};
  if (getrlimit(RLIMIT_NOFILE, &r) == 0 && r.rlim_cur < r.rlim_max) {
    r.rlim_cur = r.rlim_max;
    setrlimit(RLIMIT_NOFILE, &r);
  }
}

// The error kinds counted in summary.errors (README: "latprof load", errors).
std::string classify(CURLcode rc, long os_errno) {
  switch (rc) {
    case CURLE_COULDNT_CONNECT:
      return os_errno == ECONNREFUSED ? "connection_refused" : "connect_failed";
    case CURLE_OPERATION_TIMEDOUT:
      return "timeout";
    case CURLE_COULDNT_RESOLVE_HOST:
      return "dns_failed";
    case CURLE_GOT_NOTHING:
    case CURLE_RECV_ERROR:
    case CURLE_SEND_ERROR:
    case CURLE_PARTIAL_FILE:
      return "connection_closed";
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_PEER_FAILED_VERIFICATION:
      return "tls";
    default:
      return "transport";
  }
}

enum class BodyMode { undecided, sse, json, error, scrape };

// The most of an error or JSON body kept (an error message needs far less).
constexpr size_t kMaxBody = size_t(64) << 20;

struct Transfer {
  Client::Loop* loop = nullptr;
  CURL* easy = nullptr;
  RequestResult r;
  std::string body;
  BodyMode mode = BodyMode::undecided;
  std::string raw;  // an error or JSON body
  SseParser sse;
  std::vector<std::string> events;  // scratch
  int64_t last_completion = 0;      // cumulative usage seen in earlier chunks
  bool started = false;             // curl has begun (sent_ms set)
  char errbuf[CURL_ERROR_SIZE] = {};
};

}  // namespace

class Client::Loop {
 public:
  explicit Loop(const ClientOptions& o) : o_(o), t0_(Clock::now()) {
    curl_once();
    multi_ = curl_multi_init();
    epfd_ = epoll_create1(EPOLL_CLOEXEC);
    tfd_ = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    if (!multi_ || epfd_ < 0 || tfd_ < 0)
      throw std::runtime_error(std::string("event loop setup failed: ") + std::strerror(errno));
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = tfd_;
    epoll_ctl(epfd_, EPOLL_CTL_ADD, tfd_, &ev);
    curl_multi_setopt(multi_, CURLMOPT_SOCKETFUNCTION, &Client::Loop::socket_cb);
    curl_multi_setopt(multi_, CURLMOPT_SOCKETDATA, this);
    curl_multi_setopt(multi_, CURLMOPT_TIMERFUNCTION, &Client::Loop::timer_cb);
    curl_multi_setopt(multi_, CURLMOPT_TIMERDATA, this);
    // Keep every connection: curl's default cache (4 per transfer added) closes connections
    // as a run winds down, and the next run would pay for new ones.
    curl_multi_setopt(multi_, CURLMOPT_MAXCONNECTS, 100000L);
    headers_ = curl_slist_append(headers_, "Content-Type: application/json");
    headers_ = curl_slist_append(headers_, "Expect:");  // no 100-continue round trip
    if (!o_.api_key.empty())
      headers_ = curl_slist_append(headers_, ("Authorization: Bearer " + o_.api_key).c_str());
  }
  ~Loop() {
    for (auto& [easy, t] : live_) {
      curl_multi_remove_handle(multi_, easy);
      curl_easy_cleanup(easy);
    }
    for (CURL* e : pool_) curl_easy_cleanup(e);
    curl_multi_cleanup(multi_);
    curl_slist_free_all(headers_);
    close(tfd_);
    close(epfd_);
  }

  RunResult run(const LoadPlan& plan);
  double ms() const {
    return std::chrono::duration<double, std::milli>(Clock::now() - t0_).count();
  }

 private:
  static int socket_cb(CURL*, curl_socket_t s, int what, void* userp, void* socketp);
  static int timer_cb(CURLM*, long timeout_ms, void* userp);
  static size_t write_cb(char* p, size_t size, size_t n, void* userp);
  static int debug_cb(CURL*, curl_infotype type, char*, size_t, void* userp);
  bool on_event(Transfer& t, const std::string& data);
  void start(const LoadPlan& plan, int64_t index, double intended_ms);
  void drain();
  void finish(CURL* easy, CURLcode rc);
  void arm_timer(double at_ms);
  void start_scrape(const std::string& url);
  // A kept easy handle (its connection reused), reset, or a new one.
  CURL* take_easy();
  void finish_scrape(CURL* easy, Transfer& t, CURLcode rc);
  double run_base_ = 0;
  double armed_ms_ = -1;  // the timerfd's deadline (infinity: disarmed)

  ClientOptions o_;
  CURLM* multi_ = nullptr;
  int epfd_ = -1, tfd_ = -1;
  curl_slist* headers_ = nullptr;
  Clock::time_point t0_;
  std::optional<double> curl_deadline_ms_;
  double wake_ms_ = 0;  // when epoll_wait last returned: the stamp of what it reported
  std::vector<CURL*> pool_;
  std::unordered_map<CURL*, std::unique_ptr<Transfer>> live_;
  std::vector<RequestResult> done_;
  // closed loop: when each free slot freed (or may first start, under a ramp-up), earliest first
  std::priority_queue<double, std::vector<double>, std::greater<>> freed_ms_;
  int64_t max_in_flight_ = 0;
  int64_t in_flight_ = 0;  // requests (scrapes of /metrics not counted)
  bool closed_ = false;
  // /metrics
  std::vector<MetricsSample> samples_;
  std::string metrics_error_;
  CURL* scrape_ = nullptr;  // the scrape in flight
};

namespace {
size_t append_cb(char* p, size_t size, size_t n, void* userp);
}  // namespace

int Client::Loop::socket_cb(CURL*, curl_socket_t s, int what, void* userp, void* socketp) {
  auto* L = static_cast<Loop*>(userp);
  if (what == CURL_POLL_REMOVE) {
    epoll_ctl(L->epfd_, EPOLL_CTL_DEL, s, nullptr);
    curl_multi_assign(L->multi_, s, nullptr);
    return 0;
  }
  epoll_event ev{};
  ev.events = ((what & CURL_POLL_IN) ? EPOLLIN : 0u) | ((what & CURL_POLL_OUT) ? EPOLLOUT : 0u);
  ev.data.fd = s;
  if (!socketp) {
    if (epoll_ctl(L->epfd_, EPOLL_CTL_ADD, s, &ev) != 0 && errno == EEXIST)
      epoll_ctl(L->epfd_, EPOLL_CTL_MOD, s, &ev);
    curl_multi_assign(L->multi_, s, L);  // any non-null: "registered"
  } else if (epoll_ctl(L->epfd_, EPOLL_CTL_MOD, s, &ev) != 0 && errno == ENOENT) {
    epoll_ctl(L->epfd_, EPOLL_CTL_ADD, s, &ev);
  }
  return 0;
}

int Client::Loop::timer_cb(CURLM*, long timeout_ms, void* userp) {
  auto* L = static_cast<Loop*>(userp);
  if (timeout_ms < 0)
    L->curl_deadline_ms_.reset();
  else
    L->curl_deadline_ms_ = L->ms() + double(timeout_ms);
  return 0;
}

int Client::Loop::debug_cb(CURL*, curl_infotype type, char*, size_t, void* userp) {
  auto* t = static_cast<Transfer*>(userp);
  if (!t->started) {  // curl's first word on this transfer: it has begun
    t->started = true;
    t->r.sent_ms = t->loop->ms();
  }
  if (type == CURLINFO_HEADER_OUT || type == CURLINFO_DATA_OUT)
    t->r.request_sent_ms = t->loop->ms();  // the last piece written wins
  return 0;
}

size_t Client::Loop::write_cb(char* p, size_t size, size_t n, void* userp) {
  auto* t = static_cast<Transfer*>(userp);
  Client::Loop* L = t->loop;
  const size_t bytes = size * n;
  if (!t->r.first_byte_ms) t->r.first_byte_ms = L->wake_ms_;
  if (t->mode == BodyMode::scrape) {
    if (t->raw.size() + bytes > kMaxBody) return 0;
    t->raw.append(p, bytes);
    return bytes;
  }
  if (t->mode == BodyMode::undecided) {
    long code = 0;
    curl_easy_getinfo(t->easy, CURLINFO_RESPONSE_CODE, &code);
    t->r.status = int(code);
    char* ct = nullptr;
    curl_easy_getinfo(t->easy, CURLINFO_CONTENT_TYPE, &ct);
    if (code >= 400)
      t->mode = BodyMode::error;
    else if (ct && std::strstr(ct, "text/event-stream"))
      t->mode = BodyMode::sse;
    else
      t->mode = BodyMode::json;
  }
  if (t->mode != BodyMode::sse) {
    if (t->raw.size() + bytes > kMaxBody) {
      t->r.error_kind = "response_too_large";
      t->r.error_message = "the response body passed 64 MiB";
      return 0;
    }
    t->raw.append(p, bytes);
    return bytes;
  }
  t->events.clear();
  t->sse.feed(p, bytes, t->events);
  if (t->sse.overflowed()) {
    t->r.error_kind = "malformed_sse";
    t->r.error_message = "an SSE line longer than 16 MiB";
    return 0;
  }
  for (const std::string& e : t->events)
    if (!L->on_event(*t, e)) return 0;  // aborts the transfer (CURLE_WRITE_ERROR)
  return bytes;
}

bool Client::Loop::on_event(Transfer& t, const std::string& data) {
  if (t.r.saw_done) return true;  // anything after [DONE] is ignored
  Chunk c;
  std::string why;
  if (!parse_chunk(data.data(), data.size(), o_.endpoint, c, why)) {
    t.r.error_kind = "malformed_sse";
    t.r.error_message = why;
    return false;
  }
  if (c.done) {
    t.r.saw_done = true;
    return true;
  }
  if (c.error) {
    t.r.error_kind = "stream_error";
    t.r.error_message = *c.error;
    return false;
  }
  if (c.content) {
    // Stamped when epoll_wait returned with its bytes, but never before the request began: a
    // response read in the same pass as its request was sent (a fast server on loopback) came
    // after the send.
    t.r.chunk_ms.push_back(std::max(wake_ms_, t.r.sent_ms));
    int64_t k = 0;  // tokens in this chunk, where cumulative usage says
    if (c.completion_tokens && *c.completion_tokens > t.last_completion)
      k = *c.completion_tokens - t.last_completion;
    t.r.chunk_tokens.push_back(k);
  }
  if (c.completion_tokens) {
    t.last_completion = *c.completion_tokens;
    t.r.completion_tokens = c.completion_tokens;
  }
  if (c.prompt_tokens) t.r.prompt_tokens = c.prompt_tokens;
  if (c.cached_tokens) t.r.cached_tokens = c.cached_tokens;
  if (!c.latprof_timings.is_null()) t.r.latprof_timings = std::move(c.latprof_timings);
  if (!c.timings.is_null()) t.r.timings = std::move(c.timings);
  if (!c.metrics.is_null()) t.r.metrics = std::move(c.metrics);
  return true;
}

void Client::Loop::start(const LoadPlan& plan, int64_t index, double intended_ms) {
  auto t = std::make_unique<Transfer>();
  t->loop = this;
  t->r.index = index;
  t->r.intended_ms = intended_ms;
  t->body = plan.make_body(index, t->r.asked_input, t->r.asked_output);
  CURL* e = take_easy();
  t->easy = e;
  curl_easy_setopt(e, CURLOPT_URL, o_.url.c_str());
  curl_easy_setopt(e, CURLOPT_PROXY, "");  // never through an environment's proxy
  curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(e, CURLOPT_HTTPHEADER, headers_);
  curl_easy_setopt(e, CURLOPT_POSTFIELDS, t->body.data());
  curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, curl_off_t(t->body.size()));
  curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, &Client::Loop::write_cb);
  curl_easy_setopt(e, CURLOPT_WRITEDATA, t.get());
  curl_easy_setopt(e, CURLOPT_DEBUGFUNCTION, &Client::Loop::debug_cb);
  curl_easy_setopt(e, CURLOPT_DEBUGDATA, t.get());
  curl_easy_setopt(e, CURLOPT_VERBOSE, 1L);  // the debug function is called only when verbose
  curl_easy_setopt(e, CURLOPT_ERRORBUFFER, t->errbuf);
  curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, long(std::llround(o_.request_timeout_s * 1e3)));
  curl_easy_setopt(e, CURLOPT_PRIVATE, t.get());
  t->r.handed_ms = t->r.sent_ms = ms();  // sent_ms moves to curl's first step
  live_.emplace(e, std::move(t));
  curl_multi_add_handle(multi_, e);
  ++in_flight_;
  max_in_flight_ = std::max<int64_t>(max_in_flight_, in_flight_);
}

void Client::Loop::finish(CURL* easy, CURLcode rc) {
  auto it = live_.find(easy);
  if (it == live_.end()) return;
  std::unique_ptr<Transfer> t = std::move(it->second);
  live_.erase(it);
  curl_multi_remove_handle(multi_, easy);
  if (t->mode == BodyMode::scrape) {
    finish_scrape(easy, *t, rc);
    return;
  }
  --in_flight_;
  RequestResult& r = t->r;
  r.done_ms = ms();
  auto get = [&](CURLINFO what) {
    curl_off_t us = 0;
    curl_easy_getinfo(easy, what, &us);
    return double(us) / 1e3;
  };
  r.phases.namelookup_ms = get(CURLINFO_NAMELOOKUP_TIME_T);
  r.phases.connect_ms = get(CURLINFO_CONNECT_TIME_T);
  r.phases.appconnect_ms = get(CURLINFO_APPCONNECT_TIME_T);
  r.phases.pretransfer_ms = get(CURLINFO_PRETRANSFER_TIME_T);
  r.phases.starttransfer_ms = get(CURLINFO_STARTTRANSFER_TIME_T);
  r.phases.total_ms = get(CURLINFO_TOTAL_TIME_T);
  long conns = 0;
  curl_easy_getinfo(easy, CURLINFO_NUM_CONNECTS, &conns);
  r.phases.new_connections = conns;
  if (r.status == 0) {
    long code = 0;
    curl_easy_getinfo(easy, CURLINFO_RESPONSE_CODE, &code);
    r.status = int(code);
  }
  if (!r.error_kind.empty()) {
    // set by the write callback (malformed SSE, an error event): keep it
  } else if (rc != CURLE_OK) {
    long os_errno = 0;
    curl_easy_getinfo(easy, CURLINFO_OS_ERRNO, &os_errno);
    r.error_kind = classify(rc, os_errno);
    r.error_message = curl_easy_strerror(rc);
    if (t->errbuf[0]) r.error_message += std::string(": ") + t->errbuf;
  } else if (r.status >= 400) {
    r.error_kind = "http_" + std::to_string(r.status);
    r.error_message = error_message_of(t->raw);
  } else if (t->mode == BodyMode::json) {
    // A whole JSON response (the server did not stream): its content arrived with its end.
    Chunk c;
    std::string why;
    if (!parse_chunk(t->raw.data(), t->raw.size(), o_.endpoint, c, why)) {
      r.error_kind = "malformed_response";
      r.error_message = why;
    } else if (c.error) {
      r.error_kind = "stream_error";
      r.error_message = *c.error;
    } else {
      if (c.content) {
        r.chunk_ms.push_back(std::max(wake_ms_, r.sent_ms));  // as above
        r.chunk_tokens.push_back(0);
      }
      r.prompt_tokens = c.prompt_tokens;
      r.completion_tokens = c.completion_tokens;
      r.cached_tokens = c.cached_tokens;
      r.latprof_timings = std::move(c.latprof_timings);
      r.timings = std::move(c.timings);
      r.metrics = std::move(c.metrics);
      r.saw_done = true;
    }
  } else if (t->mode == BodyMode::undecided) {
    r.error_kind = "empty_response";
    r.error_message = "HTTP " + std::to_string(r.status) + " with no body";
  } else if (!r.saw_done) {
    r.error_kind = "truncated_stream";
    r.error_message = "the stream ended without data: [DONE]";
  }
  if (r.error_kind.empty() && r.chunk_ms.empty()) {
    r.error_kind = "no_content";
    r.error_message = "the response carried no generated text";
  }
  // A server's bytes go into the JSON report: valid UTF-8 only (invalid bytes become U+FFFD).
  r.error_message = utf8_sanitize(r.error_message);
  if (closed_) freed_ms_.push(r.done_ms);
  done_.push_back(std::move(r));
  curl_easy_reset(easy);
  pool_.push_back(easy);
}

CURL* Client::Loop::take_easy() {
  if (pool_.empty()) {
    CURL* e = curl_easy_init();
    if (!e) throw std::runtime_error("curl_easy_init failed");
    return e;
  }
  CURL* e = pool_.back();
  pool_.pop_back();
  curl_easy_reset(e);
  return e;
}

void Client::Loop::start_scrape(const std::string& url) {
  auto t = std::make_unique<Transfer>();
  t->loop = this;
  t->mode = BodyMode::scrape;
  CURL* e = take_easy();
  t->easy = e;
  curl_easy_setopt(e, CURLOPT_URL, url.c_str());
  curl_easy_setopt(e, CURLOPT_PROXY, "");
  curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
  if (!o_.api_key.empty()) curl_easy_setopt(e, CURLOPT_HTTPHEADER, headers_);
  curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, &Client::Loop::write_cb);
  curl_easy_setopt(e, CURLOPT_WRITEDATA, t.get());
  curl_easy_setopt(e, CURLOPT_ERRORBUFFER, t->errbuf);
  curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, 5000L);
  scrape_ = e;
  live_.emplace(e, std::move(t));
  curl_multi_add_handle(multi_, e);
}

void Client::Loop::finish_scrape(CURL* easy, Transfer& t, CURLcode rc) {
  scrape_ = nullptr;
  long code = 0;
  curl_easy_getinfo(easy, CURLINFO_RESPONSE_CODE, &code);
  if (rc != CURLE_OK)
    metrics_error_ =
        std::string(curl_easy_strerror(rc)) + (t.errbuf[0] ? std::string(": ") + t.errbuf : "");
  else if (code >= 400)
    metrics_error_ = "HTTP " + std::to_string(code);
  if (metrics_error_.empty()) {
    MetricsSample m = parse_prometheus(t.raw);
    m.t_ms = ms() - run_base_;
    if (!m.running && !m.waiting && !m.kv_cache_usage)
      metrics_error_ = "no gauge latprof load knows (running, waiting, KV cache use)";
    else
      samples_.push_back(m);
  }
  curl_easy_reset(easy);
  pool_.push_back(easy);
}

void Client::Loop::drain() {
  int q = 0;
  while (CURLMsg* m = curl_multi_info_read(multi_, &q))
    if (m->msg == CURLMSG_DONE) finish(m->easy_handle, m->data.result);
}

void Client::Loop::arm_timer(double at_ms) {
  // Re-arming costs a system call per wake: only when the deadline moves.
  if (at_ms == armed_ms_ || (std::isinf(at_ms) && std::isinf(armed_ms_))) return;
  armed_ms_ = at_ms;
  itimerspec its{};
  if (std::isfinite(at_ms)) {
    const auto at = t0_ + std::chrono::duration_cast<Clock::duration>(
                              std::chrono::duration<double, std::milli>(std::max(at_ms, 0.0)));
    const int64_t ns =
        std::chrono::duration_cast<std::chrono::nanoseconds>(at.time_since_epoch()).count();
    its.it_value.tv_sec = time_t(ns / 1000000000);
    its.it_value.tv_nsec = long(ns % 1000000000);
    if (its.it_value.tv_sec == 0 && its.it_value.tv_nsec == 0) its.it_value.tv_nsec = 1;
  }
  timerfd_settime(tfd_, TFD_TIMER_ABSTIME, &its, nullptr);
}

RunResult Client::Loop::run(const LoadPlan& plan) {
  const bool open = !plan.arrivals_ms.empty();
  if (!open && plan.concurrency <= 0)
    throw std::logic_error("run_load: a plan needs arrivals or a concurrency");
  raise_fd_limit();
  const double cpu0 = thread_cpu_ms();
  const double base = ms();  // the plan's times are from here
  closed_ = !open;
  freed_ms_ = {};
  if (closed_)
    for (int64_t k = 0; k < plan.concurrency; ++k)
      freed_ms_.push(base + plan.ramp_up_ms * double(k) / double(plan.concurrency));
  wake_ms_ = base;
  max_in_flight_ = 0;
  done_.clear();
  run_base_ = base;
  samples_.clear();
  metrics_error_.clear();
  double next_scrape = base;  // the first scrape at the start
  size_t next = 0;            // open loop: the next arrival
  int64_t issued = 0;
  std::vector<epoll_event> evs(1024);
  int running = 0;
  bool stopped = false;
  for (;;) {
    const double now = ms();
    stopped = stopped || (plan.stop && plan.stop->load());
    // ---- issue what is due ----
    if (stopped) {
      // nothing new
    } else if (open) {
      while (next < plan.arrivals_ms.size() && issued < plan.max_requests &&
             base + plan.arrivals_ms[next] <= now && plan.arrivals_ms[next] < plan.duration_ms &&
             (plan.max_in_flight == 0 || in_flight_ < plan.max_in_flight)) {
        start(plan, issued++, base + plan.arrivals_ms[next]);
        ++next;
      }
    } else {
      while (in_flight_ < plan.concurrency && issued < plan.max_requests &&
             now - base < plan.duration_ms && !freed_ms_.empty() && freed_ms_.top() <= now) {
        const double freed = freed_ms_.top();
        freed_ms_.pop();
        start(plan, issued++, freed);
      }
    }
    // ---- curl's own timeouts (and the kick of newly added transfers) ----
    if (curl_deadline_ms_ && *curl_deadline_ms_ <= ms()) {
      curl_deadline_ms_.reset();
      wake_ms_ = ms();
      curl_multi_socket_action(multi_, CURL_SOCKET_TIMEOUT, 0, &running);
      drain();
      continue;
    }
    const bool more =
        !stopped && (open ? next < plan.arrivals_ms.size() && issued < plan.max_requests &&
                                plan.arrivals_ms[next] < plan.duration_ms
                          : issued < plan.max_requests && ms() - base < plan.duration_ms);
    if (in_flight_ == 0 && !more) break;
    if (!plan.metrics_url.empty() && metrics_error_.empty() && !scrape_ && ms() >= next_scrape) {
      start_scrape(plan.metrics_url);
      next_scrape += plan.metrics_interval_ms;
    }
    // ---- wait for a socket, curl's deadline or the next arrival ----
    double wake_at = curl_deadline_ms_.value_or(std::numeric_limits<double>::infinity());
    if (!plan.metrics_url.empty() && metrics_error_.empty() && !scrape_)
      wake_at = std::min(wake_at, next_scrape);
    if (open && more && (plan.max_in_flight == 0 || in_flight_ < plan.max_in_flight))
      wake_at = std::min(wake_at, base + plan.arrivals_ms[next]);
    if (!open && more && !freed_ms_.empty()) wake_at = std::min(wake_at, freed_ms_.top());
    arm_timer(wake_at);
    const int n = epoll_wait(epfd_, evs.data(), int(evs.size()), 1000);
    wake_ms_ = ms();
    if (n < 0 && errno != EINTR)
      throw std::runtime_error(std::string("epoll_wait: ") + std::strerror(errno));
    for (int i = 0; i < n; ++i) {
      const int fd = evs[size_t(i)].data.fd;
      if (fd == tfd_) {
        uint64_t expirations = 0;
        [[maybe_unused]] const ssize_t rd = read(tfd_, &expirations, sizeof expirations);
        continue;
      }
      const uint32_t e = evs[size_t(i)].events;
      int flags = 0;
      if (e & EPOLLIN) flags |= CURL_CSELECT_IN;
      if (e & EPOLLOUT) flags |= CURL_CSELECT_OUT;
      if (e & (EPOLLERR | EPOLLHUP)) flags |= CURL_CSELECT_ERR;
      curl_multi_socket_action(multi_, fd, flags, &running);
    }
    drain();
  }
  if (scrape_) {  // the run is over: a scrape still in flight is dropped
    curl_multi_remove_handle(multi_, scrape_);
    live_.erase(scrape_);
    curl_easy_reset(scrape_);
    pool_.push_back(scrape_);
    scrape_ = nullptr;
  }
  if (!plan.metrics_url.empty() && metrics_error_.empty()) {  // one last scrape: the run's end
    std::string err;
    const auto body = http_get(plan.metrics_url, o_.api_key, 5, err);
    if (body) {
      MetricsSample m = parse_prometheus(*body);
      m.t_ms = ms() - base;
      samples_.push_back(m);
    }
  }
  RunResult out;
  out.stopped = stopped;
  out.metrics = std::move(samples_);
  out.metrics_error = metrics_error_;
  out.wall_ms = ms() - base;
  out.cpu_ms = thread_cpu_ms() - cpu0;
  out.max_in_flight = max_in_flight_;
  out.requests = std::move(done_);
  done_.clear();
  for (RequestResult& r : out.requests) {  // stamps from the start of this run
    r.intended_ms -= base;
    r.handed_ms -= base;
    r.sent_ms -= base;
    r.done_ms -= base;
    if (r.request_sent_ms) *r.request_sent_ms -= base;
    if (r.first_byte_ms) *r.first_byte_ms -= base;
    for (double& c : r.chunk_ms) c -= base;
  }
  std::sort(out.requests.begin(), out.requests.end(),
            [](const RequestResult& a, const RequestResult& b) { return a.index < b.index; });
  return out;
}

namespace {
size_t append_cb(char* p, size_t size, size_t n, void* userp) {
  auto* s = static_cast<std::string*>(userp);
  if (s->size() + size * n > kMaxBody) return 0;
  s->append(p, size * n);
  return size * n;
}

}  // namespace

Client::Client(const ClientOptions& o) : loop_(std::make_unique<Loop>(o)) {}
Client::~Client() = default;
RunResult Client::run(const LoadPlan& plan) {
  return loop_->run(plan);
}

RunResult run_load(const ClientOptions& o, const LoadPlan& plan) {
  Client c(o);
  return c.run(plan);
}

MetricsSample parse_prometheus(const std::string& text) {
  // Each gauge by the names servers give it, first found wins.
  static const char* const kRunning[] = {"vllm:num_requests_running",
                                         "latprof:num_requests_running", "sglang:num_running_reqs",
                                         "llamacpp:requests_processing"};
  static const char* const kWaiting[] = {"vllm:num_requests_waiting",
                                         "latprof:num_requests_waiting", "sglang:num_queue_reqs",
                                         "llamacpp:requests_deferred"};
  static const char* const kKv[] = {"vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc",
                                    "latprof:kv_cache_usage_perc", "sglang:token_usage",
                                    "llamacpp:kv_cache_usage_ratio"};
  std::unordered_map<std::string, double> sums;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    std::string_view line(text.data() + pos, end - pos);
    pos = end + 1;
    if (line.empty() || line[0] == '#') continue;
    const size_t name_end = line.find_first_of("{ \t");
    if (name_end == std::string_view::npos) continue;
    const std::string name(line.substr(0, name_end));
    size_t v = name_end;
    if (line[v] == '{') {
      const size_t close = line.find('}', v);
      if (close == std::string_view::npos) continue;
      v = close + 1;
    }
    while (v < line.size() && (line[v] == ' ' || line[v] == '\t')) ++v;
    const std::string value(line.substr(v, line.find_first_of(" \t\r", v) - v));
    char* stop = nullptr;
    const double x = std::strtod(value.c_str(), &stop);
    if (value.empty() || *stop || !std::isfinite(x)) continue;
    sums[name] += x;
  }
  auto pick = [&](const auto& names) -> std::optional<double> {
    for (const char* n : names)
      if (auto it = sums.find(n); it != sums.end()) return it->second;
    return std::nullopt;
  };
  MetricsSample m;
  static const char* const kHistograms[] = {
      "time_to_first_token_seconds",   "inter_token_latency_seconds",
      "e2e_request_latency_seconds",   "request_queue_time_seconds",
      "request_prefill_time_seconds",  "request_decode_time_seconds",
      "request_inference_time_seconds"};
  for (const char* h : kHistograms)
    for (const char* prefix : {"vllm:", "latprof:", "sglang:"}) {
      const std::string base = std::string(prefix) + h;
      const auto s = sums.find(base + "_sum"), c = sums.find(base + "_count");
      if (s != sums.end() && c != sums.end()) {
        m.histograms[h] = {s->second, c->second};
        break;
      }
    }
  for (const char* c :
       {"engine_steps_total", "engine_offcpu_seconds_total", "engine_runq_seconds_total"})
    if (const auto it = sums.find(std::string("latprof:") + c); it != sums.end())
      m.engine[c] = it->second;
  m.running = pick(kRunning);
  m.waiting = pick(kWaiting);
  m.kv_cache_usage = pick(kKv);
  return m;
}

namespace {
std::optional<std::string> http_blocking(const std::string& url, const std::string& api_key,
                                         const std::string* post, double timeout_s,
                                         std::string& error, int* status) {
  curl_once();
  CURL* e = curl_easy_init();
  if (!e) throw std::runtime_error("curl_easy_init failed");
  std::string body;
  char errbuf[CURL_ERROR_SIZE] = {};
  curl_slist* h = nullptr;
  if (!api_key.empty()) h = curl_slist_append(h, ("Authorization: Bearer " + api_key).c_str());
  if (post) {
    h = curl_slist_append(h, "Content-Type: application/json");
    curl_easy_setopt(e, CURLOPT_POSTFIELDS, post->data());
    curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, curl_off_t(post->size()));
  }
  curl_easy_setopt(e, CURLOPT_URL, url.c_str());
  curl_easy_setopt(e, CURLOPT_PROXY, "");
  curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(e, CURLOPT_HTTPHEADER, h);
  curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, &append_cb);
  curl_easy_setopt(e, CURLOPT_WRITEDATA, &body);
  curl_easy_setopt(e, CURLOPT_ERRORBUFFER, errbuf);
  curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, long(std::llround(timeout_s * 1e3)));
  const CURLcode rc = curl_easy_perform(e);
  long code = 0;
  curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &code);
  curl_easy_cleanup(e);
  curl_slist_free_all(h);
  if (status) *status = int(code);
  if (rc != CURLE_OK) {
    error = std::string(curl_easy_strerror(rc)) + (errbuf[0] ? std::string(": ") + errbuf : "");
    return std::nullopt;
  }
  if (code >= 400) {
    error = "HTTP " + std::to_string(code) + ": " + error_message_of(body);
    return std::nullopt;
  }
  return body;
}
}  // namespace

std::optional<std::string> http_get(const std::string& url, const std::string& api_key,
                                    double timeout_s, std::string& error, int* status) {
  return http_blocking(url, api_key, nullptr, timeout_s, error, status);
}

std::optional<std::string> http_post_json(const std::string& url, const std::string& api_key,
                                          const std::string& body, double timeout_s,
                                          std::string& error, int* status) {
  return http_blocking(url, api_key, &body, timeout_s, error, status);
}

std::string normalize_base_url(const std::string& url, const char* flag) {
  curl_once();
  const std::string hint = "; give http://HOST:PORT (e.g. http://127.0.0.1:8000)";
  if (!(url.starts_with("http://") || url.starts_with("https://")))
    usage_error(std::string(flag) + " '" + url + "' must start with http:// or https://" + hint);
  CURLU* u = curl_url();
  const CURLUcode rc = curl_url_set(u, CURLUPART_URL, url.c_str(), 0);
  char* host = nullptr;
  const bool has_host =
      rc == CURLUE_OK && curl_url_get(u, CURLUPART_HOST, &host, 0) == CURLUE_OK && host && *host;
  char* query = nullptr;
  const bool has_query =
      rc == CURLUE_OK && curl_url_get(u, CURLUPART_QUERY, &query, 0) == CURLUE_OK;
  curl_free(host);
  curl_free(query);
  curl_url_cleanup(u);
  if (rc != CURLUE_OK)
    usage_error(std::string(flag) + " '" + url + "' is not a URL (" + curl_url_strerror(rc) + ")" +
                hint);
  if (!has_host) usage_error(std::string(flag) + " '" + url + "' names no host" + hint);
  if (has_query) usage_error(std::string(flag) + " '" + url + "' has a query string" + hint);
  std::string s = url;
  while (s.ends_with("/")) s.pop_back();
  if (s.ends_with("/v1")) s.resize(s.size() - 3);  // OpenAI clients' base URL style
  return s;
}

}  // namespace latprof::load
