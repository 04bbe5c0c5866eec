// The HTTP load client against servers written in the test (tests/load/stub_server.hpp), on
// 127.0.0.1 only: its figures against what the server really did, every error kind, and the
// request chain through a delaying proxy.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>

#include "load/client.hpp"
#include "load/load_report.hpp"
#include "load/openai.hpp"
#include "load/sse.hpp"
#include "load/stub_server.hpp"
#include "report/report.hpp"
#include "support/temp_dirs.hpp"

using namespace latprof;
using namespace latprof::load;

namespace {

LoadPlan closed_plan(int64_t concurrency, int64_t requests, int64_t output, int64_t offset = 0) {
  LoadPlan p;
  p.concurrency = concurrency;
  p.max_requests = requests;
  p.make_body = [output, offset](int64_t i, int64_t& in, int64_t& out) {
    Prompt pr;
    in = 8;
    out = output;
    for (int k = 0; k < 8; ++k) pr.token_ids.push_back(int32_t(10 + (i + offset + k) % 200));
    return request_body(Endpoint::completions, "stub-model", pr, out, true);
  };
  return p;
}

ClientOptions client_for(const std::string& base, double timeout_s = 30) {
  ClientOptions o;
  o.url = base + "/v1/completions";
  o.request_timeout_s = timeout_s;
  return o;
}

std::string cli_test_tmp() {
  return latprof::testing::scratch_dir("load-bench-" + std::to_string(::getpid())).string();
}

double median(std::vector<double> v) {
  return percentiles(std::move(v)).p50;
}
double p99(std::vector<double> v) {
  return percentiles(std::move(v)).p99;
}

}  // namespace

TEST(Sse, EventsSplitAnywhereAndLineEndsOfEveryKind) {
  const std::string stream =
      ": a comment\r\ndata: {\"a\":1}\r\n\r\nevent: x\ndata: two\ndata: lines\n\ndata:[DONE]\r\r";
  for (size_t cut = 0; cut <= stream.size(); ++cut) {
    SseParser p;
    std::vector<std::string> ev;
    p.feed(stream.data(), cut, ev);
    p.feed(stream.data() + cut, stream.size() - cut, ev);
    ASSERT_EQ(ev.size(), 3u) << "cut at " << cut;
    EXPECT_EQ(ev[0], "{\"a\":1}");
    EXPECT_EQ(ev[1], "two\nlines");
    EXPECT_EQ(ev[2], "[DONE]");
    EXPECT_FALSE(p.pending());
  }
}

TEST(OpenAi, ChunksOfBothEndpoints) {
  Chunk c;
  std::string why;
  const std::string text = R"({"choices":[{"index":0,"text":"hi"}]})";
  ASSERT_TRUE(parse_chunk(text.data(), text.size(), Endpoint::completions, c, why));
  EXPECT_TRUE(c.content);
  const std::string role = R"({"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]})";
  ASSERT_TRUE(parse_chunk(role.data(), role.size(), Endpoint::chat, c, why));
  EXPECT_FALSE(c.content);  // a role-only chunk carries no content
  const std::string usage =
      R"({"choices":[],"usage":{"prompt_tokens":7,"completion_tokens":3},"timings":{"prompt_ms":5}})";
  ASSERT_TRUE(parse_chunk(usage.data(), usage.size(), Endpoint::chat, c, why));
  EXPECT_EQ(c.prompt_tokens, 7);
  EXPECT_EQ(c.completion_tokens, 3);
  EXPECT_TRUE(c.timings.is_object());
  const std::string bad = "{not json";
  EXPECT_FALSE(parse_chunk(bad.data(), bad.size(), Endpoint::chat, c, why));
  EXPECT_NE(why.find("not JSON"), std::string::npos);
}

TEST(Chain, PartsAddUpToClientQueuePlusE2e) {
  RequestResult r;
  r.intended_ms = 10;
  r.sent_ms = 12;
  r.chunk_ms = {60, 70, 80};
  r.latprof_timings = {{"gateway_ms", 1},     {"queue_ms", 5},   {"tokenize_ms", 1},
                       {"prefill_ms", 30},    {"decode_ms", 20}, {"detokenize_ms", 0.5},
                       {"serialize_ms", 0.5}, {"total_ms", 60}};
  const Chain c = request_chain(r);
  EXPECT_DOUBLE_EQ(*c.ms[0], 2);  // client queue
  EXPECT_DOUBLE_EQ(*c.ms[1], 8);  // network: e2e 68 - total 60
  EXPECT_DOUBLE_EQ(*c.ms[9], 2);  // unattributed: 60 - 58
  EXPECT_NEAR(c.sum(), 2 + 68, 1e-9);
  // a server total beyond the client's e2e (it ran to the usage chunk): trimmed from the end
  r.latprof_timings["total_ms"] = 69;
  r.latprof_timings["serialize_ms"] = 9.5;
  const Chain d = request_chain(r);
  EXPECT_DOUBLE_EQ(*d.ms[1], 0);
  EXPECT_NEAR(d.sum(), 70, 1e-9);
  for (const auto& p : d.ms)
    if (p) {
      EXPECT_GE(*p, 0);
    }
  // no server timings: the client's e2e is unattributed, network unknown
  r.latprof_timings = nullptr;
  const Chain e = request_chain(r);
  EXPECT_FALSE(e.ms[1].has_value());
  EXPECT_DOUBLE_EQ(*e.ms[9], 68);
  // llama.cpp: prompt and generation only, no total: the rest (network included) unattributed
  r.timings = {
      {"prompt_n", 8}, {"prompt_ms", 30}, {"predicted_n", 3}, {"predicted_ms", 20}, {"cache_n", 2}};
  const Chain l = request_chain(r);
  EXPECT_DOUBLE_EQ(*l.ms[5], 30);
  EXPECT_DOUBLE_EQ(*l.ms[6], 20);
  EXPECT_FALSE(l.ms[1].has_value());
  EXPECT_DOUBLE_EQ(*l.ms[9], 68 - 50);
  EXPECT_EQ(load_request_to_json(r, {})["prefix_hit_tokens"], 2);
  // vLLM's per-request metrics: queue, first token from scheduling, generation
  r.timings = nullptr;
  r.metrics = {{"queue_time_ms", 5}, {"time_to_first_token_ms", 30}, {"generation_time_ms", 50}};
  const Chain v = request_chain(r);
  EXPECT_DOUBLE_EQ(*v.ms[3], 5);
  EXPECT_DOUBLE_EQ(*v.ms[5], 30);
  EXPECT_DOUBLE_EQ(*v.ms[6], 20);
  EXPECT_NEAR(v.sum(), 70, 1e-9);
}

// 200 concurrent streams: the client's TTFT and ITL against the stub's own record of when it
// wrote each token (its lateness included), medians within 1 ms and p99 within 5 ms.
TEST(LoadClient, TwoHundredStreamsMeasuredWithinAMillisecond) {
  load_test::StubOptions so;
  so.ttft_ms = 100;
  so.itl_ms = 20;
  load_test::StubServer stub(so);
  Client client(client_for(stub.url()));
  client.run(closed_plan(200, 200, 4, 1 << 20));  // warm-up: 200 kept-alive connections
  stub.reset();
  const RunResult run = client.run(closed_plan(200, 400, 20));
  ASSERT_EQ(run.requests.size(), 400u);
  std::vector<double> ttft, itl;
  for (const auto& r : run.requests) {
    ASSERT_TRUE(r.ok()) << r.error_kind << ": " << r.error_message;
    ASSERT_EQ(r.chunk_ms.size(), 20u);
    EXPECT_EQ(r.completion_tokens, 20);
    EXPECT_EQ(r.prompt_tokens, 8);
    EXPECT_EQ(r.phases.new_connections, 0) << "a new connection after the warm-up";
    const RequestRecord rec = to_record(r);
    ttft.push_back(rec.ttft_ms());
    const auto g = rec.itl_ms();
    itl.insert(itl.end(), g.begin(), g.end());
  }
  const auto st = stub.stats();
  ASSERT_EQ(st.ttft_ms.size(), 400u);
  ASSERT_EQ(st.gap_ms.size(), 400u * 19);
  const double late = median(st.lateness_ms);
  std::printf("stub: ttft p50 %.3f p99 %.3f, gap p50 %.3f p99 %.3f, lateness p50 %.3f p99 %.3f\n",
              median(st.ttft_ms), p99(st.ttft_ms), median(st.gap_ms), p99(st.gap_ms), late,
              p99(st.lateness_ms));
  std::printf("client: ttft p50 %.3f p99 %.3f, itl p50 %.3f p99 %.3f, cpu %.1f us/token\n",
              median(ttft), p99(ttft), median(itl), p99(itl), run.cpu_ms * 1e3 / (400.0 * 20));
  EXPECT_NEAR(median(ttft), median(st.ttft_ms), 1.0);
  EXPECT_NEAR(p99(ttft), p99(st.ttft_ms), 5.0);
  EXPECT_NEAR(median(itl), median(st.gap_ms), 1.0);
  EXPECT_NEAR(p99(itl), p99(st.gap_ms), 5.0);
  // and the gaps against the nominal interval (the stub's TTFT above is the nominal one plus its
  // own lateness in answering: its record is the reference)
  EXPECT_NEAR(median(itl), so.itl_ms, 1.0);
}

TEST(LoadClient, EveryErrorKindCountedNoneCrashes) {
  load_test::StubOptions so;
  so.ttft_ms = 5;
  so.itl_ms = 2;
  so.reply = [](int64_t seq) {
    const load_test::Reply kinds[] = {
        load_test::Reply::ok,       load_test::Reply::http_500,
        load_test::Reply::http_429, load_test::Reply::malformed,
        load_test::Reply::hang,     load_test::Reply::close_mid_stream};
    return kinds[seq % 6];
  };
  load_test::StubServer stub(so);
  const RunResult run = run_load(client_for(stub.url(), 0.5), closed_plan(1, 12, 5));
  ASSERT_EQ(run.requests.size(), 12u);
  std::map<std::string, int> kinds;
  for (const auto& r : run.requests) ++kinds[r.ok() ? "ok" : r.error_kind];
  EXPECT_EQ(kinds["ok"], 2);
  EXPECT_EQ(kinds["http_500"], 2);
  EXPECT_EQ(kinds["http_429"], 2);
  EXPECT_EQ(kinds["malformed_sse"], 2);
  EXPECT_EQ(kinds["timeout"], 2);
  EXPECT_EQ(kinds["connection_closed"], 2);
  const auto& e500 = run.requests[1];
  EXPECT_EQ(e500.status, 500);
  EXPECT_EQ(e500.error_message, "stub failure");
  const nlohmann::json s = load_summary_to_json(run, {});
  EXPECT_EQ(s["requests"], 2);
  EXPECT_EQ(s["requests_failed"], 10);
  EXPECT_EQ(s["errors"]["timeout"], 2);
  EXPECT_EQ(s["errors"]["http_429"], 2);
  for (const auto& q : run.requests)  // every record, the malformed ones too, is valid JSON
    EXPECT_NO_THROW(load_request_to_json(q, {}).dump());
  const nlohmann::json j = load_request_to_json(run.requests[1], {});
  EXPECT_EQ(j["error"]["kind"], "http_500");
  EXPECT_EQ(j["error"]["status"], 500);
  EXPECT_TRUE(j["ttft_ms"].is_null());

  // nobody listening
  const int port = load_test::dead_port();
  const RunResult refused =
      run_load(client_for("http://127.0.0.1:" + std::to_string(port)), closed_plan(2, 4, 5));
  ASSERT_EQ(refused.requests.size(), 4u);
  for (const auto& r : refused.requests) EXPECT_EQ(r.error_kind, "connection_refused");
}

// A proxy holding every chunk 20 ms each way: the network part of each request grows by the
// round trip; the server's parts do not move.
TEST(LoadClient, DelayingProxyGrowsTheNetworkPartOnly) {
  load_test::StubOptions so;
  so.ttft_ms = 30;
  so.itl_ms = 5;
  load_test::StubServer stub(so);
  load_test::DelayProxy proxy(stub.port(), 20);
  auto chain_medians = [](const RunResult& run) {
    std::vector<std::vector<double>> parts(Chain::kCount);
    for (const auto& r : run.requests) {
      EXPECT_TRUE(r.ok()) << r.error_kind << ": " << r.error_message;
      const Chain c = request_chain(r);
      EXPECT_NEAR(c.sum(), r.sent_ms - r.intended_ms + (r.chunk_ms.back() - r.sent_ms), 1e-6);
      for (size_t i = 0; i < Chain::kCount; ++i)
        if (c.ms[i]) parts[i].push_back(*c.ms[i]);
    }
    std::vector<double> m;
    for (auto& p : parts) m.push_back(p.empty() ? -1 : median(p));
    return m;
  };
  Client direct_client(client_for(stub.url()));
  direct_client.run(closed_plan(4, 4, 2, 1 << 20));
  const auto direct = chain_medians(direct_client.run(closed_plan(4, 24, 8)));
  Client proxied_client(client_for(proxy.url()));
  proxied_client.run(closed_plan(4, 4, 2, 1 << 20));
  const auto proxied = chain_medians(proxied_client.run(closed_plan(4, 24, 8)));
  // network (index 1): +40 ms (20 up, 20 down); prefill (5) and decode (6) unchanged
  std::printf("network %.2f -> %.2f ms, prefill %.2f -> %.2f, decode %.2f -> %.2f\n", direct[1],
              proxied[1], direct[5], proxied[5], direct[6], proxied[6]);
  EXPECT_GT(proxied[1] - direct[1], 38.0);
  EXPECT_LT(proxied[1] - direct[1], 50.0);
  EXPECT_NEAR(proxied[5], direct[5], 2.0);
  EXPECT_NEAR(proxied[6], direct[6], 2.0);
}

TEST(Metrics, PrometheusGaugesByTheNamesServersGive) {
  const MetricsSample v = parse_prometheus(
      "# HELP vllm:num_requests_running Number of requests running\n"
      "vllm:num_requests_running{model_name=\"a\"} 3.0\n"
      "vllm:num_requests_running{model_name=\"b\"} 2\n"
      "vllm:num_requests_waiting{model_name=\"a\"} 7 1700000000000\n"
      "vllm:gpu_cache_usage_perc 0.5\n"
      "vllm:e2e_request_latency_seconds_bucket{le=\"+Inf\"} 12\n"
      "vllm:e2e_request_latency_seconds_sum 6.5\n"
      "vllm:e2e_request_latency_seconds_count 12\n");
  EXPECT_EQ(v.running, 5.0);
  EXPECT_EQ(v.waiting, 7.0);
  EXPECT_EQ(v.kv_cache_usage, 0.5);
  ASSERT_EQ(v.histograms.count("e2e_request_latency_seconds"), 1u);
  EXPECT_EQ(v.histograms.at("e2e_request_latency_seconds").first, 6.5);
  EXPECT_EQ(v.histograms.at("e2e_request_latency_seconds").second, 12.0);
  EXPECT_TRUE(v.engine.empty());  // not latprof serve
  const MetricsSample e = parse_prometheus(
      "latprof:engine_steps_total 40\nlatprof:engine_offcpu_seconds_total 0.25\n"
      "latprof:engine_runq_seconds_total 0.01\nvllm:engine_steps_total 7\n");
  ASSERT_EQ(e.engine.size(), 3u);
  EXPECT_EQ(e.engine.at("engine_steps_total"), 40.0);
  EXPECT_EQ(e.engine.at("engine_offcpu_seconds_total"), 0.25);
  EXPECT_EQ(e.engine.at("engine_runq_seconds_total"), 0.01);
  const MetricsSample l =
      parse_prometheus("llamacpp:requests_processing 1\nllamacpp:requests_deferred 4\n");
  EXPECT_EQ(l.running, 1.0);
  EXPECT_EQ(l.waiting, 4.0);
  EXPECT_FALSE(l.kv_cache_usage.has_value());
  EXPECT_FALSE(parse_prometheus("garbage {{{\n").running.has_value());
}

// vLLM's continuous usage stats: a chunk of k tokens counts as k equal gaps in ITL, chunk_gap_ms
// keeps one gap per chunk, TPOT comes from usage.completion_tokens.
TEST(Records, ChunksOfSeveralTokensAsEqualGaps) {
  RequestResult r;
  r.sent_ms = 0;
  r.chunk_ms = {100, 130, 140};
  r.chunk_tokens = {1, 3, 1};
  r.completion_tokens = 5;
  const RequestRecord rec = to_record(r);
  ASSERT_EQ(rec.token_ms.size(), 5u);
  const auto itl = rec.itl_ms();
  EXPECT_DOUBLE_EQ(itl[0], 10);
  EXPECT_DOUBLE_EQ(itl[1], 10);
  EXPECT_DOUBLE_EQ(itl[2], 10);
  EXPECT_DOUBLE_EQ(itl[3], 10);
  EXPECT_DOUBLE_EQ(*tpot_ms(r), 40.0 / 4);
  const nlohmann::json j = load_request_to_json(r, {});
  EXPECT_EQ(j["chunk_gap_ms"].size(), 2u);
  EXPECT_EQ(j["itl_ms"].size(), 4u);
  // without per-chunk counts: one gap per chunk, TPOT still from the usage count
  r.chunk_tokens = {0, 0, 0};
  EXPECT_EQ(to_record(r).itl_ms().size(), 2u);
  EXPECT_DOUBLE_EQ(*tpot_ms(r), 10.0);
}

TEST(Records, RequestsAndTokensInFlightTimeWeighted) {
  // A: sent 0, prompt 10, chunks at 10 (1 token) and 20 (2 tokens), done 30.
  // B: sent 20, prompt 4 (asked; no usage), one chunk at 25, done 40.
  // C: sent 60, done 70, prompt 2: the window is 0..70, with 20 ms when nothing was in flight.
  RequestResult a, b, c;
  a.sent_ms = 0, a.done_ms = 30, a.prompt_tokens = 10, a.chunk_ms = {10, 20},
  a.chunk_tokens = {1, 2};
  b.sent_ms = 20, b.done_ms = 40, b.asked_input = 4, b.chunk_ms = {25}, b.chunk_tokens = {0};
  c.sent_ms = 60, c.done_ms = 70, c.prompt_tokens = 2;
  const nlohmann::json j = in_flight_json({a, b, c});
  // Requests: 1 on 0..20, 2 on 20..30, 1 on 30..40, 0 on 40..60, 1 on 60..70.
  const double req_area = 20 + 20 + 10 + 10;
  EXPECT_DOUBLE_EQ(j["requests_effective"].get<double>(), req_area / 70);
  EXPECT_DOUBLE_EQ(j["requests_active"].get<double>(), req_area / 50);
  EXPECT_EQ(j["requests_max"], 2);
  // Tokens: A 10 on 0..10, 11 on 10..20, 13 on 20..30; B 4 on 20..25, 5 on 25..40; C 2 on 60..70.
  const double tok_area = 10 * 10 + 11 * 10 + 13 * 10 + 4 * 5 + 5 * 15 + 2 * 10;
  EXPECT_DOUBLE_EQ(j["tokens_effective"].get<double>(), tok_area / 70);
  EXPECT_DOUBLE_EQ(j["tokens_active"].get<double>(), tok_area / 50);
  EXPECT_EQ(j["tokens_max"], 13 + 5);
  // Nothing sent: nulls and zeros, no division by zero.
  const nlohmann::json none = in_flight_json({});
  EXPECT_TRUE(none["requests_effective"].is_null());
  EXPECT_EQ(none["tokens_max"], 0);
}

// The client's own error against the stub's record as streams grow (reports/load-client.md).
// A benchmark, not a check: runs only with LATPROF_LOAD_BENCH=1 (e.g. "200,500,1000,2000").
TEST(LoadClientBench, ErrorAndCpuPerTokenAsStreamsGrow) {
  const char* env = std::getenv("LATPROF_LOAD_BENCH");
  if (!env || !*env) GTEST_SKIP() << "set LATPROF_LOAD_BENCH=200,500,1000 to run";
  std::vector<int64_t> sizes;
  for (std::string s = env; !s.empty();) {
    const size_t c = s.find(',');
    sizes.push_back(std::stoll(s.substr(0, c)));
    s = c == std::string::npos ? "" : s.substr(c + 1);
  }
  std::printf("%8s %10s %10s %10s %10s %10s %10s %12s %12s\n", "streams", "ttft_err50",
              "ttft_err99", "itl_err50", "itl_err99", "stub_late50", "stub_late99", "cpu_us/tok",
              "cpu_us/chunk");
  for (const int64_t n : sizes) {
    load_test::StubOptions so;
    so.ttft_ms = 120;
    so.itl_ms = 100;
    load_test::StubServer stub(so);
    Client client(client_for(stub.url()));
    client.run(closed_plan(n, n, 2, 1 << 20));
    stub.reset();
    const int64_t tokens = 20;
    const RunResult run = client.run(closed_plan(n, 2 * n, tokens));
    std::vector<double> ttft, itl;
    int64_t ok = 0;
    for (const auto& r : run.requests) {
      if (!r.ok()) continue;
      ++ok;
      const RequestRecord rec = to_record(r);
      ttft.push_back(rec.ttft_ms());
      const auto g = rec.itl_ms();
      itl.insert(itl.end(), g.begin(), g.end());
    }
    const auto st = stub.stats();
    std::printf("%8lld %10.3f %10.3f %10.3f %10.3f %10.3f %10.3f %12.2f %12.2f   (%lld ok)\n",
                (long long)n, median(ttft) - median(st.ttft_ms), p99(ttft) - p99(st.ttft_ms),
                median(itl) - median(st.gap_ms), p99(itl) - p99(st.gap_ms), median(st.lateness_ms),
                p99(st.lateness_ms), run.cpu_ms * 1e3 / double(ok * tokens),
                run.cpu_ms * 1e3 / double(ok * tokens), (long long)ok);
  }
}

// The openai Python client against the same stub and load, beside latprof's figures (a
// benchmark for reports/load-client.md: LATPROF_LOAD_BENCH_PY=STREAMS, python3 with openai).
TEST(LoadClientBench, OpenAiPythonClientBeside) {
  const char* env = std::getenv("LATPROF_LOAD_BENCH_PY");
  if (!env || !*env) GTEST_SKIP() << "set LATPROF_LOAD_BENCH_PY=200 to run";
  const int64_t n = std::stoll(env);
  const int64_t tokens = 20;
  load_test::StubOptions so;
  so.ttft_ms = 120;
  so.itl_ms = 100;
  load_test::StubServer stub(so);
  // latprof
  Client client(client_for(stub.url()));
  client.run(closed_plan(n, n, 2, 1 << 20));
  stub.reset();
  const RunResult run = client.run(closed_plan(n, 2 * n, tokens));
  std::vector<double> ttft, itl;
  for (const auto& r : run.requests) {
    const RequestRecord rec = to_record(r);
    ttft.push_back(rec.ttft_ms());
    const auto g = rec.itl_ms();
    itl.insert(itl.end(), g.begin(), g.end());
  }
  const auto st = stub.stats();
  // the Python client
  stub.reset();
  const std::string out = cli_test_tmp() + "/py.json";
  const std::string cmd = "python3 " + std::string(LATPROF_TEST_DIR) +
                          "/load/openai_client_bench.py " + stub.url() + " " + std::to_string(n) +
                          " " + std::to_string(2 * n) + " " + std::to_string(tokens) + " >" + out;
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  std::ifstream in(out);
  const nlohmann::json py = nlohmann::json::parse(in);
  const auto pst = stub.stats();
  std::vector<double> pttft = py["ttft_ms"].get<std::vector<double>>();
  std::vector<double> pitl = py["itl_ms"].get<std::vector<double>>();
  std::printf("%-10s %10s %10s %10s %10s %12s\n", "client", "ttft_err50", "ttft_err99", "itl_err50",
              "itl_err99", "cpu_us/tok");
  std::printf("%-10s %10.3f %10.3f %10.3f %10.3f %12.2f\n", "latprof",
              median(ttft) - median(st.ttft_ms), p99(ttft) - p99(st.ttft_ms),
              median(itl) - median(st.gap_ms), p99(itl) - p99(st.gap_ms),
              run.cpu_ms * 1e3 / double(2 * n * tokens));
  std::printf("%-10s %10.3f %10.3f %10.3f %10.3f %12.2f\n", "openai-py",
              median(pttft) - median(pst.ttft_ms), p99(pttft) - p99(pst.ttft_ms),
              median(pitl) - median(pst.gap_ms), p99(pitl) - p99(pst.gap_ms),
              py["cpu_s"].get<double>() * 1e6 / double(2 * n * tokens));
}

// Whatever bytes a server sends, the SSE parser and the chunk reader return (no crash, no
// exception): random streams built from SSE fragments and raw bytes.
TEST(Sse, RandomStreamsNeverCrash) {
  std::mt19937_64 rng(7);
  const char* pieces[] = {"data: ", "data:", "\n",        "\r\n",        "\r",
                          ": c\n",  "{",     "}",         "\"choices\"", ":[{\"text\":\"x\"}]",
                          "[DONE]", "\xff",  "\"usage\"", "event: e\n",  "{\"error\":{}}"};
  size_t events = 0;
  for (int stream = 0; stream < 2000; ++stream) {
    SseParser p;
    std::vector<std::string> ev;
    std::string bytes;
    const int n = int(rng() % 40);
    for (int k = 0; k < n; ++k) {
      if (rng() % 4 == 0)
        bytes.push_back(char(rng() % 256));
      else
        bytes += pieces[rng() % std::size(pieces)];
    }
    for (size_t at = 0; at < bytes.size();) {  // fed in random slices
      const size_t len = std::min<size_t>(bytes.size() - at, 1 + rng() % 7);
      p.feed(bytes.data() + at, len, ev);
      at += len;
    }
    for (const auto& e : ev) {
      Chunk c;
      std::string why;
      for (Endpoint ep : {Endpoint::completions, Endpoint::chat})
        if (!parse_chunk(e.data(), e.size(), ep, c, why)) {
          EXPECT_FALSE(why.empty());
        }
    }
    events += ev.size();
  }
  EXPECT_GT(events, 200u);  // the streams did carry events
}
