// Per-request records and the load summary on a hand-made case: every figure computed by hand.
#include <gtest/gtest.h>

#include "report/requests.hpp"

namespace latprof {
namespace {

RequestRecord rec(int64_t id, double arrival, std::vector<double> tokens, double finished,
                  double queue) {
  RequestRecord r;
  r.id = id;
  r.input_tokens = 10;
  r.output_tokens = int64_t(tokens.size());
  r.arrival_ms = arrival;
  r.token_ms = std::move(tokens);
  r.finished_ms = finished;
  r.queue_ms = queue;
  return r;
}

TEST(Requests, RecordFiguresFollowTheDefinitions) {
  const RequestRecord r = rec(1, 100, {300, 340, 400, 420}, 425, 50);
  EXPECT_DOUBLE_EQ(r.ttft_ms(), 200);
  EXPECT_DOUBLE_EQ(*r.tpot_ms(), 40);  // (420 - 300) / 3
  EXPECT_DOUBLE_EQ(r.e2e_ms(), 325);
  EXPECT_EQ(r.itl_ms(), (std::vector<double>{40, 60, 20}));
  const RequestRecord one = rec(2, 0, {80}, 81, 0);
  EXPECT_FALSE(one.tpot_ms());
  const auto j = request_to_json(one, {});
  EXPECT_TRUE(j["tpot_ms"].is_null());
  EXPECT_TRUE(j["classes_ms"].is_null());
  EXPECT_EQ(j["itl_ms"].size(), 0u);
}

TEST(Requests, GoodputCountsRequestsMeetingEverySlo) {
  // Four requests over 1 s (first arrival 0, last finish 1000 ms).
  std::vector<RequestRecord> rs = {
      rec(0, 0, {100, 120, 140}, 150, 10),     // ttft 100, tpot 20: meets both
      rec(1, 100, {700, 710, 720}, 730, 400),  // ttft 600: misses TTFT
      rec(2, 200, {300, 380, 460}, 470, 20),   // tpot 80: misses TPOT
      rec(3, 300, {400, 430}, 1000, 30),       // ttft 100, tpot 30: meets both
  };
  const workload::Slo slo = workload::Slo::parse("ttft:500ms,tpot:50ms");
  const LoadSummary s = summarize(rs, slo);
  EXPECT_EQ(s.requests, 4);
  EXPECT_DOUBLE_EQ(s.duration_s, 1.0);
  EXPECT_DOUBLE_EQ(s.request_throughput, 4.0);
  EXPECT_DOUBLE_EQ(s.output_tokens_per_s, 11.0);
  EXPECT_DOUBLE_EQ(s.goodput, 2.0);
  EXPECT_DOUBLE_EQ(s.slo_attainment, 0.5);
  EXPECT_EQ(s.ttft_ms.count, 4);
  EXPECT_DOUBLE_EQ(s.ttft_ms.p50, 100);  // 100, 100, 100, 600
  EXPECT_EQ(s.itl_ms.count, 2 + 2 + 2 + 1);
  EXPECT_DOUBLE_EQ(s.queue_ms.max, 400);
  // Without an SLO every request counts.
  EXPECT_DOUBLE_EQ(summarize(rs, {}).goodput, 4.0);
  const auto j = summary_to_json(s);
  EXPECT_EQ(j["slo"], "ttft:500ms,tpot:50ms");
  for (const char* k : {"count", "mean", "stddev", "min", "p50", "p90", "p95", "p99", "max"})
    EXPECT_TRUE(j["ttft_ms"].contains(k)) << k;
}

}  // namespace
}  // namespace latprof
