#pragma once
// Test support for latprof serve: starts the latprof binary (`serve --host 127.0.0.1 --port 0`,
// so the kernel picks a free port) as a child process, reads the URL it prints, and stops it;
// and a raw HTTP/1.1 client over a socket, for streams read piece by piece and connections
// dropped on purpose. Every wait is bounded.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace latprof::test {

inline std::string test_model_slow() {
  return std::string(LATPROF_TEST_DIR) + "/server/data/serve-slow.json";
}

class ServerProcess {
 public:
  // Starts `latprof serve --host 127.0.0.1 --port 0 --threads 1 args...` and waits (up to 60 s)
  // for "listening on http://...".
  explicit ServerProcess(const std::vector<std::string>& args) {
    int out[2];
    if (pipe(out) != 0) throw std::runtime_error("pipe failed");
    std::vector<std::string> argv = {LATPROF_BIN, "serve", "--host",    "127.0.0.1",
                                     "--port",    "0",     "--threads", "1"};
    argv.insert(argv.end(), args.begin(), args.end());
    pid_ = fork();
    if (pid_ < 0) throw std::runtime_error("fork failed");
    if (pid_ == 0) {
      dup2(out[1], 1);
      close(out[0]);
      close(out[1]);
      std::vector<char*> a;
      for (std::string& s : argv) a.push_back(s.data());
      a.push_back(nullptr);
      execv(a[0], a.data());
      _exit(127);
    }
    close(out[1]);
    out_ = out[0];
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    std::string text;
    while (std::chrono::steady_clock::now() < deadline) {
      pollfd p{out_, POLLIN, 0};
      if (poll(&p, 1, 200) <= 0) continue;
      char buf[4096];
      const ssize_t n = read(out_, buf, sizeof buf);
      if (n <= 0) break;  // exited
      text.append(buf, size_t(n));
      // "listening on http://127.0.0.1:PORT" (https with TLS)
      const size_t on = text.find("listening on http");
      const size_t at = on == std::string::npos ? on : text.find("127.0.0.1:", on);
      if (at != std::string::npos && text.find('\n', at) != std::string::npos) {
        port = std::stoi(text.substr(at + 10));
        banner = text;
        return;
      }
    }
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
    pid_ = -1;
    throw std::runtime_error("latprof serve did not start; it printed: " + text);
  }
  ~ServerProcess() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    if (out_ >= 0) close(out_);
  }
  ServerProcess(const ServerProcess&) = delete;
  ServerProcess& operator=(const ServerProcess&) = delete;

  // Sends `sig` and waits up to timeout_s for the exit; returns the exit status, or -1 when it
  // did not exit in time (then it is killed) or died of a signal.
  int stop(int sig, double timeout_s) {
    if (pid_ <= 0) return -1;
    kill(pid_, sig);
    const auto deadline =
        std::chrono::steady_clock::now() + std::chrono::milliseconds(int64_t(timeout_s * 1000));
    while (std::chrono::steady_clock::now() < deadline) {
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
    pid_ = -1;
    return -1;
  }
  bool running() const { return pid_ > 0 && kill(pid_, 0) == 0; }
  pid_t pid() const { return pid_; }

  int port = 0;
  std::string banner;

 private:
  pid_t pid_ = -1;
  int out_ = -1;
};

// One HTTP/1.1 exchange on its own connection (Connection: close), read as it arrives.
struct RawResponse {
  int status = 0;
  std::string headers;  // raw, lower-cased names
  std::string body;     // chunked transfer decoded
  bool complete = false;
  std::string header(const std::string& name) const {
    const std::string key = "\n" + name + ":";
    size_t at = headers.find(key);
    if (at == std::string::npos) return "";
    at += key.size();
    while (at < headers.size() && headers[at] == ' ') ++at;
    return headers.substr(at, headers.find('\r', at) - at);
  }
};

inline int connect_to(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(uint16_t(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// Sends a request and reads the response until the server closes, timeout_s passes, or
// on_body (called with the body decoded so far) returns false, which closes the connection
// at once (a client that goes away).
inline RawResponse http_request(int port, const std::string& method, const std::string& path,
                                const std::string& body,
                                const std::vector<std::string>& headers = {},
                                std::function<bool(const std::string&)> on_body = nullptr,
                                double timeout_s = 60) {
  RawResponse r;
  const int fd = connect_to(port);
  if (fd < 0) return r;
  std::string req = method + " " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n";
  for (const std::string& h : headers) req += h + "\r\n";
  if (method == "POST")
    req +=
        "Content-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) + "\r\n";
  req += "\r\n" + body;
  for (size_t off = 0; off < req.size();) {
    const ssize_t n = send(fd, req.data() + off, req.size() - off, MSG_NOSIGNAL);
    if (n <= 0) break;
    off += size_t(n);
  }
  std::string raw;
  size_t body_at = std::string::npos;
  bool chunked = false;
  auto decode = [&]() {
    const std::string b = raw.substr(body_at);
    if (!chunked) return b;
    std::string out;
    size_t at = 0;
    while (at < b.size()) {
      const size_t eol = b.find("\r\n", at);
      if (eol == std::string::npos) break;
      const size_t len = std::stoul(b.substr(at, eol - at), nullptr, 16);
      if (len == 0) {
        r.complete = true;
        break;
      }
      if (eol + 2 + len > b.size()) break;
      out += b.substr(eol + 2, len);
      at = eol + 2 + len + 2;
    }
    return out;
  };
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(int64_t(timeout_s * 1000));
  while (std::chrono::steady_clock::now() < deadline) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 100) <= 0) continue;
    char buf[16384];
    const ssize_t n = recv(fd, buf, sizeof buf, 0);
    if (n <= 0) {
      if (body_at != std::string::npos && !chunked) r.complete = true;
      break;
    }
    raw.append(buf, size_t(n));
    if (body_at == std::string::npos) {
      const size_t end = raw.find("\r\n\r\n");
      if (end == std::string::npos) continue;
      body_at = end + 4;
      r.headers = raw.substr(0, end);
      for (char& c : r.headers)
        if (c >= 'A' && c <= 'Z') c = char(c - 'A' + 'a');
      r.status = std::stoi(raw.substr(9, 3));
      chunked = r.header("transfer-encoding") == "chunked";
    }
    r.body = decode();
    if (on_body && !on_body(r.body)) break;
    if (r.complete) break;
  }
  if (body_at != std::string::npos) r.body = decode();
  close(fd);
  return r;
}

inline RawResponse post(int port, const std::string& path, const nlohmann::json& body,
                        const std::vector<std::string>& headers = {}) {
  return http_request(port, "POST", path, body.dump(), headers);
}

// The data: payloads of an SSE body, in order.
inline std::vector<std::string> sse_events(const std::string& body) {
  std::vector<std::string> out;
  size_t at = 0;
  while ((at = body.find("data: ", at)) != std::string::npos) {
    const size_t end = body.find("\n\n", at);
    if (end == std::string::npos) break;
    out.push_back(body.substr(at + 6, end - at - 6));
    at = end + 2;
  }
  return out;
}

// The value of a sample line of Prometheus text ("name{labels} value"), or -1 when absent.
inline double metric(const std::string& text, const std::string& series) {
  size_t at = 0;
  while ((at = text.find(series + " ", at)) != std::string::npos) {
    if (at == 0 || text[at - 1] == '\n') return std::stod(text.substr(at + series.size() + 1));
    at += series.size();
  }
  return -1;
}

}  // namespace latprof::test

namespace latprof::test {

// Another program (a real tool a test drives), its output to `log`; killed when destroyed.
class ChildProcess {
 public:
  ChildProcess(std::vector<std::string> argv, const std::string& log) {
    pid_ = fork();
    if (pid_ < 0) throw std::runtime_error("fork failed");
    if (pid_ == 0) {
      const int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (fd >= 0) {
        dup2(fd, 1);
        dup2(fd, 2);
      }
      std::vector<char*> a;
      for (std::string& s : argv) a.push_back(s.data());
      a.push_back(nullptr);
      execvp(a[0], a.data());
      _exit(127);
    }
  }
  ~ChildProcess() {
    if (pid_ > 0) {
      kill(pid_, SIGTERM);
      for (int i = 0; i < 100; ++i) {
        if (waitpid(pid_, nullptr, WNOHANG) == pid_) return;
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;
  bool running() const { return pid_ > 0 && waitpid(pid_, nullptr, WNOHANG) == 0; }

 private:
  pid_t pid_ = -1;
};

// A port that was free a moment ago (bound to port 0 and released).
inline int free_port() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  close(fd);
  return ntohs(a.sin_port);
}

// Runs a shell command with a time limit; returns (exit status, stdout).
inline std::pair<int, std::string> run_command(const std::string& cmd, int timeout_s) {
  const std::string full = "timeout " + std::to_string(timeout_s) + " " + cmd;
  FILE* p = popen(full.c_str(), "r");
  if (!p) return {-1, ""};
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  const int status = pclose(p);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

}  // namespace latprof::test
