// `latprof run --requests`: latency under load in process, end to end on the tiny model. Each
// request's figures count from its arrival; the four latency classes add up to its E2E; the load
// shapes (rate, arrival process, length distributions, datasets) arrive as asked; bad load flags
// exit 2 with one line and write nothing.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "cli/cli_util.hpp"
#include "report/report_schema.hpp"
#include "report/schema_check.hpp"

namespace {

using cli_test::latprof;
using nlohmann::json;
namespace fs = std::filesystem;

json run(const std::string& args, const std::string& name) {
  const auto path = cli_test::temp_dir("load") / (name + ".json");
  fs::remove(path);
  const auto r =
      latprof("run --model tiny --quiet --threads 1 " + args + " --json " + path.string());
  EXPECT_EQ(r.code, 0) << r.err;
  if (r.code != 0) return json::object();
  return json::parse(cli_test::slurp(path.string()));
}

const json& by_id(const json& j, int64_t id) {
  for (const auto& q : j["requests"])
    if (q["id"] == id) return q;
  static const json none;
  ADD_FAILURE() << "no request " << id;
  return none;
}

TEST(RunRequests, EveryRequestsClassesAddUpToItsE2E) {
  const json j = run("--requests 12 --rate inf --input 16 --output 8", "classes");
  ASSERT_TRUE(j.contains("requests"));
  ASSERT_EQ(j["requests"].size(), 12u);
  EXPECT_EQ(j["summary"]["requests"], 12);
  EXPECT_EQ(j["load"]["requests"], 12);
  EXPECT_EQ(j["load"]["rate"], "inf");
  for (const auto& q : j["requests"]) {
    const double ttft = q["ttft_ms"], e2e = q["e2e_ms"], queue = q["queue_ms"];
    EXPECT_EQ(q["arrival_ms"], 0.0);  // rate inf: every request at once
    EXPECT_EQ(q["output_tokens"], 8);
    EXPECT_EQ(q["itl_ms"].size(), 7u);
    EXPECT_LE(queue, ttft);
    EXPECT_LE(ttft, e2e);
    const json& c = q["classes_ms"];
    const double sum = c["compute"].get<double>() + c["memory"].get<double>() +
                       c["communication"].get<double>() + c["scheduling"].get<double>();
    EXPECT_NEAR(sum, e2e, 1e-6 * e2e) << q.dump();
    EXPECT_GT(c["compute"].get<double>() + c["memory"].get<double>(), 0) << q.dump();
    EXPECT_EQ(c["communication"], 0.0);
    EXPECT_GE(c["scheduling"].get<double>(), 0.0);
  }
  // The stage table partitions the run, from the first arrival to the last token.
  double stages = 0;
  for (const auto& s : j["stages"]) stages += s["time_ms"].get<double>();
  EXPECT_NEAR(stages, j["load"]["duration_ms"].get<double>(), 1e-6);
  // Summary distributions come from the requests.
  double ttft_max = 0;
  for (const auto& q : j["requests"]) ttft_max = std::max(ttft_max, q["ttft_ms"].get<double>());
  EXPECT_DOUBLE_EQ(j["summary"]["ttft_ms"]["max"].get<double>(), ttft_max);
  EXPECT_EQ(j["summary"]["ttft_ms"]["count"], 12);
  EXPECT_EQ(j["summary"]["slo_attainment"], 1.0);  // no SLO: every request meets it
  // The report is valid against the published schema.
  const auto v = latprof::schema_violations(j, latprof::run_report_schema());
  EXPECT_TRUE(v.empty()) << v.front();
}

TEST(RunRequests, QueueTimeIsInsideTtftAndCountsAsScheduling) {
  // Two sequences at a time: requests 2 and 3 wait for 0 and 1 to finish.
  const json j = run("--requests 4 --rate inf --input 12 --output 6 --max-seqs 2", "queue");
  ASSERT_EQ(j["requests"].size(), 4u);
  const json &r0 = by_id(j, 0), &r2 = by_id(j, 2);
  const double e2e0 = r0["e2e_ms"], queue2 = r2["queue_ms"], ttft2 = r2["ttft_ms"];
  EXPECT_GE(queue2, e2e0 - 1e-6) << "request 2 started before a slot was free";
  EXPECT_GT(ttft2, queue2);
  EXPECT_GE(r2["classes_ms"]["scheduling"].get<double>(), queue2 - 1e-6);
  EXPECT_LE(j["run"]["batch"], 2);
}

TEST(RunRequests, ConstantArrivalsAreSpacedByTheRate) {
  const json j = run("--requests 5 --rate 50 --arrival constant --input 8 --output 3", "rate");
  ASSERT_EQ(j["requests"].size(), 5u);
  for (int i = 0; i < 5; ++i) EXPECT_NEAR(by_id(j, i)["arrival_ms"].get<double>(), 20.0 * i, 1e-9);
  // Nobody arrives before its time: each request's first token comes after its arrival.
  for (const auto& q : j["requests"]) EXPECT_GT(q["ttft_ms"].get<double>(), 0);
  EXPECT_GE(j["load"]["duration_ms"].get<double>(), 80.0);
}

TEST(RunRequests, LengthDistributionsAreSampledPerRequestAndRepeatable) {
  const std::string args = "--requests 16 --rate inf --input uniform:4:40 --output uniform:2:9";
  const json a = run(args, "dist_a"), b = run(args, "dist_b");
  std::set<int64_t> ins;
  for (const auto& q : a["requests"]) {
    const int64_t in = q["input_tokens"], out = q["output_tokens"];
    EXPECT_GE(in, 4);
    EXPECT_LE(in, 40);
    EXPECT_GE(out, 2);
    EXPECT_LE(out, 9);
    ins.insert(in);
    EXPECT_EQ(in, by_id(b, q["id"])["input_tokens"]);
    EXPECT_EQ(out, by_id(b, q["id"])["output_tokens"]);
  }
  EXPECT_GT(ins.size(), 4u) << "lengths did not vary";
  EXPECT_EQ(a["load"]["input"], "uniform:4:40");
}

TEST(RunRequests, DatasetLinesAreTheRequestsWithTheirArrivals) {
  const auto dir = cli_test::temp_dir("load");
  const std::string ds = (dir / "ds.jsonl").string();
  {
    std::ofstream f(ds);
    f << R"({"input_tokens": 10, "output_tokens": 4, "arrival_ms": 100})"
      << "\n"
      << R"({"prompt": "the same long prefix of words, then one", "output_tokens": 3, "arrival_ms": 110})"
      << "\n"
      << R"({"prompt": "the same long prefix of words, then two", "output_tokens": 5, "arrival_ms": 130})"
      << "\n";
  }
  const json j = run("--dataset " + ds, "dataset");
  ASSERT_EQ(j["requests"].size(), 3u);
  EXPECT_EQ(by_id(j, 0)["input_tokens"], 10);
  EXPECT_EQ(by_id(j, 0)["output_tokens"], 4);
  EXPECT_EQ(by_id(j, 2)["output_tokens"], 5);
  // Arrival times replayed relative to the first line's.
  EXPECT_NEAR(by_id(j, 1)["arrival_ms"].get<double>(), 10.0, 1e-9);
  EXPECT_NEAR(by_id(j, 2)["arrival_ms"].get<double>(), 30.0, 1e-9);
  EXPECT_EQ(j["load"]["dataset"], ds);
}

TEST(RunRequests, PrefixCacheServesSharedPrefixesWhenOn) {
  const auto dir = cli_test::temp_dir("load");
  const std::string ds = (dir / "prefix.jsonl").string();
  {
    std::ofstream f(ds);
    std::string prefix;
    for (int r = 0; r < 6; ++r)
      prefix += "a long shared system prompt that several requests begin with, ";
    for (int i = 0; i < 3; ++i)
      f << R"({"prompt": ")" << prefix << "question " << i
        << R"(", "output_tokens": 3, "arrival_ms": )" << 20 * i << "}\n";
  }
  const json off = run("--dataset " + ds, "prefix_off");
  const json on = run("--dataset " + ds + " --prefix-cache on", "prefix_on");
  ASSERT_EQ(on["requests"].size(), 3u);
  EXPECT_EQ(off["summary"]["prefix_hit_tokens"], 0);
  EXPECT_EQ(by_id(on, 0)["prefix_hit_tokens"], 0);  // nothing cached yet
  for (int i = 1; i < 3; ++i) {
    const int64_t hits = by_id(on, i)["prefix_hit_tokens"];
    EXPECT_GE(hits, 16) << "request " << i << " found no full block of the shared prefix";
    EXPECT_EQ(hits % 16, 0);  // whole blocks
    EXPECT_LT(hits, by_id(on, i)["input_tokens"].get<int64_t>());
  }
  EXPECT_GT(on["load"]["prefix_cache_hits"].get<int64_t>(), 0);
  EXPECT_EQ(on["load"]["prefix_cache"], true);
  // Fewer prompt tokens computed with the cache on.
  int64_t prefill_on = 0, prefill_off = 0;
  for (const auto& s : on["steps"]) prefill_on += s["prefill_tokens"].get<int64_t>();
  for (const auto& s : off["steps"]) prefill_off += s["prefill_tokens"].get<int64_t>();
  EXPECT_LT(prefill_on, prefill_off);
}

TEST(RunRequests, SloSetsGoodput) {
  const json easy = run("--requests 4 --rate inf --input 8 --output 4 --slo ttft:100s", "slo1");
  EXPECT_EQ(easy["summary"]["slo_attainment"], 1.0);
  EXPECT_EQ(easy["summary"]["slo"], "ttft:100000ms");  // normalized to ms
  EXPECT_EQ(easy["load"]["slo"], "ttft:100s");         // as given
  EXPECT_DOUBLE_EQ(easy["summary"]["goodput"].get<double>(),
                   easy["summary"]["request_throughput"].get<double>());
  const json hard = run("--requests 4 --rate inf --input 8 --output 4 --slo e2e:0.001ms", "slo2");
  EXPECT_EQ(hard["summary"]["slo_attainment"], 0.0);
  EXPECT_EQ(hard["summary"]["goodput"], 0.0);
  for (const auto& q : hard["requests"]) EXPECT_EQ(q["slo_met"], false);
}

TEST(RunRequests, TheTableShowsTheLoad) {
  const auto r =
      latprof("run --model tiny --quiet --threads 1 --requests 3 --rate inf --input 8 --output 3");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("latprof run --requests"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("class: scheduling"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("TTFT"), std::string::npos) << r.out;
}

struct BadCase {
  const char* args;
  const char* expect;
};
class BadRunRequests : public ::testing::TestWithParam<BadCase> {};

TEST_P(BadRunRequests, OneLineExitTwoNoFile) {
  const auto dir = cli_test::temp_dir("badload");
  const auto out = dir / "r.json";
  fs::remove(out);
  const auto r = latprof(std::string("run --model tiny --quiet ") + GetParam().args + " --json " +
                         out.string());
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_NE(r.err.find(GetParam().expect), std::string::npos) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_FALSE(fs::exists(out));
}

INSTANTIATE_TEST_SUITE_P(
    Cases, BadRunRequests,
    ::testing::Values(
        BadCase{"--input uniform:1:5", "takes --requests"}, BadCase{"--rate 5", "add --requests"},
        BadCase{"--slo ttft:1s", "add --requests"}, BadCase{"--requests 0", "--requests"},
        BadCase{"--requests 100001", "--requests"}, BadCase{"--requests 2 --rate -1", "rate"},
        BadCase{"--requests 2 --rate abc", "rate"},
        BadCase{"--requests 2 --arrival weird", "arrival"},
        BadCase{"--requests 2 --arrival gamma --burstiness 0", "--burstiness"},
        BadCase{"--requests 2 --input uniform:9:x", "--input"},
        BadCase{"--requests 2 --input 300 --output 300", "positions"},
        BadCase{"--requests 2 --slo bogus", "slo"}, BadCase{"--requests 2 --batch 2", "--batch"},
        BadCase{"--requests 2 --prompt hi", "--prompt"},
        BadCase{"--requests 2 --prefix-cache maybe", "--prefix-cache"},
        BadCase{"--dataset /nonexistent/ds.jsonl", "--dataset"},
        BadCase{"--dataset /etc/hostname --input 5", "drop --input"},
        BadCase{"--input 12abc", "--input must be a token count"}),
    [](const ::testing::TestParamInfo<BadCase>& i) { return "case" + std::to_string(i.index); });

}  // namespace
