#include "server/gateway.hpp"

#include <cmath>

#include "core/error.hpp"
#include "core/input_file.hpp"

namespace latprof::server {

std::set<std::string> load_api_keys(const std::vector<std::string>& keys, const std::string& file) {
  std::set<std::string> out(keys.begin(), keys.end());
  if (!file.empty()) {
    const std::string text = read_input_file(file, "--api-keys", size_t(1) << 20);
    size_t n = 0;
    for (size_t pos = 0; pos <= text.size();) {
      size_t end = text.find('\n', pos);
      if (end == std::string::npos) end = text.size();
      std::string line = text.substr(pos, end - pos);
      while (!line.empty() && (line.back() == '\r' || line.back() == ' ' || line.back() == '\t'))
        line.pop_back();
      size_t b = 0;
      while (b < line.size() && (line[b] == ' ' || line[b] == '\t')) ++b;
      line = line.substr(b);
      if (!line.empty() && line[0] != '#') {
        out.insert(line);
        ++n;
      }
      pos = end + 1;
    }
    if (n == 0) usage_error("--api-keys " + file + " holds no key (one key per line)");
  }
  for (const std::string& k : out)
    if (k.empty()) usage_error("an API key is empty");
  return out;
}

bool RateLimiter::allow(const std::string& key, double now_s, int64_t& retry_after_s) {
  std::lock_guard<std::mutex> lk(mu_);
  auto [it, fresh] = buckets_.try_emplace(key, Bucket{burst_, now_s});
  Bucket& b = it->second;
  if (!fresh) b.tokens = std::min(burst_, b.tokens + (now_s - b.last_s) * rate_);
  b.last_s = now_s;
  if (b.tokens >= 1.0) {
    b.tokens -= 1.0;
    return true;
  }
  retry_after_s = std::max<int64_t>(1, int64_t(std::ceil((1.0 - b.tokens) / rate_)));
  return false;
}

namespace {
thread_local bool tl_refusing = false;
thread_local double tl_accepted_ms = 0;
thread_local bool tl_first_request = false;
}  // namespace

bool ConnectionPool::refusing() {
  return tl_refusing;
}
double ConnectionPool::accepted_ms() {
  return tl_accepted_ms;
}
bool ConnectionPool::take_first_request() {
  const bool f = tl_first_request;
  tl_first_request = false;
  return f;
}

ConnectionPool::ConnectionPool(size_t threads, size_t backlog, std::function<double()> now_ms,
                               std::function<void(double)> waited)
    : now_ms_(std::move(now_ms)), waited_(std::move(waited)), backlog_(backlog) {
  for (size_t i = 0; i < threads; ++i) threads_.emplace_back([this] { work(false); });
  threads_.emplace_back([this] { work(true); });
}

ConnectionPool::~ConnectionPool() {
  shutdown();
}

size_t ConnectionPool::queued() const {
  std::lock_guard<std::mutex> lk(mu_);
  return queue_.size();
}

void ConnectionPool::enqueue(std::function<void()> fn) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    // Idle workers take the queue at once; beyond the backlog a connection is refused.
    if (queue_.size() < backlog_ + idle_) {
      queue_.push_back({std::move(fn), now_ms_()});
      cv_.notify_one();
      return;
    }
    ++refused_;
    refuse_queue_.push_back({std::move(fn), now_ms_()});
  }
  refuse_cv_.notify_one();
}

void ConnectionPool::shutdown() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (shutdown_ && threads_.empty()) return;
    shutdown_ = true;
  }
  cv_.notify_all();
  refuse_cv_.notify_all();
  for (std::thread& t : threads_)
    if (t.joinable()) t.join();
  threads_.clear();
}

void ConnectionPool::work(bool refuser) {
  tl_refusing = refuser;
  std::deque<Task>& q = refuser ? refuse_queue_ : queue_;
  std::condition_variable& cv = refuser ? refuse_cv_ : cv_;
  for (;;) {
    Task t;
    {
      std::unique_lock<std::mutex> lk(mu_);
      if (!refuser) ++idle_;
      cv.wait(lk, [&] { return shutdown_ || !q.empty(); });
      if (!refuser) --idle_;
      if (q.empty()) return;  // shut down with nothing left
      t = std::move(q.front());
      q.pop_front();
    }
    tl_accepted_ms = t.accepted_ms;
    tl_first_request = true;
    if (waited_ && !refuser) waited_(now_ms_() - t.accepted_ms);
    t.fn();
  }
}

}  // namespace latprof::server
