// compare_reports: signs of the differences, the noise rule, bound changes, warnings, the gate
// and the text, Markdown and JSON printers.
#include <gtest/gtest.h>

#include "core/error.hpp"
#include "report/compare.hpp"
#include "report/report_fixture.hpp"

namespace {

using namespace latprof;
using report_test::Fixture;
using report_test::make_report;

const CompareLine& line(const std::vector<CompareLine>& ls, const std::string& name,
                        const std::string& stage = "") {
  for (const auto& l : ls)
    if (l.name == name && l.stage == stage) return l;
  throw std::runtime_error("no line " + stage + "/" + name);
}

Fixture with_dtype(const char* d) {
  Fixture f;
  f.dtype = d;
  return f;
}

TEST(ExpectedNormalRange, MatchesTippettsTable) {
  // Tippett (1925) / ASTM control-chart constants d2.
  EXPECT_NEAR(expected_normal_range(2), 1.128, 1e-3);
  EXPECT_NEAR(expected_normal_range(3), 1.693, 1e-3);
  EXPECT_NEAR(expected_normal_range(5), 2.326, 1e-3);
  EXPECT_NEAR(expected_normal_range(10), 3.078, 1e-3);
}

TEST(Compare, Int8AgainstFp16HasTheExpectedSigns) {
  const RunReport fp16 = make_report(with_dtype("fp16"));
  const RunReport int8 = make_report(with_dtype("int8"));
  const Comparison c = compare_reports({fp16, int8}, {{"fp16.json", "int8.json"}});
  ASSERT_EQ(c.labels.size(), 2u);
  // INT8 reads half the weight bytes: the memory-bound decode gets faster.
  const CompareLine& dec = line(c.stages, "decode");
  EXPECT_LT(dec.deltas[1].diff, 0);
  EXPECT_GT(dec.deltas[1].speedup, 1.5);
  EXPECT_FALSE(dec.deltas[1].noise);
  EXPECT_EQ(dec.cells[1].bound, "memory");
  const CompareLine& tpot = line(c.metrics, "tpot_ms");
  EXPECT_LT(tpot.deltas[1].diff, 0);
  EXPECT_GT(tpot.deltas[1].speedup, 1);
  const CompareLine& tps = line(c.metrics, "decode_tokens_per_s");
  EXPECT_TRUE(tps.higher_is_better);
  EXPECT_GT(tps.deltas[1].diff, 0);
  EXPECT_GT(tps.deltas[1].speedup, 1);
  EXPECT_NEAR(tps.deltas[1].speedup, tpot.deltas[1].speedup, 1e-9);
  // Ops matched by stage and name: the decode matmuls are faster.
  const CompareLine& qkv = line(c.ops, "qkv_proj", "decode");
  EXPECT_TRUE(qkv.deltas[1].present);
  EXPECT_LT(qkv.deltas[1].diff, 0);
  EXPECT_NE(&line(c.ops, "qkv_proj", "prefill"), &qkv);
  // Same shape, same machine: no warnings.
  EXPECT_TRUE(c.warnings.empty()) << c.warnings[0];
  ASSERT_EQ(c.verdicts.size(), 1u);
  EXPECT_NE(c.verdicts[0].find("int8.json vs fp16.json"), std::string::npos) << c.verdicts[0];
  EXPECT_NE(c.verdicts[0].find("faster, still memory-bound, at "), std::string::npos)
      << c.verdicts[0];
  EXPECT_NE(c.verdicts[0].find("of roofline"), std::string::npos);
}

TEST(Compare, VerdictFiguresAreComputed) {
  const RunReport a = make_report(with_dtype("fp16"));
  const RunReport b = make_report(with_dtype("int8"));
  const Comparison c = compare_reports({a, b});
  const CompareLine& dec = line(c.stages, "decode");
  char want[64];
  std::snprintf(want, sizeof want, "decode %.2fx faster", dec.deltas[1].speedup);
  EXPECT_NE(c.verdicts[0].find(want), std::string::npos) << c.verdicts[0];
  // Default labels are the dtypes when they differ.
  EXPECT_EQ(c.labels[0], "fp16");
  EXPECT_EQ(c.labels[1], "int8");
}

TEST(Compare, SameConfigurationWithinSpreadIsNoise) {
  Fixture f;
  f.jitter = 0.05;
  const RunReport a = make_report(f);
  f.slowdown = 1.02;  // 2% apart, repeats spread +-5%
  const RunReport b = make_report(f);
  const Comparison c = compare_reports({a, b});
  for (const auto* ls : {&c.metrics, &c.stages, &c.ops})
    for (const auto& l : *ls) {
      if (!l.deltas[1].present || l.cells[0].value == 0) continue;
      EXPECT_TRUE(l.deltas[1].spread_known) << l.name;
      EXPECT_TRUE(l.deltas[1].noise) << l.stage << "/" << l.name;
    }
  EXPECT_NE(c.verdicts[0].find("end-to-end unchanged"), std::string::npos) << c.verdicts[0];
  EXPECT_NE(c.verdicts[0].find("decode unchanged"), std::string::npos) << c.verdicts[0];
}

TEST(Compare, DifferenceBeyondSpreadIsAChange) {
  Fixture f;
  f.jitter = 0.01;
  const RunReport a = make_report(f);
  f.slowdown = 1.25;
  const RunReport b = make_report(f);
  const Comparison c = compare_reports({a, b});
  const CompareLine& e2e = line(c.metrics, "e2e_ms");
  EXPECT_FALSE(e2e.deltas[1].noise);
  EXPECT_GT(e2e.deltas[1].diff, 0);
  EXPECT_NEAR(e2e.deltas[1].speedup, 1 / 1.25, 1e-9);
  // The rule at its edge: |diff| <= 2 sqrt(sa^2 + sb^2).
  const double lim = 2 * std::hypot(e2e.cells[0].sigma, e2e.cells[1].sigma);
  EXPECT_GT(std::fabs(e2e.deltas[1].diff), lim);
  EXPECT_NE(c.verdicts[0].find("1.25x slower"), std::string::npos) << c.verdicts[0];
}

TEST(Compare, RowSpreadIsTheRangeOverD2) {
  Fixture f;
  f.repeat = 4;
  const RunReport a = make_report(f);
  const Comparison c = compare_reports({a, a});
  const CompareLine& d = line(c.stages, "decode");
  const Row& row = a.stages[2];
  EXPECT_NEAR(d.cells[0].sigma, (row.time_max_ms - row.time_min_ms) / expected_normal_range(4),
              1e-12);
  EXPECT_TRUE(d.deltas[1].noise);
  EXPECT_EQ(d.deltas[1].diff, 0);
}

TEST(Compare, OneRepeatHasNoKnownSpread) {
  Fixture f;
  f.repeat = 1;
  const RunReport a = make_report(f);
  const RunReport b = make_report(f);
  const Comparison c = compare_reports({a, b});
  EXPECT_FALSE(line(c.metrics, "e2e_ms").deltas[1].spread_known);
  EXPECT_FALSE(line(c.metrics, "e2e_ms").deltas[1].noise);
  bool warned = false;
  for (const auto& w : c.warnings) warned = warned || w.find("1 repeat") != std::string::npos;
  EXPECT_TRUE(warned);
  EXPECT_NE(compare_text(c).find("?"), std::string::npos);
}

TEST(Compare, DifferentModelsAndMachinesWarn) {
  Fixture f;
  const RunReport a = make_report(f);
  f.model = "tinyllama-1.1b";
  f.hostname = "other-host";
  f.input = 32;
  const RunReport b = make_report(f);
  const Comparison c = compare_reports({a, b}, {{"a.json", "b.json"}});
  std::string all;
  for (const auto& w : c.warnings) all += w + "\n";
  EXPECT_NE(all.find("model: tiny (a.json), tinyllama-1.1b (b.json)"), std::string::npos) << all;
  EXPECT_NE(all.find("machine (hostname): test-host (a.json), other-host (b.json)"),
            std::string::npos)
      << all;
  EXPECT_NE(all.find("input tokens"), std::string::npos) << all;
  EXPECT_EQ(all.find("backend"), std::string::npos) << all;
  EXPECT_NE(compare_text(c).find("warning: the reports differ in model"), std::string::npos);
}

// The warnings of comparing x (fp16.json) and y (int8.json), a line each.
std::string warnings(const RunReport& x, const RunReport& y) {
  std::string all;
  for (const auto& w : compare_reports({x, y}, {{"fp16.json", "int8.json"}}).warnings)
    all += w + "\n";
  return all;
}

// A run whose decode steps lost a noticeable share of their time off the CPUs makes the comparison
// say so, with each run's figures; below 5% in every report, or unmeasured in one, nothing.
TEST(Compare, TimeTheMachineTookFromARunWarns) {
  RunReport a = make_report(with_dtype("fp16")), b = make_report(with_dtype("int8"));
  a.metrics.decode_offcpu_ms = 0.4;
  a.metrics.decode_offcpu_share = 0.006;
  b.metrics.decode_offcpu_ms = 3.03;
  b.metrics.decode_offcpu_share = 0.08;
  const std::string all = warnings(a, b);
  EXPECT_NE(all.find("the machine took time from the runs' decode steps"), std::string::npos)
      << all;
  EXPECT_NE(all.find("400.0 us a step, 0.6% (fp16.json), 3.03 ms a step, 8.0% (int8.json)"),
            std::string::npos)
      << all;
  RunReport quiet = b;
  quiet.metrics.decode_offcpu_share = 0.03;
  EXPECT_EQ(warnings(a, quiet).find("the machine took"), std::string::npos);
  RunReport unmeasured = a;  // e.g. a CUDA run
  unmeasured.metrics.decode_offcpu_ms = unmeasured.metrics.decode_offcpu_share = -1;
  EXPECT_EQ(warnings(unmeasured, b).find("the machine took"), std::string::npos);
}

// Runs that met the machine in different states (a VM's memory bandwidth and the distance between
// its vCPUs change from one minute to the next) are not comparable as they are: said once each;
// within 20% and 2x, or unmeasured in one report, nothing.
TEST(Compare, RunsInDifferentMachineStatesWarn) {
  RunReport a = make_report(with_dtype("fp16")), b = make_report(with_dtype("int8"));
  a.ceilings.mem_bw_bytes_per_s = 37.2e9;
  b.ceilings.mem_bw_bytes_per_s = 63.4e9;
  a.ceilings_info = {{"core_to_core_ns_before", 31.0}};
  b.ceilings_info = {{"core_to_core_ns_before", 158.4}};
  b.checks.push_back({"warning", "decode_step_ms", "the decode steps ran at two speeds"});
  const std::string all = warnings(a, b);
  EXPECT_NE(all.find("different memory bandwidths (each the mean of the reads around it): 37.2 "
                     "GB/s (fp16.json), 63.4 GB/s (int8.json)"),
            std::string::npos)
      << all;
  EXPECT_NE(all.find("cores at different distances (a cache line's trip, before each run): 31.0 "
                     "ns (fp16.json), 158.4 ns (int8.json)"),
            std::string::npos)
      << all;
  EXPECT_NE(all.find("int8.json's decode steps changed speed"), std::string::npos) << all;
  RunReport c = b;
  c.ceilings.mem_bw_bytes_per_s = 42e9;                  // 13% from a's
  c.ceilings_info = {{"core_to_core_ns_before", 55.0}};  // under 2x a's
  c.checks.clear();
  const std::string none = warnings(a, c);
  EXPECT_EQ(none.find("memory bandwidths"), std::string::npos) << none;
  EXPECT_EQ(none.find("distances"), std::string::npos) << none;
  EXPECT_EQ(none.find("changed speed"), std::string::npos) << none;
  c.ceilings_info = nlohmann::json::object();  // not measured: nothing to compare
  EXPECT_EQ(warnings(b, c).find("distances"), std::string::npos);
}

TEST(Compare, BoundChangeIsMarked) {
  RunReport a = make_report();
  RunReport b = a;
  for (auto& s : b.stages)
    if (s.name == "prefill") s.bound = "compute";
  const Comparison c = compare_reports({a, b});
  EXPECT_TRUE(line(c.stages, "prefill").deltas[1].bound_changed);
  EXPECT_FALSE(line(c.stages, "decode").deltas[1].bound_changed);
  EXPECT_NE(compare_text(c).find("compute*"), std::string::npos);
  EXPECT_NE(c.verdicts[0].find("now compute-bound (was memory-bound)"), std::string::npos)
      << c.verdicts[0];
}

TEST(Compare, OpsMissingInOneReportAreShownAbsent) {
  RunReport a = make_report();
  RunReport b = a;
  b.ops.erase(
      std::remove_if(b.ops.begin(), b.ops.end(), [](const Row& r) { return r.name == "rope"; }),
      b.ops.end());
  const Comparison c = compare_reports({a, b});
  const CompareLine& rope = line(c.ops, "rope", "decode");
  EXPECT_TRUE(rope.cells[0].present);
  EXPECT_FALSE(rope.cells[1].present);
  EXPECT_FALSE(rope.deltas[1].present);
}

TEST(Compare, GateOnTheChosenMetric) {
  Fixture f;
  const RunReport a = make_report(f);
  f.slowdown = 1.10;
  const RunReport b = make_report(f);
  CompareOptions o;
  o.fail_if_slower_pct = 5;
  Comparison c = compare_reports({a, b}, o);
  EXPECT_TRUE(c.gate.enabled);
  EXPECT_EQ(c.gate.metric, "e2e_ms");
  EXPECT_NEAR(c.gate.slower_pct[1], 10, 1e-6);
  EXPECT_TRUE(c.gate.any_failed());
  EXPECT_NE(gate_failure_message(c).find("10.0% worse"), std::string::npos);
  o.fail_if_slower_pct = 15;
  EXPECT_FALSE(compare_reports({a, b}, o).gate.any_failed());
  // Faster: passes with any limit; a rate metric counts lower as worse.
  o.fail_if_slower_pct = 0;
  EXPECT_FALSE(compare_reports({b, a}, o).gate.any_failed());
  o.gate_metric = "decode_tokens_per_s";
  c = compare_reports({a, b}, o);
  EXPECT_GT(c.gate.slower_pct[1], 0);
  EXPECT_TRUE(c.gate.any_failed());
  o.gate_metric = "tpot";
  EXPECT_EQ(compare_reports({a, b}, o).gate.metric, "tpot_ms");
  o.gate_metric = "latency";
  EXPECT_THROW(compare_reports({a, b}, o), UsageError);
}

// Two KV-cache types at one dtype are told apart by the label, and the JSON names both types.
TEST(Compare, KvCacheTypeInTheLabel) {
  const RunReport a = make_report(with_dtype("fp16"));
  RunReport b = make_report(with_dtype("fp16"));
  b.run.kv_dtype = "bf16";
  const Comparison c = compare_reports({a, b});
  EXPECT_EQ(c.labels[0], "fp16");
  EXPECT_EQ(c.labels[1], "fp16 kv-bf16");
  const nlohmann::json j = compare_json(c);
  EXPECT_EQ(j["reports"][0]["kv_dtype"], "fp16");
  EXPECT_EQ(j["reports"][1]["kv_dtype"], "bf16");
}

TEST(Compare, EachLaterReportAgainstTheFirst) {
  const RunReport a = make_report(with_dtype("fp16"));
  const RunReport b = make_report(with_dtype("int8"));
  Fixture f;
  f.slowdown = 2;
  const RunReport c3 = make_report(f);
  CompareOptions o;
  o.fail_if_slower_pct = 50;
  const Comparison c = compare_reports({a, b, c3}, o);
  EXPECT_EQ(c.labels[2], "fp16 #3");
  EXPECT_EQ(c.verdicts.size(), 2u);
  EXPECT_FALSE(c.gate.failed[1]);
  EXPECT_TRUE(c.gate.failed[2]);
  EXPECT_NE(compare_text(c).find("diff 2"), std::string::npos);
}

TEST(Compare, NeedsTwoReports) {
  EXPECT_THROW(compare_reports({make_report()}), UsageError);
}

TEST(Compare, JsonAndMarkdown) {
  const RunReport a = make_report(with_dtype("fp16"));
  const RunReport b = make_report(with_dtype("int8"));
  CompareOptions o;
  o.fail_if_slower_pct = 1;
  const nlohmann::json j = compare_json({a, b}, o);
  EXPECT_EQ(j["kind"], "latprof-compare");
  EXPECT_EQ(j["reports"].size(), 2u);
  EXPECT_EQ(j["metrics"].size(), metric_fields().size());
  EXPECT_EQ(j["stages"].size(), a.stages.size());
  EXPECT_TRUE(j["stages"][0]["vs_baseline"][0].is_null());
  bool found = false;
  for (const auto& s : j["stages"])
    if (s["name"] == "decode") {
      found = true;
      EXPECT_LT(s["vs_baseline"][1]["diff"].get<double>(), 0);
      EXPECT_EQ(s["bound"][1], "memory");
      EXPECT_FALSE(s["vs_baseline"][1]["noise"].get<bool>());
    }
  EXPECT_TRUE(found);
  EXPECT_FALSE(j["gate"]["failed"].get<bool>());
  EXPECT_EQ(j["verdicts"].size(), 1u);
  // No NaN or Infinity in the text (nlohmann writes them as null).
  EXPECT_EQ(j.dump().find("NaN"), std::string::npos);

  const std::string md = compare_markdown(compare_reports({a, b}));
  EXPECT_NE(md.find("## Metrics"), std::string::npos);
  EXPECT_NE(md.find("| metric | fp16 | int8 | diff | speed-up | note |"), std::string::npos) << md;
  EXPECT_NE(md.find("| ---: |"), std::string::npos);
  EXPECT_NE(md.find("## Verdict"), std::string::npos);
}

TEST(Compare, TextHasTheThreeTables) {
  const std::string t =
      compare_text({make_report(with_dtype("fp16")), make_report(with_dtype("int8"))});
  for (const char* s : {"metric", "ttft_ms", "itl_p99_ms", "mbu", "stage", "bound", "qkv_proj",
                        "speed-up", "int8 vs fp16:"})
    EXPECT_NE(t.find(s), std::string::npos) << s << "\n" << t;
}

}  // namespace
