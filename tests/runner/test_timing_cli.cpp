// The timing method of `latprof run` (README, "What is measured, and how"), end to end on the
// tiny model: per-token times on one host clock, TTFT/TPOT/ITL/E2E as defined, stage rows that
// add up to the E2E of the repeat they come from, warm-up at the timed shape, default repeats.
#include <gtest/gtest.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli/cli_util.hpp"
#include "core/format.hpp"

namespace {

using cli_test::latprof;
using nlohmann::json;
namespace fs = std::filesystem;

struct Outcome {
  json j;
  std::string table;
};

Outcome run(const std::string& args, const std::string& name) {
  const auto path = cli_test::temp_dir("timing") / (name + ".json");
  fs::remove(path);
  const auto r = latprof("run --model tiny --quiet " + args + " --json " + path.string());
  EXPECT_EQ(r.code, 0) << r.err;
  return {json::parse(cli_test::slurp(path.string())), r.out};
}

double sum_of(const json& rows, const std::string& stage = "") {
  double s = 0;
  for (const auto& r : rows)
    if (stage.empty() || r["stage"] == stage) s += r["time_ms"].get<double>();
  return s;
}

double stage_ms(const json& j, const std::string& name) {
  for (const auto& s : j["stages"])
    if (s["name"] == name) return s["time_ms"];
  ADD_FAILURE() << "no stage " << name;
  return 0;
}

// A duration as the table prints it ("1.23 ms", "456.7 us", "2.00 s") in ms.
double parse_ms(const std::string& v, const std::string& unit) {
  const double x = std::stod(v);
  return unit == "s" ? x * 1e3 : unit == "ms" ? x : unit == "us" ? x / 1e3 : x / 1e6;
}

TEST(Timing, PerTokenFiguresFollowTheirDefinitions) {
  const Outcome r = run("--input 40 --output 24 --repeat 3", "defs");
  const json& m = r.j["metrics"];
  const auto t = r.j["token_times_ms"].get<std::vector<double>>();
  ASSERT_EQ(t.size(), 24u);
  EXPECT_TRUE(std::is_sorted(t.begin(), t.end()));
  // TTFT is the first token's arrival; TPOT (last - first) / (n - 1); E2E after the last token.
  EXPECT_DOUBLE_EQ(m["ttft_ms"].get<double>(), t.front());
  EXPECT_NEAR(m["tpot_ms"].get<double>(), (t.back() - t.front()) / 23.0, 1e-9);
  EXPECT_GT(m["e2e_ms"].get<double>(), t.back());
  // ITL: every gap of every repeat.
  EXPECT_EQ(m["itl_ms"]["count"], 3 * 23);
  // Decode tokens/s is batch / TPOT.
  EXPECT_NEAR(m["decode_tokens_per_s"].get<double>(), 1e3 / m["tpot_ms"].get<double>(), 1e-6);
  // TTFT holds tokenize + prefill + the first sample and detokenize: more than prefill alone.
  EXPECT_GT(m["ttft_ms"].get<double>(), stage_ms(r.j, "prefill"));
}

TEST(Timing, StageRowsAddUpToTheE2eOfTheirRepeat) {
  const Outcome r = run("--input 48 --output 16 --repeat 4", "sums");
  const double e2e = r.j["metrics"]["e2e_ms"];
  EXPECT_NEAR(sum_of(r.j["stages"]), e2e, 0.01 * e2e);
  EXPECT_NEAR(r.j["setup"]["unattributed_ms"].get<double>(), 0.0, 0.01 * e2e);
  // The E2E shown is one repeat's: the lower median of the four.
  auto e2es = r.j["repeat_e2e_ms"].get<std::vector<double>>();
  ASSERT_EQ(e2es.size(), 4u);
  std::sort(e2es.begin(), e2es.end());
  EXPECT_DOUBLE_EQ(e2e, e2es[1]);
  EXPECT_DOUBLE_EQ(r.j["metrics"]["e2e_repeats_ms"]["min"].get<double>(), e2es.front());
  // Each row's spread brackets its value; ops fit inside their stage (shares at most 100%).
  for (const char* k : {"stages", "ops"})
    for (const auto& row : r.j[k]) {
      EXPECT_LE(row["time_min_ms"].get<double>(), row["time_ms"].get<double>()) << row.dump();
      EXPECT_GE(row["time_max_ms"].get<double>(), row["time_ms"].get<double>()) << row.dump();
    }
  for (const char* s : {"prefill", "decode", "sample"}) {
    EXPECT_LE(sum_of(r.j["ops"], s), stage_ms(r.j, s) * 1.001) << s;
  }
  // The printed stage table adds up too: parse its time column.
  std::istringstream in(r.table);
  std::string line;
  double printed = 0, printed_e2e = 0;
  bool in_stages = false;
  while (std::getline(in, line)) {
    std::istringstream w(line);
    std::string name, v, unit;
    w >> name >> v >> unit;
    if (name == "stage" && v == "time") in_stages = true;
    if (!in_stages || name.empty() || name[0] == '-' || name == "stage") continue;
    if (name == "end-to-end") {
      printed_e2e = parse_ms(v, unit);
      break;
    }
    printed += parse_ms(v, unit);
  }
  ASSERT_GT(printed_e2e, 0) << r.table;
  EXPECT_NEAR(printed, printed_e2e, 0.01 * printed_e2e) << r.table;
}

TEST(Timing, DefaultRunRepeatsAndWarmsUpAtTheTimedShape) {
  const Outcome r = run("--input 36 --output 8", "default");
  EXPECT_EQ(r.j["run"]["repeat"], 3);
  EXPECT_EQ(r.j["repeat_e2e_ms"].size(), 3u);
  const json& w = r.j["setup"]["warmup"];
  EXPECT_EQ(w["requests"], 1);
  EXPECT_EQ(w["prompt_tokens"], 36);
  EXPECT_EQ(w["output_tokens"], 4);
  EXPECT_DOUBLE_EQ(w["kv_cache_bytes_touched"].get<double>(),
                   r.j["setup"]["kv_cache_bytes"].get<double>());
  EXPECT_NE(r.table.find("range"), std::string::npos) << r.table;

  const Outcome none = run("--input 36 --output 8 --warmup 0 --repeat 1", "nowarm");
  EXPECT_EQ(none.j["setup"]["warmup"]["output_tokens"], 0);
  EXPECT_EQ(none.j["run"]["repeat"], 1);
  EXPECT_EQ(none.table.find("range"), std::string::npos);
}

TEST(Timing, DecodeStepFitUsesTheSharedContextDefinition) {
  const Outcome r = run("--input 30 --output 12 --repeat 1", "fit");
  EXPECT_EQ(r.j["decode_step_ms"].size(), 11u);
  // The same report through `roofline --from` gives the same fit (one definition of context).
  const auto path = cli_test::temp_dir("timing") / "fit.json";
  const auto from = latprof("roofline --from " + path.string());
  ASSERT_EQ(from.code, 0) << from.err;
  const json& fit = r.j["metrics"]["decode_step_fit"];
  const std::string line = "step = " + latprof::fmt_ms(fit["intercept_ms"].get<double>()) + " + " +
                           latprof::fmt_fixed(fit["slope_us_per_token"].get<double>(), 3) +
                           " us x context";
  EXPECT_NE(from.out.find(line), std::string::npos) << line << "\n" << from.out;
}

}  // namespace
