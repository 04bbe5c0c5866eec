// Load shapes: arrival processes spread as asked (computed, no sleeping), length distributions,
// datasets and SLO thresholds, with their refusals.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <numeric>

#include "cli/cli_util.hpp"
#include "core/error.hpp"
#include "core/workload.hpp"

namespace latprof::workload {
namespace {

struct GapStats {
  double mean = 0, cv = 0;
};
GapStats gaps(const std::vector<double>& t) {
  std::vector<double> g;
  for (size_t i = 1; i < t.size(); ++i) g.push_back(t[i] - t[i - 1]);
  GapStats s;
  s.mean = std::accumulate(g.begin(), g.end(), 0.0) / double(g.size());
  double v = 0;
  for (double x : g) v += (x - s.mean) * (x - s.mean);
  s.cv = std::sqrt(v / double(g.size())) / s.mean;
  return s;
}

TEST(Arrivals, PoissonGammaAndConstantHaveTheAskedRateAndSpread) {
  const int64_t n = 40000;
  const auto p = arrival_times(n, 20.0, Arrival::poisson, 1.0, 1);
  EXPECT_EQ(p.front(), 0.0);
  EXPECT_TRUE(std::is_sorted(p.begin(), p.end()));
  const GapStats ps = gaps(p);
  EXPECT_NEAR(ps.mean, 50.0, 50.0 * 0.03);  // 1/rate: 50 ms
  EXPECT_NEAR(ps.cv, 1.0, 0.03);            // exponential: stddev = mean
  const GapStats gs = gaps(arrival_times(n, 20.0, Arrival::gamma, 0.25, 2));
  EXPECT_NEAR(gs.mean, 50.0, 50.0 * 0.05);
  EXPECT_NEAR(gs.cv, 2.0, 0.1);  // gamma: cv = 1 / sqrt(shape)
  const auto c = arrival_times(5, 4.0, Arrival::constant, 1.0, 3);
  EXPECT_EQ(c, (std::vector<double>{0, 250, 500, 750, 1000}));
  const auto all = arrival_times(3, parse_rate("inf"), Arrival::poisson, 1.0, 4);
  EXPECT_EQ(all, (std::vector<double>{0, 0, 0}));
  // The same seed gives the same times; another seed others.
  EXPECT_EQ(arrival_times(10, 5, Arrival::poisson, 1, 7),
            arrival_times(10, 5, Arrival::poisson, 1, 7));
  EXPECT_NE(arrival_times(10, 5, Arrival::poisson, 1, 7),
            arrival_times(10, 5, Arrival::poisson, 1, 8));
}

TEST(Arrivals, BadRatesAndProcessesAreUsageErrors) {
  for (const char* r : {"0", "-1", "nan", "abc", "", "1e999"})
    EXPECT_THROW(parse_rate(r), UsageError) << r;
  EXPECT_DOUBLE_EQ(parse_rate("2.5"), 2.5);
  EXPECT_THROW(parse_arrival("uniform"), UsageError);
  EXPECT_THROW(arrival_times(3, 1.0, Arrival::gamma, 0.0, 1), UsageError);
}

TEST(Lengths, ConstantsAndDistributionsClampedToOneAndTheCap) {
  std::mt19937_64 rng(5);
  EXPECT_EQ(LengthDist::parse("300", "--input").sample(rng, 1000), 300);
  EXPECT_EQ(LengthDist::parse("300", "--input").sample(rng, 100), 100);
  const LengthDist u = LengthDist::parse("uniform:100:500", "--input");
  int64_t lo = 1 << 30, hi = 0;
  for (int i = 0; i < 5000; ++i) {
    const int64_t v = u.sample(rng, 4096);
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
  EXPECT_EQ(lo, 100);
  EXPECT_EQ(hi, 500);
  const LengthDist nd = LengthDist::parse("normal:3:50", "--output");
  for (int i = 0; i < 2000; ++i) EXPECT_GE(nd.sample(rng, 4096), 1);
  EXPECT_EQ(nd.describe(), "normal:3:50");
  EXPECT_EQ(u.upper(), 500);
  for (const char* bad : {"0", "-5", "1.5", "uniform:5", "uniform:9:3", "uniform:0:3", "normal:0:1",
                          "zipf:1:2", "", "abc", "1e99"}) {
    try {
      LengthDist::parse(bad, "--input");
      ADD_FAILURE() << bad << " accepted";
    } catch (const UsageError& e) {
      EXPECT_NE(std::string(e.what()).find("--input"), std::string::npos) << e.what();
    }
  }
}

TEST(Dataset, ReadsTokensPromptsAndArrivalsAndNamesTheBadLine) {
  const auto dir = cli_test::temp_dir("dataset");
  const std::string good = (dir / "good.jsonl").string();
  {
    std::ofstream o(good);
    o << R"({"input_tokens": 12, "output_tokens": 4})"
      << "\n\n"
      << R"({"prompt": "Hello there", "output_tokens": 2, "arrival_ms": 150.5})"
      << "\n";
  }
  const auto d = read_dataset(good, 100);
  ASSERT_EQ(d.size(), 2u);
  EXPECT_EQ(d[0].input_tokens, 12);
  EXPECT_EQ(d[1].prompt, "Hello there");
  EXPECT_DOUBLE_EQ(*d[1].arrival_ms, 150.5);
  EXPECT_EQ(read_dataset(good, 1).size(), 1u);
  const std::pair<const char*, const char*> cases[] = {
      {"{\"output_tokens\": 3}", ":1: missing \"input_tokens\""},
      {"{\"input_tokens\": 3}", ":1: missing \"output_tokens\""},
      {"{\"input_tokens\": 0, \"output_tokens\": 3}", "\"input_tokens\" must be"},
      {"{\"input_tokens\": 2.5, \"output_tokens\": 3}", "\"input_tokens\" must be"},
      {"[1, 2]", "not a JSON object"},
      {"{\"prompt\": 5, \"output_tokens\": 3}", "\"prompt\" must be"},
      {"{\"input_tokens\": 2, \"output_tokens\": 3, \"arrival_ms\": -1}", "\"arrival_ms\""},
      {"not json", "not a JSON object"},
      {"", "holds no requests"},
  };
  for (const auto& [text, want] : cases) {
    const std::string p = (dir / "bad.jsonl").string();
    {
      std::ofstream o(p);
      o << text << "\n";
    }
    try {
      read_dataset(p, 10);
      ADD_FAILURE() << text << " accepted";
    } catch (const UsageError& e) {
      EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
    }
  }
  EXPECT_THROW(read_dataset((dir / "missing.jsonl").string(), 10), UsageError);
}

TEST(Slo, ParsesUnitsAndJudgesRequests) {
  const Slo s = Slo::parse("ttft:500ms,tpot:0.05s,itl:80ms");
  EXPECT_DOUBLE_EQ(*s.ttft_ms, 500);
  EXPECT_DOUBLE_EQ(*s.tpot_ms, 50);
  EXPECT_FALSE(s.e2e_ms);
  EXPECT_TRUE(s.met(400, 40.0, {30, 79}, 9999));
  EXPECT_FALSE(s.met(501, 40.0, {30}, 1));       // TTFT
  EXPECT_FALSE(s.met(400, 51.0, {30}, 1));       // TPOT
  EXPECT_FALSE(s.met(400, 40.0, {30, 81}, 1));   // one gap over the ITL threshold
  EXPECT_TRUE(s.met(400, std::nullopt, {}, 1));  // one token: no TPOT, no gaps
  EXPECT_EQ(s.describe(), "ttft:500ms,tpot:50ms,itl:80ms");
  for (const char* bad :
       {"ttft", "ttft:5", "ttft:-5ms", "foo:5ms", "ttft:5ms,ttft:6ms", "ttft:xms", ""})
    EXPECT_THROW(Slo::parse(bad), UsageError) << bad;
}

}  // namespace
}  // namespace latprof::workload
