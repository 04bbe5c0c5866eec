// `latprof load` against `latprof serve` started by the test (the tiny built-in model on a free
// port of 127.0.0.1): every part of the chain from the server's latprof_timings, the server's
// /metrics series, and the network part growing through a delaying proxy while the server's
// parts do not. Skipped, saying so, when this build has no `serve` command.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "cli/cli_util.hpp"
#include "load/stub_server.hpp"
#include "report/report.hpp"

using nlohmann::json;

namespace {

// A `latprof serve --model tiny --port 0` child; its URL from the line it prints.
class Serve {
 public:
  Serve() {
    const auto d = cli_test::temp_dir("load-serve");
    log_ = (d / "serve.log").string();
    pid_ = fork();
    if (pid_ == 0) {
      const int fd = ::open(log_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      dup2(fd, 1);
      dup2(fd, 2);
      const std::string bin = cli_test::bin();
      execl(bin.c_str(), bin.c_str(), "serve", "--model", "tiny", "--port", "0", "--threads", "1",
            static_cast<char*>(nullptr));
      _exit(127);
    }
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(90);
    while (std::chrono::steady_clock::now() < until) {
      const std::string out = cli_test::slurp(log_);
      const size_t p = out.find("listening on http://");
      if (p != std::string::npos) {
        const size_t e = out.find_first_of(" \n", p + 13);
        url_ = out.substr(p + 13, e - (p + 13));
        return;
      }
      int st = 0;
      if (waitpid(pid_, &st, WNOHANG) == pid_) {
        pid_ = -1;
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
  ~Serve() {
    if (pid_ > 0) {
      kill(pid_, SIGTERM);
      int st = 0;
      waitpid(pid_, &st, 0);
    }
  }
  const std::string& url() const { return url_; }
  std::string log() const { return cli_test::slurp(log_); }
  int port() const { return std::stoi(url_.substr(url_.rfind(':') + 1)); }

 private:
  pid_t pid_ = -1;
  std::string log_, url_;
};

bool have_serve() {  // listed among the subcommands of latprof --help
  return cli_test::latprof("--help").out.find("\n  serve ") != std::string::npos;
}

json run_load(const std::string& url, const std::string& path) {
  const auto r = cli_test::latprof_in(".", 120,
                                      "load --url " + url +
                                          " --concurrency 4 --requests 16 --warmup 4 --input 32 "
                                          "--output 8 --json " +
                                          path);
  EXPECT_EQ(r.code, 0) << r.err << r.out;
  std::ifstream in(path);
  return json::parse(in);
}

double median_of(const json& requests, const char* part) {
  std::vector<double> v;
  for (const auto& q : requests)
    if (q["chain_ms"].is_object() && q["chain_ms"][part].is_number())
      v.push_back(q["chain_ms"][part].get<double>());
  return latprof::percentiles(v).p50;
}

}  // namespace

TEST(LoadServe, ChainFromLatprofServeAndTheNetworkThroughAProxy) {
  if (!have_serve()) GTEST_SKIP() << "this latprof has no serve command";
  Serve serve;
  ASSERT_FALSE(serve.url().empty()) << serve.log();
  const auto d = cli_test::temp_dir("load-serve-json");
  const json direct = run_load(serve.url(), (d / "direct.json").string());
  ASSERT_EQ(direct["requests"].size(), 16u);
  for (const auto& q : direct["requests"]) {
    ASSERT_TRUE(q["error"].is_null()) << q["error"];
    EXPECT_EQ(q["output_tokens"], 8);
    double sum = 0;
    for (const char* part : {"client_queue", "network", "gateway", "queue", "tokenize", "prefill",
                             "decode", "detokenize", "serialize", "unattributed"}) {
      ASSERT_TRUE(q["chain_ms"][part].is_number()) << part << " " << q["server"];
      EXPECT_GE(q["chain_ms"][part].get<double>(), 0.0) << part;
      sum += q["chain_ms"][part].get<double>();
    }
    EXPECT_NEAR(sum, q["client_queue_ms"].get<double>() + q["e2e_ms"].get<double>(), 1e-6);
    EXPECT_TRUE(q["server"]["latprof_timings"].is_object());
  }
  ASSERT_TRUE(direct["server_metrics"].is_object());
  EXPECT_TRUE(direct["server_metrics"]["error"].is_null()) << direct["server_metrics"]["error"];
  ASSERT_GE(direct["server_metrics"]["samples"].size(), 1u);
  EXPECT_TRUE(direct["server_metrics"]["samples"][0]["running"].is_number());
  // latprof serve's engine over the run (first scrape to the last): the steps of 16 requests of 8
  // tokens, its thread pool's time off the CPUs per step, the run-queue part of it.
  const json& eng = direct["server_metrics"]["engine"];
  ASSERT_TRUE(eng.is_object()) << direct["server_metrics"];
  EXPECT_GE(eng["steps"].get<double>(), 8.0);
  EXPECT_GE(eng["offcpu_ms_per_step"].get<double>(), 0.0);
  EXPECT_GE(eng["runq_ms_per_step"].get<double>(), 0.0);
  EXPECT_LE(eng["runq_ms_per_step"].get<double>(), eng["offcpu_ms_per_step"].get<double>());

  // On loopback the network part is well under a millisecond: 40 ms here is Nagle's algorithm
  // on the server's socket waiting for the client's delayed ACK (a server that streams small
  // writes must set TCP_NODELAY).
  EXPECT_LT(median_of(direct["requests"], "network"), 5.0)
      << "tokens reach the client ~40 ms after the server wrote them: does the server set "
         "TCP_NODELAY on its sockets?";

  load_test::DelayProxy proxy(serve.port(), 20);
  const json proxied = run_load(proxy.url(), (d / "proxied.json").string());
  ASSERT_EQ(proxied["requests"].size(), 16u);
  const double grew =
      median_of(proxied["requests"], "network") - median_of(direct["requests"], "network");
  std::printf("network +%.2f ms; prefill %.2f -> %.2f ms, decode %.2f -> %.2f ms\n", grew,
              median_of(direct["requests"], "prefill"), median_of(proxied["requests"], "prefill"),
              median_of(direct["requests"], "decode"), median_of(proxied["requests"], "decode"));
  EXPECT_GT(grew, 38.0);
  EXPECT_LT(grew, 60.0);
  // the server's parts: a tiny model's prefill and decode on a shared machine move by
  // milliseconds at most, never by the proxy's 40
  EXPECT_LT(std::abs(median_of(proxied["requests"], "prefill") -
                     median_of(direct["requests"], "prefill")),
            10.0);
  EXPECT_LT(
      std::abs(median_of(proxied["requests"], "decode") - median_of(direct["requests"], "decode")),
      10.0);
}
