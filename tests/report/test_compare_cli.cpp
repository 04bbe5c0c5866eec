// `latprof compare` end to end: the regression gate's exit codes, --json and --md, real FP16 and
// INT8 runs of the tiny model, and bad input (one-line error naming the file, exit 2).
#include <gtest/gtest.h>

#include "cli/cli_util.hpp"
#include "report/report_fixture.hpp"
#include "report/schema_check.hpp"

namespace {

using namespace latprof;
using cli_test::latprof;
using nlohmann::json;
namespace fs = std::filesystem;

fs::path dir() {
  return cli_test::temp_dir("compare");
}

std::string write_report(const std::string& name, const report_test::Fixture& f) {
  const auto p = dir() / name;
  report_test::write_text(p, report_to_json(report_test::make_report(f)).dump(2));
  return p.string();
}

int newlines(const std::string& s) {
  return int(std::count(s.begin(), s.end(), '\n'));
}

TEST(CompareCli, GateExitCodes) {
  report_test::Fixture f;
  const std::string base = write_report("base.json", f);
  f.slowdown = 1.10;
  const std::string slow = write_report("slow.json", f);
  auto r = latprof("compare " + base + " " + slow);
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("slow.json vs base.json"), std::string::npos) << r.out;
  r = latprof("compare " + base + " " + slow + " --fail-if-slower 20");
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("pass"), std::string::npos);
  r = latprof("compare " + base + " " + slow + " --fail-if-slower 5");
  EXPECT_EQ(r.code, 1) << r.out << r.err;
  EXPECT_NE(r.err.find("regression: e2e_ms of slow.json is 10.0% worse than base.json"),
            std::string::npos)
      << r.err;
  EXPECT_EQ(newlines(r.err), 1) << r.err;
  EXPECT_NE(r.out.find("FAIL"), std::string::npos);
  // The other way round it is faster: passes.
  EXPECT_EQ(latprof("compare " + slow + " " + base + " --fail-if-slower 0").code, 0);
  // On a rate metric.
  EXPECT_EQ(
      latprof("compare " + base + " " + slow + " --fail-if-slower 5 --metric decode_tokens_per_s")
          .code,
      1);
  EXPECT_EQ(latprof("compare " + base + " " + slow + " --fail-if-slower 5 --metric ttft").code, 1);
}

TEST(CompareCli, JsonAndMarkdownOutputs) {
  report_test::Fixture f;
  const std::string a = write_report("fp16.json", f);
  f.dtype = "int8";
  const std::string b = write_report("int8.json", f);
  const auto js = dir() / "cmp.json", md = dir() / "cmp.md";
  const auto r =
      latprof("compare " + a + " " + b + " --json " + js.string() + " --md " + md.string());
  ASSERT_EQ(r.code, 0) << r.err;
  const json j = json::parse(cli_test::slurp(js.string()));
  EXPECT_EQ(j["baseline"], "fp16.json");
  EXPECT_EQ(j["reports"][1]["label"], "int8.json");
  EXPECT_TRUE(j["gate"].is_null());
  const std::string m = cli_test::slurp(md.string());
  EXPECT_NE(m.find("| stage | fp16.json | bound | int8.json | bound |"), std::string::npos) << m;
}

TEST(CompareCli, RealFp16AndInt8RunsOfTiny) {
  const auto a = dir() / "run-fp16.json", b = dir() / "run-int8.json";
  for (const auto& [p, dt] : {std::pair{a, "fp16"}, std::pair{b, "int8"}}) {
    const auto r = latprof("run --model tiny --input 16 --output 8 --repeat 3 --quiet --dtype " +
                           std::string(dt) + " --json " + p.string());
    ASSERT_EQ(r.code, 0) << r.err;
    const auto v =
        schema_violations(json::parse(cli_test::slurp(p.string())), load_run_report_schema());
    EXPECT_TRUE(v.empty()) << v[0];
  }
  const auto js = dir() / "run-cmp.json";
  const auto r = latprof("compare " + a.string() + " " + b.string() + " --json " + js.string());
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("run-int8.json vs run-fp16.json:"), std::string::npos) << r.out;
  const json j = json::parse(cli_test::slurp(js.string()));
  // Deterministic signs: the cost model gives INT8 fewer weight bytes, so a higher decode
  // intensity; times on a shared machine may be noise, but each row's speed-up and difference
  // agree in sign, and the noise flag follows the rule.
  const json ra = json::parse(cli_test::slurp(a.string())),
             rb = json::parse(cli_test::slurp(b.string()));
  EXPECT_LT(rb["stages"][2]["weight_bytes"].get<double>(),
            ra["stages"][2]["weight_bytes"].get<double>());
  for (const auto& s : j["stages"]) {
    const json& d = s["vs_baseline"][1];
    if (d.is_null() || d["speedup"].is_null()) continue;
    if (d["diff"].get<double>() < 0) {
      EXPECT_GT(d["speedup"].get<double>(), 1) << s.dump();
    }
    if (d["diff"].get<double>() > 0) {
      EXPECT_LT(d["speedup"].get<double>(), 1) << s.dump();
    }
    if (d["spread_known"].get<bool>()) {
      const double lim = 2 * std::hypot(s["sigma"][0].get<double>(), s["sigma"][1].get<double>());
      EXPECT_EQ(d["noise"].get<bool>(), std::fabs(d["diff"].get<double>()) <= lim) << s.dump();
    }
  }
  // Same configuration: no warning but those on the machine's state, which a shared machine may
  // change between the two runs (its memory bandwidth, its cores' distance, a run that changed
  // speed inside it, time it took from a run's threads: another test running alongside does).
  for (const auto& w : j["warnings"]) {
    const std::string t = w.get<std::string>();
    EXPECT_TRUE(t.starts_with("the runs ran at different memory bandwidths") ||
                t.starts_with("the runs had their threads' cores at different distances") ||
                t.find("decode steps changed speed") != std::string::npos ||
                t.starts_with("the machine took time from the runs' decode steps"))
        << t;
  }
}

void expect_bad(const std::string& file, const std::string& content, const std::string& what) {
  const auto p = dir() / file;
  report_test::write_text(p, content);
  const std::string good = write_report("good.json", {});
  const auto r = latprof("compare " + good + " " + p.string());
  EXPECT_EQ(r.code, 2) << r.out << r.err;
  EXPECT_EQ(newlines(r.err), 1) << r.err;
  EXPECT_NE(r.err.find(p.string()), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(what), std::string::npos) << r.err;
  EXPECT_TRUE(r.out.empty()) << r.out;
}

TEST(CompareCli, BadInput) {
  expect_bad("not-a-report.json", "{\"traceEvents\": []}\n", "not a latprof run report");
  json newer = report_to_json(report_test::make_report());
  newer["schema_version"] = "2.0";
  expect_bad("newer.json", newer.dump(), "schema version 2.0 is not supported");
  const std::string full = report_to_json(report_test::make_report()).dump(2);
  expect_bad("truncated.json", full.substr(0, full.size() / 2), "not valid JSON");
  expect_bad("empty.json", "", "not valid JSON");
  const auto r = latprof("compare " + (dir() / "missing.json").string() + " " +
                         (dir() / "good.json").string());
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("missing.json"), std::string::npos) << r.err;
  EXPECT_EQ(latprof("compare " + (dir() / "good.json").string()).code, 2);
  const auto m = latprof("compare " + (dir() / "good.json").string() + " " +
                         (dir() / "good.json").string() + " --fail-if-slower 5 --metric speed");
  EXPECT_EQ(m.code, 2);
  EXPECT_NE(m.err.find("--metric speed is not a metric"), std::string::npos) << m.err;
}

}  // namespace
