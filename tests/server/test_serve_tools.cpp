// latprof serve driven by the tools users already run: the openai Python client (streaming and
// not, chat, models) and the real Prometheus server scraping /metrics, read back through its
// HTTP query API. Each is skipped, with the reason, when the tool is not installed
// (scripts/setup.sh installs both).
#include <gtest/gtest.h>

#include <fstream>

#include "server/server_process.hpp"
#include "support/temp_dirs.hpp"

namespace latprof::test {
namespace {

using nlohmann::json;

TEST(ServeTools, OpenAIPythonClientStreams) {
  if (run_command("python3 -c 'import openai' 2>/dev/null", 30).first != 0)
    GTEST_SKIP() << "the openai Python package is not installed (scripts/setup.sh installs it)";
  ServerProcess srv({"--model", "tiny", "--api-key", "sk-test"});
  const auto [code, out] =
      run_command("python3 " + std::string(LATPROF_TEST_DIR) + "/server/openai_client.py " +
                      std::to_string(srv.port) + " sk-test",
                  120);
  ASSERT_EQ(code, 0) << out;
  const json j = json::parse(out, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << out;
  // The stream and the whole answer carry the same greedy tokens; usage counts them.
  EXPECT_EQ(j["stream_text"], j["text"]);
  EXPECT_FALSE(j["text"].get<std::string>().empty());
  EXPECT_GE(j["stream_chunks"].get<int>(), 2);
  EXPECT_EQ(j["stream_usage"]["completion_tokens"], 8);
  EXPECT_EQ(j["usage"]["completion_tokens"], 8);
  EXPECT_TRUE(j["latprof_timings"]["total_ms"].is_number());
  EXPECT_FALSE(j["chat_text"].get<std::string>().empty());
  EXPECT_EQ(j["models"], json::array({"tiny"}));
  EXPECT_EQ(srv.stop(SIGTERM, 30), 0);
}

TEST(ServeTools, PrometheusScrapesTheMetrics) {
  if (run_command("prometheus --version >/dev/null 2>&1", 30).first != 0)
    GTEST_SKIP() << "the prometheus server is not installed (scripts/setup.sh installs it)";
  ServerProcess srv({"--model", "tiny"});
  const int n = 4;
  for (int i = 0; i < n; ++i)
    ASSERT_EQ(post(srv.port, "/v1/completions",
                   {{"prompt", "ba lo"}, {"max_tokens", 3}, {"ignore_eos", true}})
                  .status,
              200);
  const std::string dir =
      latprof::testing::scratch_dir("prometheus-" + std::to_string(getpid())).string();
  ASSERT_EQ(run_command("mkdir -p " + dir, 10).first, 0);
  std::ofstream(dir + "/prometheus.yml")
      << "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
      << "scrape_configs:\n  - job_name: latprof\n    static_configs:\n"
      << "      - targets: ['127.0.0.1:" << srv.port << "']\n";
  const int prom_port = free_port();
  ChildProcess prom({"prometheus", "--config.file=" + dir + "/prometheus.yml",
                     "--storage.tsdb.path=" + dir + "/data",
                     "--web.listen-address=127.0.0.1:" + std::to_string(prom_port)},
                    dir + "/prometheus.log");
  // Prometheus's query API, until it has scraped the counters (bounded).
  auto query = [&](const std::string& q) -> double {
    std::string enc;
    for (char c : q) {
      char buf[4];
      if (isalnum(static_cast<unsigned char>(c)) || c == '_' || c == ':') {
        enc += c;
      } else {
        std::snprintf(buf, sizeof buf, "%%%02X", static_cast<unsigned char>(c));
        enc += buf;
      }
    }
    const RawResponse r = http_request(prom_port, "GET", "/api/v1/query?query=" + enc, "");
    const json j = json::parse(r.body, nullptr, false);
    if (j.is_discarded() || j.value("status", "") != "success" || j["data"]["result"].empty())
      return -1;
    return std::stod(j["data"]["result"][0]["value"][1].get<std::string>());
  };
  double success = -1, up = -1;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < deadline && prom.running()) {
    up = query("up{job=\"latprof\"}");
    success = query("latprof:request_success_total{finished_reason=\"length\"}");
    if (up == 1 && success == n) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
  }
  EXPECT_EQ(up, 1) << "see " << dir << "/prometheus.log";
  EXPECT_EQ(success, n);
  EXPECT_EQ(query("latprof:generation_tokens_total"), 3 * n);
  EXPECT_EQ(query("latprof:e2e_request_latency_seconds_count"), n);
  EXPECT_GE(query("histogram_quantile(0.5, latprof:time_to_first_token_seconds_bucket)"), 0);
  EXPECT_EQ(query("latprof:num_requests_running"), 0);
  EXPECT_EQ(srv.stop(SIGTERM, 30), 0);
  if (!HasFailure()) run_command("rm -rf " + dir, 30);
}

TEST(ServeTools, HttpsWithTlsCertAndKey) {
  if (run_command("openssl version >/dev/null 2>&1 && curl --version >/dev/null 2>&1", 30).first !=
      0)
    GTEST_SKIP() << "openssl or curl is not installed";
  const std::string dir = latprof::testing::scratch_dir("tls-" + std::to_string(getpid())).string();
  ASSERT_EQ(run_command("mkdir -p " + dir +
                            " && openssl req -x509 -newkey rsa:2048 -nodes "
                            "-keyout " +
                            dir + "/key.pem -out " + dir +
                            "/cert.pem -days 1 "
                            "-subj /CN=127.0.0.1 >/dev/null 2>&1",
                        60)
                .first,
            0);
  ServerProcess srv(
      {"--model", "tiny", "--tls-cert", dir + "/cert.pem", "--tls-key", dir + "/key.pem"});
  EXPECT_NE(srv.banner.find("listening on https://127.0.0.1:"), std::string::npos) << srv.banner;
  const std::string url = "https://127.0.0.1:" + std::to_string(srv.port);
  auto [code, out] =
      run_command("curl -sk --max-time 30 " + url +
                      "/v1/completions -H 'Content-Type: application/json' "
                      "-d '{\"prompt\": \"ba lo\", \"max_tokens\": 3, \"ignore_eos\": true}'",
                  60);
  ASSERT_EQ(code, 0) << out;
  const json j = json::parse(out, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << out;
  EXPECT_EQ(j["usage"]["completion_tokens"], 3);
  EXPECT_TRUE(j["latprof_timings"]["total_ms"].is_number());
  std::tie(code, out) = run_command(
      "curl -skN --max-time 30 " + url +
          "/v1/completions -d '{\"prompt\": \"ba\", \"max_tokens\": 4, \"stream\": true, "
          "\"ignore_eos\": true}'",
      60);
  EXPECT_EQ(code, 0);
  EXPECT_EQ(sse_events(out).size(), 4u + 1 + 1) << out;  // 4 tokens, the finish chunk, [DONE]
  // Plain HTTP on the TLS port is not answered as HTTP.
  EXPECT_NE(http_request(srv.port, "GET", "/health", "", {}, nullptr, 5).status, 200);
  EXPECT_EQ(srv.stop(SIGTERM, 30), 0);
  run_command("rm -rf " + dir, 30);
}

}  // namespace
}  // namespace latprof::test
