// `latprof load` end to end: the binary against the stub server of the test (127.0.0.1 only):
// bad flags and URLs (one line, exit 2), the JSON and CSV reports, sweeps, the SLO search,
// trace replay, and a run where every request fails.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "cli/cli_util.hpp"
#include "load/stub_server.hpp"
#include "model/tokenizer_vocab.hpp"
#include "report/schema_check.hpp"
#include "support/model_writer.hpp"

using nlohmann::json;

namespace {

constexpr int kTimeoutS = 60;

cli_test::Result load(const std::string& args) {
  return cli_test::latprof_in(".", kTimeoutS, "load " + args);
}

json read_json(const std::string& path) {
  std::ifstream in(path);
  return json::parse(in);
}

int lines(const std::string& s) {
  return int(std::count(s.begin(), s.end(), '\n'));
}

struct BadCase {
  std::string args;
  const char* says;
};

}  // namespace

TEST(LoadCli, BadFlagsAndUrlsAreOneLineAndExit2) {
  const std::string dead = "http://127.0.0.1:" + std::to_string(load_test::dead_port());
  const std::string D = cli_test::temp_dir("load-bad").string();
  const BadCase cases[] = {
      {"--url ftp://127.0.0.1:1", "must start with http:// or https://"},
      {"--url http://", "http://"},
      {"--url 127.0.0.1:8000", "must start with http://"},
      {"--url 'http://127.0.0.1:1/?x=1' --model m", "query string"},
      {"--model m", "--url is required"},
      {"--url " + dead + " --model m --rate 1 --concurrency 2", "not both"},
      {"--url " + dead + " --model m --endpoint foo", "--endpoint 'foo'"},
      {"--url " + dead + " --model m --max-concurrency 4", "give --rate too"},
      {"--url " + dead + " --model m --rate 0", "--rate '0' must be a positive"},
      {"--url " + dead + " --model m --rate 1,x", "--rate 'x'"},
      {"--url " + dead + " --model m --concurrency 0", "--concurrency '0'"},
      {"--url " + dead + " --model m --input 0", "--input must be a whole number"},
      {"--url " + dead + " --model m --output normal:x:1", "is not a number"},
      {"--url " + dead + " --model m --arrival weird --rate 1", "--arrival 'weird'"},
      {"--url " + dead + " --model m --rate 1 --burstiness 0.5", "--arrival gamma only"},
      {"--url " + dead + " --model m --find-max-rate", "needs --slo"},
      {"--url " + dead + " --model m --slo ttft", "not METRIC:VALUE"},
      {"--url " + dead + " --model m --request-timeout 0", "--request-timeout"},
      {"--url " + dead + " --model m --duration -1", "--duration"},
      {"--url " + dead + " --model m --duration 0", "--duration must be"},
      {"--url " + dead + " --model m --duration nan", "--duration"},
      {"--url " + dead + " --model m --requests 0", "--requests must be"},
      {"--url " + dead + " --model m --requests 100000000000", "--requests must be"},
      {"--url " + dead + " --model m --rate inf --duration 1", "give --requests"},
      {"--url " + dead + " --model m --dataset " + D + "/missing.jsonl", "cannot open"},
      {"--url " + dead + " --model m --trace-replay " + D + "/missing.csv", "cannot open"},
      {"--url " + dead + " --model m --json " + D, "--json"},
      {"--url " + dead, "is the server running"},
      {"--url " + dead + " --model m --cost-model nosuchmodel --hw h100-sxm", "nosuchmodel"},
      {"--url " + dead + " --model m --cost-model tiny", "no device"},
      {"--url " + dead + " --model \"$(printf '\\377\\376')\"", "--model is not valid UTF-8"},
      {"--url " + dead + " --model m --hw h100-sxm", "add --cost-model"},
      {"--url " + dead + " --model m --cost-model tiny --hw h100-sxm --dtype fp8", "fp8"},
  };
  for (const BadCase& c : cases) {
    const auto r = load(c.args);
    EXPECT_EQ(r.code, 2) << c.args << "\n" << r.err;
    EXPECT_NE(r.err.find(c.says), std::string::npos) << c.args << "\n" << r.err;
    EXPECT_EQ(lines(r.err), 1) << c.args << "\n" << r.err;
    EXPECT_EQ(r.err.find("internal error"), std::string::npos) << c.args;
  }
}

TEST(LoadCli, JsonAndCsvReportsAgainstTheStub) {
  load_test::StubOptions so;
  so.ttft_ms = 20;
  so.itl_ms = 4;
  so.extra_prompt_tokens = 1;  // a server that adds a BOS: reported, not hidden
  load_test::StubServer stub(so);
  const auto d = cli_test::temp_dir("load-json");
  const std::string js = (d / "r.json").string(), csv = (d / "r.csv").string();
  const std::string tr = (d / "r.trace.json").string(), jl = (d / "r.jsonl").string();
  const auto r = load("--url " + stub.url() + "/v1 --concurrency 4 --requests 12 --warmup 4 " +
                      "--input 16 --output 6 --slo ttft:1s --json " + js + " --csv " + csv +
                      " --trace " + tr + " --jsonl " + jl);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("TTFT (ms)"), std::string::npos) << r.out;
  std::fputs(r.out.c_str(), stdout);  // the printed summary, in the test log
  EXPECT_NE(r.out.find("note: 12 of 12 requests had a prompt length"), std::string::npos) << r.out;
  const json j = read_json(js);
  EXPECT_EQ(j["kind"], "load");
  EXPECT_EQ(j["target"]["model"], "stub-model");  // from /v1/models
  ASSERT_EQ(j["requests"].size(), 12u);
  for (const auto& q : j["requests"]) {
    EXPECT_TRUE(q["error"].is_null());
    EXPECT_EQ(q["input_tokens"], 17);
    EXPECT_EQ(q["asked_input_tokens"], 16);
    EXPECT_EQ(q["output_tokens"], 6);
    EXPECT_EQ(q["itl_ms"].size(), 5u);
    EXPECT_EQ(q["chunk_gap_ms"].size(), 5u);
    EXPECT_TRUE(q["preemptions"].is_null());
    EXPECT_GE(q["ttft_ms"].get<double>(), 20.0);
    double sum = 0;
    for (const char* part : {"client_queue", "network", "gateway", "queue", "tokenize", "prefill",
                             "decode", "detokenize", "serialize", "unattributed"}) {
      ASSERT_TRUE(q["chain_ms"].contains(part)) << part;
      ASSERT_TRUE(q["chain_ms"][part].is_number()) << part;
      sum += q["chain_ms"][part].get<double>();
    }
    EXPECT_NEAR(sum, q["client_queue_ms"].get<double>() + q["e2e_ms"].get<double>(), 1e-6);
    EXPECT_TRUE(q["server"]["latprof_timings"].is_object());
    EXPECT_TRUE(q["phases_ms"]["first_byte"].is_number());
  }
  const json& s = j["summary"];
  EXPECT_EQ(s["requests"], 12);
  EXPECT_EQ(s["requests_failed"], 0);
  EXPECT_TRUE(s["errors"].empty());
  EXPECT_EQ(s["slo"], "ttft:1000ms");
  EXPECT_EQ(s["slo_attainment"], 1.0);
  EXPECT_NEAR(s["ttft_ms"]["p50"].get<double>(), 20.0, 5.0);
  EXPECT_NEAR(s["itl_ms"]["p50"].get<double>(), 4.0, 1.5);
  EXPECT_TRUE(s["chain_ms"]["prefill"].is_object());
  EXPECT_TRUE(s["client"]["cpu_us_per_token"].is_number());
  EXPECT_LE(s["client"]["max_in_flight"].get<int>(), 4);
  EXPECT_EQ(stub.stats().requests, 16);  // 4 warm-up + 12
  // the server's gauges, scraped from /metrics at the start and every second
  ASSERT_TRUE(j["server_metrics"].is_object());
  EXPECT_TRUE(j["server_metrics"]["error"].is_null());
  ASSERT_GE(j["server_metrics"]["samples"].size(), 1u);
  EXPECT_EQ(j["server_metrics"]["samples"][0]["kv_cache_usage"], 0.25);
  EXPECT_EQ(j["server_metrics"]["samples"][0]["waiting"], 0.0);
  // the server's prefill histogram over the run (first scrape at the start, last at the end):
  // 12 requests of the 20 ms TTFT
  ASSERT_GE(j["server_metrics"]["samples"].size(), 2u);
  const json& h = j["server_metrics"]["histograms"]["request_prefill_time_seconds"];
  ASSERT_TRUE(h.is_object()) << j["server_metrics"];
  EXPECT_EQ(h["count"], 12.0);
  EXPECT_NEAR(h["mean_ms"].get<double>(), 20.0, 3.0);
  EXPECT_TRUE(j["server_metrics"]["engine"].is_null());  // the stub is not latprof serve
  const std::string c = cli_test::slurp(csv);
  EXPECT_EQ(lines(c), 13);
  EXPECT_EQ(c.rfind("point,id,intended_ms", 0), 0u) << c.substr(0, 80);
  // the trace: a track per request, its slices and one instant per chunk
  const json t = read_json(tr);
  int streaming = 0, chunks = 0, names = 0;
  for (const auto& e : t["traceEvents"]) {
    if (e["name"] == "streaming") ++streaming;
    if (e["name"] == "chunk") ++chunks;
    if (e["name"] == "thread_name") ++names;
  }
  EXPECT_EQ(streaming, 12);
  EXPECT_EQ(chunks, 12 * 6);
  EXPECT_EQ(names, 12);
  // one JSON line, without the per-request records
  const std::string line = cli_test::slurp(jl);
  EXPECT_EQ(lines(line), 1);
  const json l = json::parse(line);
  EXPECT_FALSE(l.contains("requests"));
  EXPECT_EQ(l["summary"]["requests"], 12);
}

TEST(LoadCli, SweepsAndEveryRequestFailing) {
  load_test::StubOptions so;
  so.ttft_ms = 5;
  so.itl_ms = 1;
  load_test::StubServer stub(so);
  const auto d = cli_test::temp_dir("load-sweep");
  const std::string js = (d / "s.json").string();
  const std::string html = (d / "s.html").string();
  auto r = load("--url " + stub.url() + " --concurrency 1,3 --requests 6 --output 3 --json " + js +
                " --html " + html);
  ASSERT_EQ(r.code, 0) << r.err;
  {
    const std::string h = cli_test::slurp(html);
    EXPECT_NE(h.find("Latency against load"), std::string::npos);
    EXPECT_NE(h.find("<h2>concurrency 3</h2>"), std::string::npos);
    EXPECT_EQ(std::count(h.begin(), h.end(), '\n'), 1);  // one line, closed
    EXPECT_NE(h.find("</html>"), std::string::npos);
    EXPECT_EQ(std::count(h.begin(), h.end(), '<'), std::count(h.begin(), h.end(), '>'));
    size_t svgs = 0;
    for (size_t p = h.find("<svg"); p != std::string::npos; p = h.find("<svg", p + 1)) ++svgs;
    EXPECT_EQ(svgs, 2u + 2 * 3);  // two curves; per point TTFT, ITL, over time
  }
  json j = read_json(js);
  ASSERT_EQ(j["points"].size(), 2u);
  EXPECT_EQ(j["points"][0]["concurrency"], 1);
  EXPECT_EQ(j["points"][1]["concurrency"], 3);
  EXPECT_EQ(j["points"][1]["summary"]["requests"], 6);
  EXPECT_EQ(j["points"][0]["summary"]["client"]["max_in_flight"], 1);
  EXPECT_TRUE(j["points"][0]["server_metrics"].is_object());

  r = load("--url " + stub.url() + " --rate 50,inf --max-concurrency 2 --arrival constant " +
           "--requests 6 --output 3 --metrics-url none --json " + js);
  ASSERT_EQ(r.code, 0) << r.err;
  j = read_json(js);
  ASSERT_EQ(j["points"].size(), 2u);
  EXPECT_EQ(j["points"][0]["rate"], 50.0);
  EXPECT_EQ(j["points"][1]["rate"], "inf");
  // constant arrivals 20 ms apart
  EXPECT_NEAR(j["points"][0]["requests"][3]["intended_ms"].get<double>(), 60.0, 1e-6);
  // inf with at most 2 in flight: the rest wait in the client, and say so
  EXPECT_LE(j["points"][1]["summary"]["client"]["max_in_flight"].get<int>(), 2);
  EXPECT_GT(j["points"][1]["summary"]["client_queue_ms"]["max"].get<double>(), 5.0);
  EXPECT_TRUE(j["points"][1]["server_metrics"].is_null());

  const std::string dead = "http://127.0.0.1:" + std::to_string(load_test::dead_port());
  r = load("--url " + dead + " --model m --requests 3 --json " + js);
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_NE(r.err.find("every request failed: connection_refused 3"), std::string::npos) << r.err;
  j = read_json(js);
  EXPECT_EQ(j["summary"]["errors"]["connection_refused"], 3);
  EXPECT_EQ(j["requests"][0]["error"]["kind"], "connection_refused");
}

// Every point of a sweep (and its warm-up) sends prompts of its own, of the same lengths per
// request index: a server's prefix cache cannot serve a later point's prefill. A server that has
// seen the prompts before says so (OpenAI's usage.prompt_tokens_details.cached_tokens), and the
// report notes it.
TEST(LoadCli, EveryPointSendsPromptsOfItsOwn) {
  load_test::StubOptions so;
  so.ttft_ms = 2;
  so.itl_ms = 1;
  so.latprof_timings = false;
  so.prefix_cache = true;
  load_test::StubServer stub(so);
  const auto d = cli_test::temp_dir("load-prompts");
  const std::string js = (d / "p.json").string();
  const std::string args = "--url " + stub.url() +
                           " --concurrency 1,2 --requests 4 --warmup 2 --input uniform:20:40 "
                           "--output 2 --metrics-url none --json " +
                           js;
  auto r = load(args);
  ASSERT_EQ(r.code, 0) << r.err;
  const auto prompts = stub.stats().prompts;
  ASSERT_EQ(prompts.size(), 12u);  // two points of 2 warm-up and 4 measured requests
  for (size_t a = 0; a < prompts.size(); ++a)
    for (size_t b = a + 1; b < prompts.size(); ++b)
      EXPECT_FALSE(std::equal(prompts[a].begin(), prompts[a].begin() + 8, prompts[b].begin()))
          << "prompts " << a << " and " << b << " share their first 8 tokens";
  json j = read_json(js);
  ASSERT_EQ(j["points"].size(), 2u);
  for (const auto& p : j["points"]) {
    EXPECT_EQ(p["notes"].dump().find("prefix cache"), std::string::npos) << p["notes"];
    for (const auto& q : p["requests"]) EXPECT_LT(q["prefix_hit_tokens"].get<int>(), 8) << q;
  }
  std::map<int64_t, int64_t> asked;  // the same lengths per request index at both points
  for (const auto& q : j["points"][0]["requests"]) asked[q["id"]] = q["asked_input_tokens"];
  for (const auto& q : j["points"][1]["requests"])
    EXPECT_EQ(q["asked_input_tokens"].get<int64_t>(), asked.at(q["id"])) << q;

  // The same invocation again: the server has seen every prompt.
  r = load(args);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("note: 4 of 4 requests found at least half of their prompt in the "
                       "server's prefix cache"),
            std::string::npos)
      << r.out;
  j = read_json(js);
  for (const auto& q : j["points"][1]["requests"])
    EXPECT_EQ(q["prefix_hit_tokens"], q["input_tokens"]) << q;
}

TEST(LoadCli, FindMaxRateAndTraceReplay) {
  load_test::StubOptions so;
  so.ttft_ms = 10;
  so.itl_ms = 1;
  load_test::StubServer stub(so);
  const auto d = cli_test::temp_dir("load-search");
  const std::string js = (d / "m.json").string();
  auto r = load("--url " + stub.url() + " --find-max-rate --slo ttft:2s --rate-range 10:40 " +
                "--requests 4 --output 2 --json " + js);
  ASSERT_EQ(r.code, 0) << r.err;
  json j = read_json(js);
  EXPECT_EQ(j["max_rate"]["rate"], 40.0);  // an SLO every rate meets: the top of the range
  r = load("--url " + stub.url() + " --find-max-rate --slo ttft:1ms --rate-range 10:40 " +
           "--requests 4 --output 2 --json " + js);
  ASSERT_EQ(r.code, 0) << r.err;
  j = read_json(js);
  EXPECT_TRUE(j["max_rate"]["rate"].is_null());  // 10 ms TTFT never meets 1 ms
  EXPECT_NE(r.out.find("no rate in 10:40 meets the SLO"), std::string::npos) << r.out;

  const std::string moon = (d / "mooncake.jsonl").string();
  std::ofstream(moon)
      << R"({"timestamp": 1000, "input_length": 12, "output_length": 3, "hash_ids": [1]})"
      << "\n"
      << R"({"timestamp": 1150, "input_length": 20, "output_length": 2, "hash_ids": [2]})"
      << "\n";
  stub.reset();
  r = load("--url " + stub.url() + " --trace-replay " + moon + " --json " + js);
  ASSERT_EQ(r.code, 0) << r.err;
  {
    const auto prompts = stub.stats().prompts;
    ASSERT_EQ(prompts.size(), 2u);
    EXPECT_EQ(prompts[0].size(), 12u);
    EXPECT_EQ(prompts[1].size(), 20u);
  }
  j = read_json(js);
  ASSERT_EQ(j["requests"].size(), 2u);
  EXPECT_NEAR(j["requests"][1]["intended_ms"].get<double>(), 150.0, 1e-6);
  EXPECT_EQ(j["requests"][1]["asked_input_tokens"], 20);
  EXPECT_EQ(j["requests"][1]["output_tokens"], 2);

  const std::string azure = (d / "azure.csv").string();
  std::ofstream(azure) << "TIMESTAMP,ContextTokens,GeneratedTokens\n"
                       << "2023-11-16 18:15:46.6805900,30,2\n"
                       << "2023-11-16 18:15:46.8805900,40,3\n";
  r = load("--url " + stub.url() + " --trace-replay " + azure + " --json " + js);
  ASSERT_EQ(r.code, 0) << r.err;
  j = read_json(js);
  ASSERT_EQ(j["requests"].size(), 2u);
  EXPECT_NEAR(j["requests"][1]["intended_ms"].get<double>(), 200.0, 1e-3);
  EXPECT_EQ(j["requests"][1]["asked_input_tokens"], 40);

  std::ofstream(azure) << "time,in,out\n1,2,3\n";
  r = load("--url " + stub.url() + " --trace-replay " + azure);
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("nor an Azure CSV trace"), std::string::npos) << r.err;
}

TEST(LoadCli, ChatDatasetAndRampUp) {
  load_test::StubOptions so;
  so.ttft_ms = 5;
  so.itl_ms = 1;
  load_test::StubServer stub(so);
  const auto d = cli_test::temp_dir("load-chat");
  const std::string js = (d / "c.json").string(), ds = (d / "d.jsonl").string();
  std::ofstream(ds) << R"({"input_tokens": 9, "output_tokens": 2})"
                    << "\n"
                    << R"({"prompt": "one two three four", "output_tokens": 3})"
                    << "\n";
  auto r = load("--url " + stub.url() + " --endpoint chat --dataset " + ds +
                " --requests 4 --model stub-model --json " + js);
  ASSERT_EQ(r.code, 0) << r.err;
  json j = read_json(js);
  ASSERT_EQ(j["requests"].size(), 4u);
  EXPECT_EQ(j["target"]["url"], stub.url() + "/v1/chat/completions");
  EXPECT_EQ(j["requests"][0]["output_tokens"], 2);
  EXPECT_EQ(j["requests"][0]["input_tokens"], 9);  // the stub counts words as tokens
  EXPECT_EQ(j["requests"][1]["output_tokens"], 3);
  EXPECT_EQ(j["requests"][1]["input_tokens"], 4);
  EXPECT_EQ(j["requests"][1]["asked_input_tokens"], 0);  // a text prompt: the server tells
  EXPECT_TRUE(j["notes"].empty()) << j["notes"];

  // ramp-up: 4 slots started evenly over 0.2 s (requests longer than that: no slot frees early)
  load_test::StubOptions slow;
  slow.ttft_ms = 300;
  load_test::StubServer slow_stub(slow);
  r = load("--url " + slow_stub.url() +
           " --concurrency 4 --ramp-up 0.2 --requests 4 --output 2 --json " + js);
  ASSERT_EQ(r.code, 0) << r.err;
  j = read_json(js);
  std::vector<double> intended;
  for (const auto& q : j["requests"]) intended.push_back(q["intended_ms"].get<double>());
  std::sort(intended.begin(), intended.end());
  EXPECT_NEAR(intended[0], 0.0, 1e-6);
  EXPECT_NEAR(intended[3], 150.0, 1e-6);
}

TEST(LoadCli, AServerThatRefusesIgnoreEos) {
  load_test::StubOptions so;
  so.ttft_ms = 2;
  so.itl_ms = 1;
  so.refuses_ignore_eos = true;
  load_test::StubServer stub(so);
  auto r = load("--url " + stub.url() + " --requests 2 --output 6 --metrics-url none");
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_NE(r.out.find("note: the server refuses ignore_eos (http_400"), std::string::npos)
      << r.out;
  r = load("--url " + stub.url() + " --requests 2 --output 6 --metrics-url none --no-ignore-eos");
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("2 of 2 requests generated a number of tokens other than max_tokens"),
            std::string::npos)
      << r.out;
}

TEST(LoadCli, PhysicsFloorPerRequest) {
  load_test::StubOptions so;
  so.ttft_ms = 10;
  so.itl_ms = 2;
  load_test::StubServer stub(so);
  const auto d = cli_test::temp_dir("load-physics");
  const std::string js = (d / "p.json").string();
  const auto r = load("--url " + stub.url() + " --requests 3 --input 16 --output 6 " +
                      "--cost-model tiny --hw h100-sxm --metrics-url none --json " + js);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("physics (tiny on"), std::string::npos) << r.out;
  const json j = read_json(js);
  for (const auto& q : j["requests"]) {
    const json& p = q["physics"];
    ASSERT_TRUE(p.is_object()) << q;
    const double floor = p["floor_ms"]["e2e"].get<double>();
    EXPECT_GT(floor, 0.0);
    EXPECT_LT(floor, 1.0);  // a tiny model on an H100: microseconds
    EXPECT_NEAR(p["above_floor_ms"].get<double>(), q["e2e_ms"].get<double>() - floor, 1e-9);
    const json& x = p["excess_ms"];
    EXPECT_NEAR(x["scheduling"].get<double>() + x["kernels_and_batching"].get<double>() +
                    x["outside_engine"].get<double>(),
                p["above_floor_ms"].get<double>(), 1e-6);
    // the stub's prefill and decode (10 + 5 x 2 ms of sleeps, which run late on a busy machine,
    // never early) are nearly all above the floor
    EXPECT_GE(x["kernels_and_batching"].get<double>(), 19.0);
    EXPECT_LE(x["kernels_and_batching"].get<double>(), 30.0);
  }
  EXPECT_EQ(j["summary"]["physics"]["requests"], 3);
  EXPECT_EQ(j["summary"]["physics"]["cost_model"], "tiny");

  // the same from a run report of the server's engine: its model, dtype, KV cache and measured
  // ceilings
  const std::string engine = (d / "engine.json").string();
  auto run = cli_test::latprof(
      "run --model tiny --kv-dtype bf16 --input 16 --output 4 -q --repeat 1 --json " + engine);
  ASSERT_EQ(run.code, 0) << run.err;
  const auto r2 = load("--url " + stub.url() + " --requests 2 --input 16 --output 6 " +
                       "--engine-report " + engine + " --metrics-url none --json " + js);
  ASSERT_EQ(r2.code, 0) << r2.err;
  const json k = read_json(js);
  EXPECT_EQ(k["summary"]["physics"]["engine_report"], engine);
  EXPECT_EQ(k["summary"]["physics"]["cost_model"], "tiny");
  EXPECT_EQ(k["summary"]["physics"]["act_dtype"], "fp32");  // the CPU backend's
  EXPECT_EQ(k["summary"]["physics"]["kv_dtype"], "bf16");
  EXPECT_GT(k["requests"][0]["physics"]["floor_ms"]["e2e"].get<double>(), 0.0);
  const auto bad = load("--url " + stub.url() + " --engine-report " + engine +
                        " --cost-model tiny --hw h100-sxm");
  EXPECT_EQ(bad.code, 2);
  EXPECT_NE(bad.err.find("--engine-report brings the model"), std::string::npos) << bad.err;
}

TEST(LoadCli, OpenLoopForADuration) {
  load_test::StubOptions so;
  so.ttft_ms = 2;
  so.itl_ms = 1;
  load_test::StubServer stub(so);
  const auto d = cli_test::temp_dir("load-duration");
  const std::string js = (d / "u.json").string();
  const auto r = load("--url " + stub.url() + " --rate 100 --arrival constant --duration 0.3 " +
                      "--output 2 --metrics-url none --json " + js);
  ASSERT_EQ(r.code, 0) << r.err;
  const json j = read_json(js);
  EXPECT_EQ(j["requests"].size(), 30u);  // 0, 10, ..., 290 ms
  EXPECT_TRUE(j["load"]["requests"].is_null());
  EXPECT_LT(j["requests"].back()["intended_ms"].get<double>(), 300.0);
}

// Mooncake's hash_ids: requests naming the same 512-token block send the same tokens there.
TEST(LoadCli, TraceBlocksSharedByHashId) {
  load_test::StubOptions so;
  so.ttft_ms = 2;
  so.itl_ms = 1;
  load_test::StubServer stub(so);
  const auto d = cli_test::temp_dir("load-blocks");
  const std::string moon = (d / "m.jsonl").string();
  std::ofstream(moon)
      << R"({"timestamp": 0, "input_length": 1024, "output_length": 2, "hash_ids": [7, 8]})"
      << "\n"
      << R"({"timestamp": 10, "input_length": 1100, "output_length": 2, "hash_ids": [7, 9, 10]})"
      << "\n";
  const auto r = load("--url " + stub.url() + " --trace-replay " + moon + " --metrics-url none");
  ASSERT_EQ(r.code, 0) << r.err;
  const auto p = stub.stats().prompts;
  ASSERT_EQ(p.size(), 2u);
  ASSERT_EQ(p[0].size(), 1024u);
  ASSERT_EQ(p[1].size(), 1100u);
  EXPECT_TRUE(std::equal(p[0].begin(), p[0].begin() + 512, p[1].begin()));       // block 7
  EXPECT_FALSE(std::equal(p[0].begin() + 512, p[0].end(), p[1].begin() + 512));  // 8 vs 9
}

// Chat prompts of exact lengths: from a tokenizer.json, or sized by the server's /tokenize.
TEST(LoadCli, ChatPromptsSizedByATokenizer) {
  load_test::StubOptions so;
  so.ttft_ms = 2;
  so.itl_ms = 1;
  load_test::StubServer stub(so);
  const auto d = cli_test::temp_dir("load-tok");
  const std::string tj = (d / "tokenizer.json").string();
  const json tok = latprof::testing::tiny_tokenizer_json(latprof::testing::make_tiny_llama(1));
  std::ofstream(tj) << tok.dump();
  auto r = load("--url " + stub.url() + " --endpoint chat --tokenizer " + tj +
                " --input 20 --output 2 --requests 3 --metrics-url none");
  ASSERT_EQ(r.code, 0) << r.err;
  const auto t = latprof::tokenizer_from_json(tok, nullptr, "test");
  auto texts = stub.stats().chat_texts;
  ASSERT_EQ(texts.size(), 3u);
  for (const auto& text : texts) EXPECT_EQ(t->encode(text, true).size(), 20u) << text;
  EXPECT_NE(texts[0], texts[1]);

  stub.reset();
  r = load("--url " + stub.url() + " --endpoint chat --tokenizer server --input 20 --output 2 " +
           "--requests 2 --metrics-url none");
  ASSERT_EQ(r.code, 0) << r.err;
  texts = stub.stats().chat_texts;
  ASSERT_EQ(texts.size(), 2u);
  // the stub's /tokenize counts two tokens a word: 20 tokens are 10 words
  EXPECT_EQ(std::count(texts[0].begin(), texts[0].end(), ' ') + 1, 10) << texts[0];

  r = load("--url " + stub.url() + " --tokenizer server --requests 1");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("--tokenizer sizes chat prompts"), std::string::npos) << r.err;
}

// latprof compare of two load reports: percentile differences against bootstrap noise, the gate.
TEST(LoadCli, CompareLoadReports) {
  const auto d = cli_test::temp_dir("load-compare");
  auto run = [&](double ttft, const std::string& name) {
    load_test::StubOptions so;
    so.ttft_ms = ttft;
    so.itl_ms = 1;
    load_test::StubServer stub(so);
    const std::string path = (d / name).string();
    const auto r = load("--url " + stub.url() + " --concurrency 4 --requests 40 --output 3 " +
                        "--metrics-url none --json " + path);
    EXPECT_EQ(r.code, 0) << r.err;
    return path;
  };
  const std::string a = run(20, "a.json"), c = run(30, "c.json");
  // b: the same requests as a in another order (the same distribution: its differences must be
  // noise whatever the machine did between two runs)
  const std::string b = (d / "b.json").string();
  {
    json jb = read_json(a);
    std::reverse(jb["requests"].begin(), jb["requests"].end());
    std::ofstream(b) << jb.dump();
  }
  const std::string out = (d / "cmp.json").string();
  auto r = cli_test::latprof("compare " + a + " " + b + " " + c + " --json " + out);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("ttft_p50 (ms)"), std::string::npos) << r.out;
  std::ifstream in(out);
  const json j = json::parse(in);
  EXPECT_EQ(j["kind"], "latprof-compare-load");
  const json* ttft = nullptr;
  for (const auto& m : j["points"][0]["metrics"])
    if (m["name"] == "ttft_p50") ttft = &m;
  ASSERT_TRUE(ttft);
  EXPECT_EQ((*ttft)["noise"][1], true) << *ttft;   // the same requests
  EXPECT_EQ((*ttft)["noise"][2], false) << *ttft;  // 10 ms more TTFT
  EXPECT_NEAR((*ttft)["diff_pct"][2].get<double>(), 50.0, 10.0);

  r = cli_test::latprof("compare " + a + " " + c + " --fail-if-slower 10 --metric ttft");
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_NE(r.err.find("regression: ttft_p50 of c.json at concurrency 4 is"), std::string::npos)
      << r.err;
  r = cli_test::latprof("compare " + a + " " + b + " --fail-if-slower 10 --metric ttft");
  EXPECT_EQ(r.code, 0) << r.err;

  const std::string other = (d / "other.json").string();
  std::ofstream(other) << R"({"kind": "prediction"})";
  r = cli_test::latprof("compare " + a + " " + other);
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("not a latprof load report"), std::string::npos) << r.err;
  r = cli_test::latprof("compare " + a + " " + b + " --fail-if-slower 5 --metric mfu");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("is not a load metric"), std::string::npos) << r.err;
}

// Every report the tests above wrote validates against reports/schema/load-report.schema.json.
TEST(LoadCli, ReportsMatchTheirSchema) {
  std::ifstream sf(std::string(LATPROF_TEST_DIR) + "/../reports/schema/load-report.schema.json");
  const json schema = json::parse(sf);
  load_test::StubOptions so;
  so.ttft_ms = 3;
  so.itl_ms = 1;
  so.reply = [](int64_t seq) {
    return seq % 4 == 3 ? load_test::Reply::http_500 : load_test::Reply::ok;
  };
  load_test::StubServer stub(so);
  const auto d = cli_test::temp_dir("load-schema");
  const std::string dead = "http://127.0.0.1:" + std::to_string(load_test::dead_port());
  const std::vector<std::string> runs = {
      "--url " + stub.url() +
          " --concurrency 2 --requests 8 --output 3 --cost-model tiny --hw h100-sxm",
      "--url " + stub.url() + " --rate 100,inf --requests 6 --output 2 --metrics-url none",
      "--url " + stub.url() +
          " --find-max-rate --slo ttft:1s --rate-range 50:100 --requests 4 --output 2",
      "--url " + dead + " --model m --requests 2"};
  int n = 0;
  for (const auto& args : runs) {
    std::string name = "report";  // built in steps: GCC 12 warns (-Wrestrict) on "r" + ...
    name.append(std::to_string(n++)).append(".json");
    const std::string path = (d / name).string();
    const auto r = load(args + " --json " + path);
    EXPECT_TRUE(r.code == 0 || r.code == 1) << args << "\n" << r.err;
    const auto v = latprof::schema_violations(read_json(path), schema);
    std::string why;
    for (const auto& line : v) why.append(line).append("\n");
    EXPECT_TRUE(v.empty()) << args << ":\n" << why;
  }
  // and the schema is not vacuous: a wrong error kind, a negative chain part, a missing field
  json bad = read_json((d / "report3.json").string());
  bad["requests"][0]["error"]["kind"] = "Not A Kind";
  EXPECT_FALSE(latprof::schema_violations(bad, schema).empty());
  bad = read_json((d / "report0.json").string());
  bad["requests"][0]["chain_ms"]["network"] = -1.0;
  EXPECT_FALSE(latprof::schema_violations(bad, schema).empty());
  bad = read_json((d / "report0.json").string());
  bad["summary"].erase("chain_ms");
  EXPECT_FALSE(latprof::schema_violations(bad, schema).empty());
}

// SIGINT: no new requests, those in flight finish, the report is written, exit 130.
TEST(LoadCli, InterruptedRunKeepsItsReport) {
  load_test::StubOptions so;
  so.ttft_ms = 50;
  so.itl_ms = 10;
  load_test::StubServer stub(so);
  const auto d = cli_test::temp_dir("load-sigint");
  const std::string js = (d / "i.json").string(), code = (d / "code").string(),
                    err = (d / "err").string();
  const std::string cmd = "(" + cli_test::bin() + " load --url " + stub.url() +
                          " --rate 20 --duration 30 --output 5 --metrics-url none --json " + js +
                          " >/dev/null 2>" + err + " & pid=$!; sleep 1; kill -INT $pid; " +
                          "wait $pid; echo $? >" + code + ")";
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  EXPECT_EQ(cli_test::slurp(code), "130\n") << cli_test::slurp(err);
  EXPECT_NE(cli_test::slurp(err).find("interrupted by SIGINT"), std::string::npos);
  const json j = read_json(js);
  EXPECT_EQ(j["interrupted"], true);
  // about a second's worth at 20 req/s, every one finished (none cut off)
  EXPECT_GE(j["requests"].size(), 5u);
  EXPECT_LE(j["requests"].size(), 40u);
  EXPECT_EQ(j["summary"]["requests_failed"], 0);
}

// Coordinated omission: arrivals every 5 ms, one request at a time, each taking ~21 ms. TTFT
// from the actual send stays ~20 ms; from the intended send it grows with the backlog, and the
// client queue says where the time went.
TEST(LoadCli, FallingBehindIsReportedNotHidden) {
  load_test::StubOptions so;
  so.ttft_ms = 20;
  so.itl_ms = 1;
  load_test::StubServer stub(so);
  const auto d = cli_test::temp_dir("load-co");
  const std::string js = (d / "co.json").string();
  const auto r =
      load("--url " + stub.url() + " --rate 200 --arrival constant " +
           "--max-concurrency 1 --requests 10 --output 2 --metrics-url none --json " + js);
  ASSERT_EQ(r.code, 0) << r.err;
  const json j = read_json(js);
  const json& s = j["summary"];
  EXPECT_LT(s["ttft_ms"]["max"].get<double>(), 30.0);
  // the 10th request was due at 45 ms and sent after nine ~21 ms requests: ~145 ms late
  EXPECT_GT(s["ttft_from_intended_ms"]["max"].get<double>(), 120.0);
  EXPECT_GT(s["client_queue_ms"]["max"].get<double>(), 100.0);
  double prev = -1;
  for (const auto& q : j["requests"]) {  // the backlog only grows
    EXPECT_GE(q["client_queue_ms"].get<double>(), prev);
    prev = q["client_queue_ms"].get<double>();
    EXPECT_NEAR(q["ttft_from_intended_ms"].get<double>(),
                q["client_queue_ms"].get<double>() + q["ttft_ms"].get<double>(), 1e-6);
  }
}
