#pragma once
// Test servers for the load client, on 127.0.0.1 only, each on its own thread with epoll:
//   StubServer  an OpenAI-compatible SSE server that emits tokens at exact, known times (first
//               token ttft_ms after the request's last byte, then one every itl_ms), and records
//               when it really wrote each one (its own lateness), so a test can hold the
//               client's figures against what the server actually did;
//   DelayProxy  a TCP proxy that holds every chunk delay_ms in each direction (netem is not
//               available here).
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <queue>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace load_test {

inline double now_ms() {
  return std::chrono::duration<double, std::milli>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

inline int listen_loopback(int& port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  const int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;  // a free port
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || listen(fd, 4096) != 0)
    throw std::runtime_error(std::string("listen: ") + std::strerror(errno));
  socklen_t len = sizeof a;
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  port = ntohs(a.sin_port);
  return fd;
}

// A port on 127.0.0.1 that nobody listens on (bound, then closed).
inline int dead_port() {
  int port = 0;
  const int fd = listen_loopback(port);
  close(fd);
  return port;
}

// Arms a timerfd at an absolute steady_clock time in ms (0 or less: disarmed).
inline void arm_at(int tfd, double at_ms) {
  itimerspec its{};
  if (at_ms > 0) {
    const auto ns = int64_t(at_ms * 1e6);
    its.it_value.tv_sec = ns / 1000000000;
    its.it_value.tv_nsec = ns % 1000000000;
    if (its.it_value.tv_sec == 0 && its.it_value.tv_nsec == 0) its.it_value.tv_nsec = 1;
  }
  timerfd_settime(tfd, TFD_TIMER_ABSTIME, &its, nullptr);
}

// Writes all of `data` to a non-blocking socket, waiting for room when it is full.
inline bool send_all(int fd, const char* p, size_t n) {
  while (n > 0) {
    const ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
    if (w > 0) {
      p += w;
      n -= size_t(w);
    } else if (w < 0 && (errno == EAGAIN || errno == EINTR)) {
      pollfd pf{fd, POLLOUT, 0};
      poll(&pf, 1, 100);
    } else {
      return false;
    }
  }
  return true;
}

enum class Reply { ok, http_500, http_429, malformed, hang, close_mid_stream };

struct StubOptions {
  double ttft_ms = 100, itl_ms = 20;
  bool latprof_timings = true;  // report latprof_timings in the last chunk
  // An OpenAI-like server: 400 on ignore_eos; without it, EOS comes after half of max_tokens.
  bool refuses_ignore_eos = false;
  bool metrics = true;              // serve GET /metrics (latprof: gauges)
  int64_t extra_prompt_tokens = 0;  // usage.prompt_tokens = tokens asked + this
  // A prefix cache as OpenAI reports it: usage.prompt_tokens_details.cached_tokens, the longest
  // prefix a token-id prompt shares with any earlier one.
  bool prefix_cache = false;
  std::function<Reply(int64_t seq)> reply = [](int64_t) { return Reply::ok; };
};

class StubServer {
 public:
  explicit StubServer(StubOptions o) : o_(std::move(o)) {
    lfd_ = listen_loopback(port_);
    ep_ = epoll_create1(EPOLL_CLOEXEC);
    tfd_ = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    stop_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    for (int fd : {lfd_, tfd_, stop_}) watch(fd, EPOLLIN);
    th_ = std::thread([this] { loop(); });
  }
  ~StubServer() {
    const uint64_t one = 1;
    [[maybe_unused]] ssize_t w = write(stop_, &one, sizeof one);
    th_.join();
    for (auto& [fd, c] : conns_) close(fd);
    for (int fd : {lfd_, tfd_, stop_, ep_}) close(fd);
  }
  int port() const { return port_; }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }

  // What the server did, since the last reset: per request, first token write - request
  // received (its TTFT); every gap between successive token writes; every write's lateness.
  struct Stats {
    std::vector<double> ttft_ms, gap_ms, lateness_ms;
    int64_t requests = 0, scrapes = 0;
    std::vector<std::vector<int64_t>> prompts;  // token-id prompts, in arrival order
    std::vector<std::string> chat_texts;        // chat messages' content, in arrival order
  };
  Stats stats() {
    std::lock_guard<std::mutex> l(mu_);
    return stats_;
  }
  void reset() {
    std::lock_guard<std::mutex> l(mu_);
    stats_ = {};
  }

 private:
  struct Conn {
    uint64_t id = 0;
    std::string in;
    bool active = false;  // a request is being answered
    bool chat = false;
    int64_t tokens = 0, emitted = 0, prompt_tokens = 0, cached_tokens = 0;
    double recv_ms = 0, first_ms = 0, last_ms = 0;
    Reply reply = Reply::ok;
  };
  struct Due {
    double at_ms;
    int fd;
    uint64_t id;
    bool operator>(const Due& o) const { return at_ms > o.at_ms; }
  };

  void watch(int fd, uint32_t ev) {
    epoll_event e{};
    e.events = ev;
    e.data.fd = fd;
    epoll_ctl(ep_, EPOLL_CTL_ADD, fd, &e);
  }
  void drop(int fd) {
    epoll_ctl(ep_, EPOLL_CTL_DEL, fd, nullptr);
    close(fd);
    conns_.erase(fd);
  }
  static std::string chunked(const std::string& s) {
    char head[32];
    std::snprintf(head, sizeof head, "%zx\r\n", s.size());
    return head + s + "\r\n";
  }
  void loop() {
    std::vector<epoll_event> evs(256);
    double armed = -1;
    for (;;) {
      const double at = due_.empty() ? 0 : due_.top().at_ms;
      if (at != armed) arm_at(tfd_, armed = at);
      const int n = epoll_wait(ep_, evs.data(), int(evs.size()), 1000);
      for (int i = 0; i < n; ++i) {
        const int fd = evs[size_t(i)].data.fd;
        if (fd == stop_) return;
        if (fd == tfd_) {
          uint64_t x;
          [[maybe_unused]] ssize_t r = read(tfd_, &x, sizeof x);
        } else if (fd == lfd_) {
          for (;;) {
            const int c = accept4(lfd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
            if (c < 0) break;
            const int one = 1;
            setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
            // the kernel's receive time of each read: a request's arrival even while busy
            setsockopt(c, SOL_SOCKET, SO_TIMESTAMPNS, &one, sizeof one);
            conns_[c].id = ++next_id_;
            watch(c, EPOLLIN | EPOLLRDHUP);
          }
        } else {
          on_readable(fd);
        }
      }
      // emit what is due
      while (!due_.empty() && due_.top().at_ms <= now_ms()) {
        const Due d = due_.top();
        due_.pop();
        auto it = conns_.find(d.fd);
        if (it != conns_.end() && it->second.id == d.id && it->second.active)
          emit(d.fd, it->second, d.at_ms);
      }
    }
  }
  void on_readable(int fd) {
    auto it = conns_.find(fd);
    if (it == conns_.end()) return;
    Conn& c = it->second;
    char buf[65536];
    double arrived = now_ms();
    for (;;) {
      iovec iov{buf, sizeof buf};
      alignas(cmsghdr) char ctl[256];
      msghdr m{};
      m.msg_iov = &iov;
      m.msg_iovlen = 1;
      m.msg_control = ctl;
      m.msg_controllen = sizeof ctl;
      const ssize_t r = recvmsg(fd, &m, 0);
      if (r > 0) {
        c.in.append(buf, size_t(r));
        for (cmsghdr* h = CMSG_FIRSTHDR(&m); h; h = CMSG_NXTHDR(&m, h))
          if (h->cmsg_level == SOL_SOCKET && h->cmsg_type == SO_TIMESTAMPNS) {
            timespec ts;
            std::memcpy(&ts, CMSG_DATA(h), sizeof ts);
            timespec rt, mono;
            clock_gettime(CLOCK_REALTIME, &rt);
            clock_gettime(CLOCK_MONOTONIC, &mono);
            const double realtime_ms = double(ts.tv_sec) * 1e3 + double(ts.tv_nsec) / 1e6;
            const double offset = (double(mono.tv_sec) * 1e3 + double(mono.tv_nsec) / 1e6) -
                                  (double(rt.tv_sec) * 1e3 + double(rt.tv_nsec) / 1e6);
            arrived = realtime_ms + offset;
          }
        continue;
      }
      if (r == 0 || (errno != EAGAIN && errno != EINTR)) {
        drop(fd);
        return;
      }
      break;
    }
    // one complete request (HTTP/1.1, no pipelining from curl)
    const size_t hend = c.in.find("\r\n\r\n");
    if (hend == std::string::npos || c.active) return;
    size_t len = 0;
    {
      std::string h = c.in.substr(0, hend);
      std::transform(h.begin(), h.end(), h.begin(), ::tolower);
      const size_t p = h.find("content-length:");
      if (p != std::string::npos) len = std::stoul(h.substr(p + 15));
    }
    if (c.in.size() < hend + 4 + len) return;
    const std::string head = c.in.substr(0, hend);
    const std::string body = c.in.substr(hend + 4, len);
    c.in.erase(0, hend + 4 + len);
    const double recv = std::min(arrived, now_ms());  // when its last bytes reached the socket
    if (head.starts_with("GET /v1/models")) {
      const std::string b =
          R"({"object":"list","data":[{"id":"stub-model","object":"model","created":0,"owned_by":"test"}]})";
      const std::string r =
          "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: " +
          std::to_string(b.size()) + "\r\n\r\n" + b;
      send_all(fd, r.data(), r.size());
      return;
    }
    if (o_.metrics && head.starts_with("GET /metrics")) {
      int64_t running = 0;
      for (const auto& [f, cc] : conns_) running += cc.active;
      const std::string b =
          "# TYPE latprof:num_requests_running "
          "gauge\nlatprof:num_requests_running{model=\"stub\"} " +
          std::to_string(running) +
          "\nlatprof:num_requests_waiting 0\nlatprof:kv_cache_usage_perc 0.25\n" +
          "latprof:request_prefill_time_seconds_sum " + std::to_string(prefill_sum_s_) +
          "\nlatprof:request_prefill_time_seconds_count " + std::to_string(prefill_count_) + "\n";
      const std::string r = "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: " +
                            std::to_string(b.size()) + "\r\n\r\n" + b;
      send_all(fd, r.data(), r.size());
      {
        std::lock_guard<std::mutex> l(mu_);
        ++stats_.scrapes;
      }
      return;
    }
    if (!head.starts_with("POST ")) {
      const std::string r = "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n";
      send_all(fd, r.data(), r.size());
      return;
    }
    if (head.starts_with("POST /tokenize")) {  // vLLM's form; a word is two tokens here
      const nlohmann::json t = nlohmann::json::parse(body, nullptr, false);
      const std::string text =
          t.is_object() && t.contains("prompt") ? t["prompt"].get<std::string>() : "";
      const int64_t words = text.empty() ? 0 : 1 + std::count(text.begin(), text.end(), ' ');
      const std::string b = "{\"count\":" + std::to_string(2 * words) + ",\"max_model_len\":4096}";
      const std::string r =
          "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: " +
          std::to_string(b.size()) + "\r\n\r\n" + b;
      send_all(fd, r.data(), r.size());
      return;
    }
    int64_t seq;
    {
      std::lock_guard<std::mutex> l(mu_);
      seq = stats_.requests++;
    }
    c.reply = o_.reply(seq);
    const nlohmann::json j = nlohmann::json::parse(body, nullptr, false);
    c.chat = head.find("/chat/") != std::string::npos;
    c.tokens = j.is_object() && j.contains("max_tokens") ? j["max_tokens"].get<int64_t>() : 16;
    c.prompt_tokens = c.cached_tokens = 0;
    if (j.is_object() && j.contains("prompt") && j["prompt"].is_array()) {
      c.prompt_tokens = int64_t(j["prompt"].size());
      auto prompt = j["prompt"].get<std::vector<int64_t>>();
      std::lock_guard<std::mutex> l(mu_);
      for (const auto& seen : stats_.prompts) {
        const auto n = std::min(seen.size(), prompt.size());
        c.cached_tokens = std::max(
            c.cached_tokens,
            int64_t(std::mismatch(seen.begin(), seen.begin() + std::ptrdiff_t(n), prompt.begin())
                        .first -
                    seen.begin()));
      }
      stats_.prompts.push_back(std::move(prompt));
    }
    if (j.is_object() && j.contains("messages")) {
      const std::string t = j["messages"][0]["content"].get<std::string>();
      c.prompt_tokens = 1 + std::count(t.begin(), t.end(), ' ');
      std::lock_guard<std::mutex> l(mu_);
      stats_.chat_texts.push_back(t);
    }
    c.prompt_tokens += o_.extra_prompt_tokens;
    if (o_.refuses_ignore_eos && j.is_object()) {
      if (j.contains("ignore_eos")) {
        const std::string b =
            R"({"error":{"message":"Unrecognized request argument supplied: ignore_eos","type":"invalid_request_error"}})";
        const std::string r =
            "HTTP/1.1 400 Bad Request\r\nContent-Type: application/json\r\nContent-Length: " +
            std::to_string(b.size()) + "\r\n\r\n" + b;
        send_all(fd, r.data(), r.size());
        return;
      }
      c.tokens = std::max<int64_t>(1, c.tokens / 2);
    }
    c.recv_ms = recv;
    c.emitted = 0;
    if (c.reply == Reply::http_500 || c.reply == Reply::http_429) {
      const bool busy = c.reply == Reply::http_429;
      const std::string b = std::string(R"({"error":{"message":")") +
                            (busy ? "too many requests" : "stub failure") +
                            R"(","type":"server_error","code":)" + (busy ? "429" : "500") + "}}";
      const std::string r =
          std::string("HTTP/1.1 ") +
          (busy ? "429 Too Many Requests" : "500 Internal Server Error") +
          "\r\nContent-Type: application/json\r\nContent-Length: " + std::to_string(b.size()) +
          "\r\n\r\n" + b;
      send_all(fd, r.data(), r.size());
      return;
    }
    if (c.reply == Reply::hang) return;  // never answers: the client's timeout ends it
    const std::string r =
        "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n";
    send_all(fd, r.data(), r.size());
    c.active = true;
    due_.push({recv + o_.ttft_ms, fd, c.id});
  }
  void emit(int fd, Conn& c, double intended) {
    if (c.reply == Reply::malformed) {
      const std::string s = chunked("data: {this is not json \xff\xfe\n\n");  // nor UTF-8
      send_all(fd, s.data(), s.size());
      c.active = false;
      return;
    }
    const std::string ev =
        c.chat
            ? R"({"object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":" tok"}}]})"
            : R"({"object":"text_completion","choices":[{"index":0,"text":" tok","finish_reason":null}]})";
    const std::string s = chunked("data: " + ev + "\n\n");
    const bool ok = send_all(fd, s.data(), s.size());
    const double t = now_ms();
    {
      std::lock_guard<std::mutex> l(mu_);
      stats_.lateness_ms.push_back(t - intended);
      if (c.emitted == 0)
        stats_.ttft_ms.push_back(t - c.recv_ms);
      else
        stats_.gap_ms.push_back(t - c.last_ms);
    }
    if (c.emitted == 0) {
      c.first_ms = t;
      prefill_sum_s_ += (t - c.recv_ms) / 1e3;  // the /metrics histogram's sum and count
      ++prefill_count_;
    }
    c.last_ms = t;
    ++c.emitted;
    if (!ok) {
      c.active = false;
      return;
    }
    if (c.reply == Reply::close_mid_stream) {
      drop(fd);
      return;
    }
    if (c.emitted < c.tokens) {
      due_.push({c.recv_ms + o_.ttft_ms + double(c.emitted) * o_.itl_ms, fd, c.id});
      return;
    }
    // the usage chunk (with the server's own timings), [DONE], the end of the chunked body
    nlohmann::json last = {{"object", "text_completion"},
                           {"choices", nlohmann::json::array()},
                           {"usage",
                            {{"prompt_tokens", c.prompt_tokens},
                             {"completion_tokens", c.tokens},
                             {"total_tokens", c.prompt_tokens + c.tokens}}}};
    if (o_.prefix_cache)
      last["usage"]["prompt_tokens_details"] = {{"cached_tokens", c.cached_tokens}};
    if (o_.latprof_timings) {
      const double end = now_ms();
      last["latprof_timings"] = {{"gateway_ms", 0.0},
                                 {"queue_ms", 0.0},
                                 {"tokenize_ms", 0.0},
                                 {"prefill_ms", c.first_ms - c.recv_ms},
                                 {"decode_ms", c.last_ms - c.first_ms},
                                 {"detokenize_ms", 0.0},
                                 {"serialize_ms", end - c.last_ms},
                                 {"total_ms", end - c.recv_ms}};
    }
    const std::string tail =
        chunked("data: " + last.dump() + "\n\n") + chunked("data: [DONE]\n\n") + "0\r\n\r\n";
    send_all(fd, tail.data(), tail.size());
    c.active = false;
  }

  StubOptions o_;
  int port_ = 0, lfd_ = -1, ep_ = -1, tfd_ = -1, stop_ = -1;
  uint64_t next_id_ = 0;
  double prefill_sum_s_ = 0;
  int64_t prefill_count_ = 0;
  std::map<int, Conn> conns_;
  std::priority_queue<Due, std::vector<Due>, std::greater<>> due_;
  std::mutex mu_;
  Stats stats_;
  std::thread th_;
};

// Forwards 127.0.0.1:port() to 127.0.0.1:target, holding every chunk read from either side for
// delay_ms before writing it on (a connection's end likewise).
class DelayProxy {
 public:
  DelayProxy(int target_port, double delay_ms) : target_(target_port), delay_(delay_ms) {
    lfd_ = listen_loopback(port_);
    ep_ = epoll_create1(EPOLL_CLOEXEC);
    tfd_ = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    stop_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    for (int fd : {lfd_, tfd_, stop_}) watch(fd);
    th_ = std::thread([this] { loop(); });
  }
  ~DelayProxy() {
    const uint64_t one = 1;
    [[maybe_unused]] ssize_t w = write(stop_, &one, sizeof one);
    th_.join();
    for (auto& [fd, peer] : peer_) close(fd);
    for (int fd : {lfd_, tfd_, stop_, ep_}) close(fd);
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }

 private:
  struct Held {
    double at_ms;
    int to;
    std::string data;  // empty: the sender closed; shut the receiver's write side
  };
  void watch(int fd) {
    epoll_event e{};
    e.events = EPOLLIN;
    e.data.fd = fd;
    epoll_ctl(ep_, EPOLL_CTL_ADD, fd, &e);
  }
  void loop() {
    std::vector<epoll_event> evs(256);
    for (;;) {
      arm_at(tfd_, held_.empty() ? 0 : held_.front().at_ms);
      const int n = epoll_wait(ep_, evs.data(), int(evs.size()), 1000);
      for (int i = 0; i < n; ++i) {
        const int fd = evs[size_t(i)].data.fd;
        if (fd == stop_) return;
        if (fd == tfd_) {
          uint64_t x;
          [[maybe_unused]] ssize_t r = read(tfd_, &x, sizeof x);
        } else if (fd == lfd_) {
          for (;;) {
            const int c = accept4(lfd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
            if (c < 0) break;
            const int u = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
            sockaddr_in a{};
            a.sin_family = AF_INET;
            a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
            a.sin_port = htons(uint16_t(target_));
            if (connect(u, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
              close(u);
              close(c);
              continue;
            }
            const int one = 1;
            for (int s : {c, u}) setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
            fcntl_nonblock(u);
            peer_[c] = u;
            peer_[u] = c;
            watch(c);
            watch(u);
          }
        } else if (peer_.count(fd)) {
          char buf[65536];
          const ssize_t r = recv(fd, buf, sizeof buf, 0);
          const int to = peer_[fd];
          if (r > 0) {
            held_.push_back({now_ms() + delay_, to, std::string(buf, size_t(r))});
          } else if (r == 0 || (errno != EAGAIN && errno != EINTR)) {
            epoll_ctl(ep_, EPOLL_CTL_DEL, fd, nullptr);
            held_.push_back({now_ms() + delay_, to, std::string()});
          }
        }
      }
      while (!held_.empty() && held_.front().at_ms <= now_ms()) {
        Held h = std::move(held_.front());
        held_.pop_front();
        if (!peer_.count(h.to)) continue;
        if (h.data.empty()) {  // the other side finished: close this pair
          const int other = peer_[h.to];
          epoll_ctl(ep_, EPOLL_CTL_DEL, h.to, nullptr);
          close(h.to);
          close(other);
          peer_.erase(other);
          peer_.erase(h.to);
        } else {
          send_all(h.to, h.data.data(), h.data.size());
        }
      }
    }
  }
  static void fcntl_nonblock(int fd) { fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK); }

  int target_;
  double delay_;
  int port_ = 0, lfd_ = -1, ep_ = -1, tfd_ = -1, stop_ = -1;
  std::map<int, int> peer_;
  std::deque<Held> held_;
  std::thread th_;
};

}  // namespace load_test
