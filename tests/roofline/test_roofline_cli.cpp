// The roofline commands end to end through the latprof binary: check verdicts and exit codes,
// roofline --json fields, the SVG of a prediction and of a run report, --from with the
// decode-step fit and a projection, bad hardware files, unknown devices and models.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "model/config.hpp"
#include "report/report.hpp"
#include "roofline/hardware.hpp"
#include "support/temp_dirs.hpp"

namespace fs = std::filesystem;

namespace {

struct Result {
  int rc = -1;
  std::string out;  // stdout and stderr
};

fs::path tmpdir() {
  static const fs::path d =
      latprof::testing::scratch_dir("roofline-cli-" + std::to_string(getpid()));
  return d;
}

Result run(const std::string& args) {
  const std::string cmd = std::string(LATPROF_BIN) + " " + args + " 2>&1";
  Result r;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return r;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
  const int st = pclose(p);
  r.rc = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

bool well_formed_xml(const fs::path& f) {
  const std::string cmd =
      "python3 -c 'import sys, xml.dom.minidom; xml.dom.minidom.parse(sys.argv[1])' " + f.string();
  return std::system(cmd.c_str()) == 0;
}

int count(const std::string& s, const std::string& what) {
  int n = 0;
  for (size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + 1)) ++n;
  return n;
}

std::string slurp(const fs::path& f) {
  std::ifstream in(f);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

TEST(CheckCli, TheSeedsClaimIsImpossibleWithAFloorNear6point6) {
  // 3.2 ms/token for a 7B FP16 model on an A100: 13.5 GB / 2.039 TB/s = 6.6 ms is the floor
  const Result r = run("check --model llama-2-7b --dtype fp16 --hw a100-80gb-sxm --tpot-ms 3.2");
  EXPECT_EQ(r.rc, 1) << r.out;
  EXPECT_EQ(r.out.rfind("impossible", 0), 0u) << r.out;
  EXPECT_NE(r.out.find("floor 6.6"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("bits each"), std::string::npos) << r.out;  // fewer bytes per weight
  EXPECT_NE(r.out.find("batch"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("parameters"), std::string::npos) << r.out;  // a smaller model
  EXPECT_EQ(count(r.out, "\n"), 1) << "one line: " << r.out;
}

TEST(CheckCli, PossibleClaimsExitZero) {
  Result r = run("check --hw a100-80gb-sxm --tpot-ms 10 --ttft-ms 180");
  EXPECT_EQ(r.rc, 0) << r.out;
  EXPECT_EQ(count(r.out, "possible:"), 2) << r.out;
  r = run("check --hw h200-sxm --tpot-ms 3.0");  // floor 2.8 ms on the H200
  EXPECT_EQ(r.rc, 0) << r.out;
  r = run("check --hw a100-80gb-sxm --decode-tokens-per-s 2000 --batch 32");
  EXPECT_EQ(r.rc, 0) << r.out;
  r = run("check --hw a100-80gb-sxm --decode-tokens-per-s 2000");  // batch 1: ~150 tokens/s
  EXPECT_EQ(r.rc, 1) << r.out;
  r = run("check --hw a100-80gb-sxm --tpot-ms 3.2 --dtype int8 --model tinyllama-1.1b");
  EXPECT_EQ(r.rc, 0) << r.out;
}

TEST(CheckCli, UsageErrorsExitTwo) {
  Result r = run("check --hw a100-80gb-sxm");
  EXPECT_EQ(r.rc, 2) << r.out;
  r = run("check --hw a100-99gb --tpot-ms 5");
  EXPECT_EQ(r.rc, 2) << r.out;
  EXPECT_NE(r.out.find("unknown device 'a100-99gb'"), std::string::npos) << r.out;
  r = run("check --model llama-9-7b --hw a100-80gb-sxm --tpot-ms 5");
  EXPECT_EQ(r.rc, 2) << r.out;
  EXPECT_NE(r.out.find("unknown model"), std::string::npos) << r.out;
}

TEST(RooflineCli, JsonHasTheReportNamesAndFloorAndExpected) {
  const fs::path json = tmpdir() / "pred.json", svg = tmpdir() / "pred.svg";
  const Result r =
      run("roofline --model llama-2-7b --dtype fp16 --hw a100-80gb-sxm --input 500 "
          "--output 200 --json " +
          json.string() + " --svg " + svg.string());
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("largest batch that fits"), std::string::npos);
  EXPECT_NE(r.out.find("compute-bound"), std::string::npos);
  const nlohmann::json j = nlohmann::json::parse(slurp(json));
  for (const char* k : {"run", "stages", "ops", "ceilings", "floor", "expected", "efficiency",
                        "memory", "compute_bound"})
    EXPECT_TRUE(j.contains(k)) << k;
  for (const char* obj : {"floor", "expected"})
    for (const char* k : {"ttft_ms", "tpot_ms", "e2e_ms", "prefill_ms", "decode_tokens_per_s"})
      EXPECT_TRUE(j[obj][k].is_number()) << obj << "." << k;
  EXPECT_NEAR(j["floor"]["tpot_ms"].get<double>(), 6.6, 0.1);
  EXPECT_GT(j["expected"]["tpot_ms"].get<double>(), j["floor"]["tpot_ms"].get<double>());
  for (const char* f : {"memory", "compute"}) {
    EXPECT_TRUE(j["efficiency"][f]["value"].is_number());
    EXPECT_FALSE(j["efficiency"][f]["justification"].get<std::string>().empty());
  }
  EXPECT_TRUE(j["memory"]["fits"].get<bool>());
  EXPECT_GT(j["memory"]["max_batch"].get<int64_t>(), 100);
  int with_flops = 0;
  for (const auto& o : j["ops"]) {
    EXPECT_TRUE(o.contains("flops") && o.contains("model_flops") && o.contains("floor_ms"));
    with_flops += o["flops"].get<double>() > 0;
  }
  ASSERT_TRUE(well_formed_xml(svg));
  EXPECT_EQ(count(slurp(svg), "<circle class=\"op\""), with_flops);
  // plot reads the prediction back
  const fs::path svg2 = tmpdir() / "pred2.svg";
  const Result p = run("plot " + json.string() + " -o " + svg2.string());
  ASSERT_EQ(p.rc, 0) << p.out;
  ASSERT_TRUE(well_formed_xml(svg2));
  EXPECT_EQ(count(slurp(svg2), "<circle class=\"op\""), with_flops);
}

TEST(RooflineCli, BadInputExitsTwoNamingTheProblem) {
  Result r = run("roofline --hw nosuchgpu");
  EXPECT_EQ(r.rc, 2) << r.out;
  EXPECT_NE(r.out.find("unknown device"), std::string::npos) << r.out;
  r = run("roofline --hw a100-80gb-sxm --model nosuchmodel");
  EXPECT_EQ(r.rc, 2) << r.out;
  r = run("roofline --hw a100-80gb-sxm --input 4000 --output 200");
  EXPECT_EQ(r.rc, 2) << r.out;
  EXPECT_NE(r.out.find("context window"), std::string::npos) << r.out;
  r = run("roofline --hw a100-80gb-sxm --batch 0");
  EXPECT_EQ(r.rc, 2) << r.out;
  r = run("roofline --hw a100-80gb-sxm --mem-efficiency 1.5");
  EXPECT_EQ(r.rc, 2) << r.out;
  r = run("roofline");
  EXPECT_EQ(r.rc, 2) << r.out;
  EXPECT_NE(r.out.find("--hw"), std::string::npos) << r.out;
}

TEST(RooflineCli, BadHardwareFilesNameTheField) {
  nlohmann::json good = latprof::hardware_to_json(latprof::find_hardware("l4"));
  const fs::path ok = tmpdir() / "hw-ok.json";
  std::ofstream(ok) << good.dump();
  Result r = run("roofline --hw-file " + ok.string());
  EXPECT_EQ(r.rc, 0) << r.out;
  for (const char* field : {"mem_bw_bytes_per_s", "memory_bytes", "l2_bytes"}) {
    nlohmann::json j = good;
    j.erase(field);
    const fs::path f = tmpdir() / (std::string("hw-missing-") + field + ".json");
    std::ofstream(f) << j.dump();
    r = run("roofline --hw-file " + f.string());
    EXPECT_EQ(r.rc, 2) << r.out;
    EXPECT_NE(r.out.find(std::string("'") + field + "'"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("missing"), std::string::npos) << r.out;
  }
  nlohmann::json j = good;
  j["fp16_tensor_flops_per_s"] = -5;
  const fs::path neg = tmpdir() / "hw-negative.json";
  std::ofstream(neg) << j.dump();
  r = run("check --tpot-ms 5 --hw-file " + neg.string());
  EXPECT_EQ(r.rc, 2) << r.out;
  EXPECT_NE(r.out.find("'fp16_tensor_flops_per_s'"), std::string::npos) << r.out;
  r = run("roofline --hw-file " + (tmpdir() / "absent.json").string());
  EXPECT_EQ(r.rc, 2) << r.out;
}

TEST(RooflineCli, FromAReportFitsDecodeStepsAndProjects) {
  // A run report built from the cost model: times at 2x the floor, steps linear in context.
  latprof::RunReport rep;
  const latprof::ModelConfig m = latprof::find_model("llama-2-7b");
  rep.model_config = latprof::model_to_json(m);
  rep.run.model = m.name;
  rep.run.dtype = "fp16";
  rep.run.backend = "test";
  rep.run.device = "NVIDIA A100 80GB SXM4";
  rep.run.input_tokens = 100;
  rep.run.output_tokens = 33;
  rep.ceilings = latprof::to_ceilings(latprof::find_hardware("a100-80gb-sxm"));
  const latprof::Precision p = latprof::precision_for("fp16", 2, 2);
  const auto ops = latprof::forward_cost(m, p, 1, 1, 100);
  latprof::Row stage;
  stage.name = "decode";
  for (latprof::Op op : {latprof::Op::qkv_proj, latprof::Op::mlp_gate_up}) {
    latprof::Row row;
    row.stage = "decode";
    row.name = latprof::op_name(op);
    row.cost = ops[int(op)] * 32;
    row.floor_ms = latprof::roofline_point(row.cost, rep.ceilings.peak_for(op, p),
                                           rep.ceilings.mem_bw_bytes_per_s)
                       .floor_ms;
    row.time_ms = 2 * row.floor_ms;
    row.roofline_fraction = 0.5;
    stage.cost += row.cost;
    stage.time_ms += row.time_ms;
    rep.ops.push_back(row);
  }
  rep.stages.push_back(stage);
  for (int k = 0; k < 32; ++k) rep.decode_step_ms.push_back(8.0 + 0.001 * (100 + k));
  rep.metrics.tpot_ms = 8.1;
  rep.metrics.e2e_ms = 300;
  rep.metrics.ttft_ms = 40;
  const fs::path f = tmpdir() / "report.json";
  std::ofstream(f) << latprof::report_to_json(rep).dump();

  Result r = run("roofline --from " + f.string());
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("decode-step fit"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("8.00 ms + 1.000 us x context"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("effective KV-read bandwidth"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("50.0%"), std::string::npos) << r.out;  // % of roofline
  r = run("roofline --from " + f.string() + " --hw h100-sxm");
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("projection onto NVIDIA H100"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("assumes"), std::string::npos) << r.out;
  // plot a measured report: datasheet roofs of the matching device are drawn dashed
  const fs::path svg = tmpdir() / "report.svg";
  r = run("plot " + f.string() + " -o " + svg.string() + " --hw a100-80gb-sxm");
  ASSERT_EQ(r.rc, 0) << r.out;
  ASSERT_TRUE(well_formed_xml(svg));
  EXPECT_EQ(count(slurp(svg), "<circle class=\"op\""), 2);
}

TEST(HwCli, ListsTheDatabase) {
  const Result r = run("hw --list");
  ASSERT_EQ(r.rc, 0) << r.out;
  for (const char* n : {"a100-40gb-sxm", "a100-80gb-sxm", "a100-80gb-pcie", "h100-sxm", "h100-pcie",
                        "h200-sxm", "l40s", "l4", "rtx-4090", "cpu-local"})
    EXPECT_NE(r.out.find(n), std::string::npos) << n;
  EXPECT_NE(r.out.find("Sources"), std::string::npos);
}

// The core-to-core latency is measured each time, not cached: in the table and in --json, and
// not at all on one thread.
TEST(HwCli, MeasuresTheCoreToCoreLatencyNow) {
  if (std::thread::hardware_concurrency() < 2) GTEST_SKIP() << "needs 2 hardware threads";
  const fs::path f = tmpdir() / "hw.json";
  Result r = run("hw -q --threads 2 --json " + f.string());
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("core-to-core latency"), std::string::npos) << r.out;
  const auto j = nlohmann::json::parse(slurp(f));
  const double ns = j["host"]["core_to_core_ns"].get<double>();
  EXPECT_GT(ns, 1.0);
  EXPECT_LT(ns, 1e9);
  r = run("hw -q --threads 1 --json " + f.string());
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_EQ(r.out.find("core-to-core latency"), std::string::npos) << r.out;
  EXPECT_EQ(nlohmann::json::parse(slurp(f))["host"]["core_to_core_ns"].get<double>(), 0.0);
}

TEST(PlotCli, MissingOrBadReportExitsTwo) {
  Result r =
      run("plot " + (tmpdir() / "none.json").string() + " -o " + (tmpdir() / "x.svg").string());
  EXPECT_EQ(r.rc, 2) << r.out;
  const fs::path bad = tmpdir() / "bad.json";
  std::ofstream(bad) << "{\"hello\": 1}";
  r = run("plot " + bad.string() + " -o " + (tmpdir() / "x.svg").string());
  EXPECT_EQ(r.rc, 2) << r.out;
}
