// End-to-end runs of `latprof run` on the tiny model: the JSON report's contract and its
// physics, and every bad-input case.
#include <gtest/gtest.h>

#include <cctype>
#include <nlohmann/json.hpp>
#include <thread>

#include "cli/cli_util.hpp"
#include "support/model_writer.hpp"

namespace {

using cli_test::latprof;
namespace fs = std::filesystem;

nlohmann::json run_json(const std::string& args, const std::string& name) {
  const auto path = cli_test::temp_dir("run") / (name + ".json");
  fs::remove(path);
  const auto r = latprof("run --model tiny --quiet " + args + " --json " + path.string());
  EXPECT_EQ(r.code, 0) << r.err;
  return nlohmann::json::parse(cli_test::slurp(path.string()));
}

const nlohmann::json& stage(const nlohmann::json& j, const std::string& name) {
  for (const auto& s : j["stages"])
    if (s["name"] == name) return s;
  throw std::runtime_error("no stage " + name);
}

TEST(RunCli, ReportHasTheRequiredFields) {
  const auto j = run_json("--input 24 --output 12 --repeat 2", "fields");
  for (const char* k :
       {"schema_version", "tool", "machine", "run", "ceilings", "metrics", "stages", "ops"})
    EXPECT_TRUE(j.contains(k)) << k;
  for (const char* k : {"name", "version", "git_commit", "build_type"})
    EXPECT_TRUE(j["tool"].contains(k)) << k;
  for (const char* k : {"model", "dtype", "backend", "input_tokens", "output_tokens", "batch",
                        "threads", "repeat", "seed", "output_token_ids"})
    EXPECT_TRUE(j["run"].contains(k)) << k;
  for (const char* k : {"ttft_ms", "tpot_ms", "e2e_ms", "prefill_tokens_per_s",
                        "decode_tokens_per_s", "itl_ms", "mfu", "mbu"})
    EXPECT_TRUE(j["metrics"].contains(k)) << k;
  for (const char* k : {"p50", "p95", "p99", "max"})
    EXPECT_TRUE(j["metrics"]["itl_ms"].contains(k));
  for (const auto& s : j["stages"])
    for (const char* k : {"name", "time_ms", "share", "flops", "bytes", "arithmetic_intensity",
                          "bound", "mfu", "mbu"})
      EXPECT_TRUE(s.contains(k)) << k;
  std::set<std::string> ops;
  for (const auto& o : j["ops"]) ops.insert(o["name"].get<std::string>());
  for (const char* k : {"embed", "norm", "qkv_proj", "rope", "attention", "o_proj", "mlp_gate_up",
                        "mlp_down", "lm_head", "sample"})
    EXPECT_TRUE(ops.count(k)) << k;
  EXPECT_EQ(j["run"]["output_token_ids"].size(), 12u);
  EXPECT_EQ(j["run"]["input_tokens"], 24);
  EXPECT_EQ(j["decode_step_ms"].size(), 11u);
}

TEST(RunCli, MemoryRoofIsTheMeanOfTheBandwidthBeforeAndAfter) {
  // CPU runs judge MBU against the read bandwidth measured around the timed part, not the cached
  // probe figure (which may be hours old on a machine whose bandwidth drifts).
  const auto j = run_json("--input 8 --output 4 --repeat 1", "bandwidth");
  const auto& info = j["ceilings"]["info"];
  ASSERT_TRUE(info.contains("read_bandwidth_before")) << info.dump();
  ASSERT_TRUE(info.contains("read_bandwidth_after")) << info.dump();
  ASSERT_TRUE(info.contains("read_bandwidth_cached")) << info.dump();
  const double before = info["read_bandwidth_before"], after = info["read_bandwidth_after"];
  EXPECT_GT(before, 1e8);
  EXPECT_GT(after, 1e8);
  EXPECT_DOUBLE_EQ(j["ceilings"]["mem_bw_bytes_per_s"].get<double>(), 0.5 * (before + after));
  // The decode stage's MBU is its bytes per second against that roof.
  const auto& d = stage(j, "decode");
  EXPECT_NEAR(
      d["mbu"].get<double>(),
      d["bytes"].get<double>() / (d["time_ms"].get<double>() / 1e3) / (0.5 * (before + after)),
      1e-9);
}

TEST(RunCli, ThreadPoolSynchronisationIsMeasuredPerStep) {
  const auto j = run_json("--input 8 --output 6 --repeat 1 --threads 2", "sync");
  int decode_steps = 0;
  for (const auto& s : j["steps"]) {
    // Every step runs parallel regions (the matrix products at least); their synchronisation is
    // part of the forward pass.
    EXPECT_GT(s["parallel_regions"].get<int64_t>(), 0) << s.dump();
    EXPECT_GE(s["sync_ms"].get<double>(), 0) << s.dump();
    EXPECT_LE(s["sync_ms"].get<double>(), s["forward_ms"].get<double>()) << s.dump();
    if (s["prefill_tokens"] == 0) ++decode_steps;
  }
  ASSERT_GT(decode_steps, 0);
  const auto& m = j["metrics"];
  EXPECT_GE(m["decode_sync_ms"].get<double>(), 0);
  // Late starts are part of the synchronisation; the cache line's trip between two of the
  // pool's cores is measured before and after the timed part.
  EXPECT_GE(m["decode_sync_fork_ms"].get<double>(), 0);
  EXPECT_LE(m["decode_sync_fork_ms"].get<double>(), m["decode_sync_ms"].get<double>());
  for (const auto& s : j["steps"]) {
    EXPECT_GE(s["sync_fork_ms"].get<double>(), 0) << s.dump();
    EXPECT_LE(s["sync_fork_ms"].get<double>(), s["sync_ms"].get<double>()) << s.dump();
  }
  // The pool's time off its CPUs (Linux): per step, within the step's time, the run-queue wait
  // part of it; over the decode steps a mean, a worst step and a share of their time.
  for (const auto& s : j["steps"]) {
    EXPECT_GE(s["offcpu_ms"].get<double>(), 0) << s.dump();
    EXPECT_LE(s["offcpu_ms"].get<double>(), s["time_ms"].get<double>()) << s.dump();
    EXPECT_GE(s["runq_ms"].get<double>(), 0) << s.dump();
    EXPECT_LE(s["runq_ms"].get<double>(), s["offcpu_ms"].get<double>()) << s.dump();
  }
  EXPECT_GE(m["decode_offcpu_ms"].get<double>(), 0);
  EXPECT_GE(m["decode_offcpu_max_ms"].get<double>(), m["decode_offcpu_ms"].get<double>());
  EXPECT_GE(m["decode_offcpu_share"].get<double>(), 0);
  EXPECT_LE(m["decode_offcpu_share"].get<double>(), 1);
  EXPECT_LE(m["decode_runq_ms"].get<double>(), m["decode_offcpu_ms"].get<double>());
  if (std::thread::hardware_concurrency() >= 2)
    for (const char* k : {"core_to_core_ns_before", "core_to_core_ns_after"}) {
      ASSERT_TRUE(j["ceilings"]["info"].contains(k)) << k;
      EXPECT_GT(j["ceilings"]["info"][k].get<double>(), 1.0) << k;
      EXPECT_LT(j["ceilings"]["info"][k].get<double>(), 1e9) << k;
    }
  EXPECT_GT(m["decode_parallel_regions"].get<double>(), 0);
  EXPECT_GE(m["decode_sync_share"].get<double>(), 0);
  EXPECT_LE(m["decode_sync_share"].get<double>(), 1);
}

TEST(RunCli, StagesAddUpAndTtftWithinE2e) {
  const auto j = run_json("--input 64 --output 32", "sums");
  double sum = 0;
  for (const auto& s : j["stages"]) sum += s["time_ms"].get<double>();
  const double e2e = j["metrics"]["e2e_ms"];
  EXPECT_NEAR(sum, e2e, 0.05 * e2e);
  EXPECT_LE(j["metrics"]["ttft_ms"].get<double>(), e2e);
  EXPECT_GT(j["metrics"]["ttft_ms"].get<double>(), stage(j, "prefill")["time_ms"].get<double>());
}

TEST(RunCli, DecodeIsMemoryBoundAndLongPrefillComputeBound) {
  // `tiny` is so narrow (dim 64) that its fp32 activations outweigh its matmuls; a wider
  // one-layer model, given as a config file, has the intensity of a real prefill. Its prefill's
  // ~180 FLOP/B stay past the ridge of an AMX CPU's FP16 tile roof (1.5 TFLOP/s over ~30 GB/s,
  // ~50 FLOP/B) even where a busy machine (ctest -j2 on 2 cores) cuts the bandwidth measured
  // around the run to 10 GB/s (~150 FLOP/B; at dim 1,024 the prefill was memory-bound then).
  const auto cfg = cli_test::temp_dir("cfg") / "wide.json";
  {
    std::ofstream f(cfg);
    f << R"({"name": "wide", "dim": 2048, "n_layers": 1, "n_heads": 16, "n_kv_heads": 16,
             "ffn_dim": 5504, "vocab_size": 512, "max_seq_len": 1024})";
  }
  const auto path = cli_test::temp_dir("run") / "wide-out.json";
  const auto r = latprof("run --quiet --model " + cfg.string() + " --input 500 --output 8 --json " +
                         path.string());
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(cli_test::slurp(path.string()));
  EXPECT_EQ(stage(j, "decode")["bound"], "memory");
  EXPECT_EQ(stage(j, "prefill")["bound"], "compute");
  const auto k = run_json("--input 8 --output 8 --dtype int8", "bounds8");
  EXPECT_EQ(stage(k, "decode")["bound"], "memory");
}

TEST(RunCli, KvDtypeRecordedAndInEffect) {
  const auto a = run_json("--input 20 --output 16", "kv-fp16");
  const auto b = run_json("--input 20 --output 16 --kv-dtype bf16", "kv-bf16");
  EXPECT_EQ(a["run"]["kv_dtype"], "fp16");
  EXPECT_EQ(b["run"]["kv_dtype"], "bf16");
  // The same bytes per element: the cost model's decode bytes do not change.
  EXPECT_EQ(stage(a, "decode")["bytes"], stage(b, "decode")["bytes"]);
  // int8: a byte an element and an fp32 scale per position and kv head (tiny: heads of 16), so
  // the attention's KV bytes are (16 + 4) / 32 of fp16's.
  const auto c = run_json("--input 20 --output 16 --kv-dtype int8", "kv-int8");
  EXPECT_EQ(c["run"]["kv_dtype"], "int8");
  auto kv_bytes = [](const nlohmann::json& j) {
    for (const auto& op : j["ops"])
      if (op["stage"] == "decode" && op["name"] == "attention") return op["kv_bytes"].get<double>();
    return -1.0;
  };
  ASSERT_GT(kv_bytes(a), 0);
  EXPECT_NEAR(kv_bytes(c) / kv_bytes(a), (16.0 + 4.0) / 32.0, 1e-12);
}

// Without --dtype a Q8_0 GGUF runs in its own precision (int8), an F16 one in fp16; --dtype fp16
// on a Q8_0 file dequantises it, and the report says so either way.
TEST(RunCli, DtypeFollowsTheModelFileUnlessGiven) {
  const std::string dir = latprof::testing::temp_dir("run-q8");
  const auto m = latprof::testing::make_tiny_llama(6);
  latprof::testing::write_file(dir + "/q8.gguf", latprof::testing::tiny_gguf_bytes(m, 8));
  latprof::testing::write_file(dir + "/f16.gguf", latprof::testing::tiny_gguf_bytes(m, 1));
  auto run_file = [&](const std::string& args) {
    const std::string path = dir + "/r.json";
    fs::remove(path);
    const auto r = latprof("run --quiet -i 8 -o 2 -r 1 " + args + " --json " + path);
    EXPECT_EQ(r.code, 0) << r.err;
    return nlohmann::json::parse(cli_test::slurp(path));
  };
  auto has_note = [](const nlohmann::json& j, const std::string& text) {
    for (const auto& n : j["notes"])
      if (n.get<std::string>().find(text) != std::string::npos) return true;
    return false;
  };
  const auto q8 = run_file("--model " + dir + "/q8.gguf");
  EXPECT_EQ(q8["run"]["dtype"], "int8");
  EXPECT_TRUE(has_note(q8, "--dtype int8 taken from the model file")) << q8["notes"];
  const auto q8_fp16 = run_file("--model " + dir + "/q8.gguf --dtype fp16");
  EXPECT_EQ(q8_fp16["run"]["dtype"], "fp16");
  EXPECT_TRUE(has_note(q8_fp16, "Q8_0, dequantised to FP16")) << q8_fp16["notes"];
  const auto q8_int8 = run_file("--model " + dir + "/q8.gguf --dtype int8");
  EXPECT_FALSE(has_note(q8_int8, "taken from the model file")) << q8_int8["notes"];
  const auto f16 = run_file("--model " + dir + "/f16.gguf");
  EXPECT_EQ(f16["run"]["dtype"], "fp16");
  EXPECT_FALSE(has_note(f16, "Q8_0")) << f16["notes"];
}

TEST(RunCli, GreedyTokensReproducibleAcrossThreadCounts) {
  const auto a = run_json("--input 20 --output 16 --threads 1", "t1");
  const auto b = run_json("--input 20 --output 16 --threads 2", "t2");
  EXPECT_EQ(a["run"]["output_token_ids"], b["run"]["output_token_ids"]);
  const auto c = run_json("--input 20 --output 16 --seed 43", "seed43");
  EXPECT_NE(a["run"]["output_token_ids"], c["run"]["output_token_ids"]);
}

TEST(RunCli, SamplingIsSeededAndDiffersFromGreedy) {
  const auto a = run_json("--input 10 --output 24 --temperature 1.5 --top-k 40 --seed 5", "s1");
  const auto b = run_json("--input 10 --output 24 --temperature 1.5 --top-k 40 --seed 5", "s2");
  EXPECT_EQ(a["run"]["output_token_ids"], b["run"]["output_token_ids"]);
}

TEST(RunCli, PrintsTheBreakdown) {
  const auto r = latprof("run --model tiny --quiet --input 16 --output 4");
  ASSERT_EQ(r.code, 0) << r.err;
  for (const char* k : {"prefill", "decode", "TTFT", "TPOT", "end-to-end", "dominates"})
    EXPECT_NE(r.out.find(k), std::string::npos) << k;
}

TEST(RunCli, SeveralDtypesRunAndCompare) {
  const auto dir = cli_test::temp_dir("multi");
  const auto r =
      latprof("run --model tiny --quiet --input 16 --output 8 --dtype fp16,int8 --json " +
              (dir / "m.json").string());
  ASSERT_EQ(r.code, 0) << r.err;
  for (const char* f : {"m.fp16.json", "m.int8.json", "m.compare.json"})
    EXPECT_TRUE(fs::exists(dir / f)) << f;
  const auto a = nlohmann::json::parse(cli_test::slurp((dir / "m.fp16.json").string()));
  const auto b = nlohmann::json::parse(cli_test::slurp((dir / "m.int8.json").string()));
  EXPECT_EQ(a["run"]["dtype"], "fp16");
  EXPECT_EQ(b["run"]["dtype"], "int8");
  EXPECT_LT(stage(b, "decode")["bytes"].get<double>(), stage(a, "decode")["bytes"].get<double>());
  EXPECT_NE(r.out.find("int8"), std::string::npos);
  const auto bad = latprof("run --model tiny --quiet --input 8 --output 4 --dtype fp16,fp7");
  EXPECT_EQ(bad.code, 2);
}

// --kv-dtype fp16,int8: one run per KV type (files labelled kv-fp16, kv-int8) and their
// comparison, the int8 run's decode moving fewer bytes.
TEST(RunCli, SeveralKvDtypesRunAndCompare) {
  const auto dir = cli_test::temp_dir("multi-kv");
  const auto r =
      latprof("run --model tiny --quiet --input 16 --output 8 --kv-dtype fp16,int8 --json " +
              (dir / "m.json").string());
  ASSERT_EQ(r.code, 0) << r.err;
  for (const char* f : {"m.kv-fp16.json", "m.kv-int8.json", "m.compare.json"})
    EXPECT_TRUE(fs::exists(dir / f)) << f;
  const auto a = nlohmann::json::parse(cli_test::slurp((dir / "m.kv-fp16.json").string()));
  const auto b = nlohmann::json::parse(cli_test::slurp((dir / "m.kv-int8.json").string()));
  EXPECT_EQ(a["run"]["kv_dtype"], "fp16");
  EXPECT_EQ(b["run"]["kv_dtype"], "int8");
  EXPECT_EQ(a["run"]["dtype"], b["run"]["dtype"]);
  EXPECT_LT(stage(b, "decode")["bytes"].get<double>(), stage(a, "decode")["bytes"].get<double>());
  const auto c = nlohmann::json::parse(cli_test::slurp((dir / "m.compare.json").string()));
  EXPECT_EQ(c["reports"].size(), 2u);
  EXPECT_NE(r.out.find("kv-int8"), std::string::npos) << r.out;
}

TEST(RunCli, W8A8RunsAndIsJudgedAgainstTheInt8Peak) {
  // int8-w8a8 runs on the CPU; its matmul ops, stages and request MFU divide by the INT8
  // dot-product peak, int8 (W8A16)'s by the INT16 one where the probe measured it (VNNI), else by
  // the matmul (FP32 FMA) peak, and the notes say which.
  const auto a = run_json("--input 16 --output 8 --dtype int8", "w8a16");
  const auto b = run_json("--input 16 --output 8 --dtype int8-w8a8", "w8a8");
  EXPECT_EQ(b["run"]["dtype"], "int8-w8a8");
  EXPECT_EQ(b["run"]["output_token_ids"].size(), 8u);
  bool noted = false;
  for (const auto& n : b["notes"]) noted |= n.get<std::string>().find("int8-w8a8") == 0;
  EXPECT_TRUE(noted) << b["notes"].dump();
  const double int8_peak = b["ceilings"]["int8_ops_per_s"].get<double>();
  ASSERT_GT(int8_peak, 0);
  auto peak_of = [](const nlohmann::json& row) {
    return row["model_flops"].get<double>() / (row["time_ms"].get<double>() / 1e3) /
           row["mfu"].get<double>();
  };
  for (const char* st : {"prefill", "decode"}) {
    EXPECT_NEAR(peak_of(stage(b, st)) / int8_peak, 1, 1e-6) << st;
    const double i16 = a["ceilings"].value("int16_ops_per_s", 0.0);
    EXPECT_NEAR(
        peak_of(stage(a, st)) / (i16 > 0 ? i16 : a["ceilings"]["matmul_flops_per_s"].get<double>()),
        1, 1e-6)
        << st;
  }
  for (const auto& o : b["ops"])
    if (o["name"] == "mlp_down") {
      EXPECT_NEAR(peak_of(o) / int8_peak, 1, 1e-6);
    }
  const auto& st = b["stages"];
  double model_flops = 0, ms = 0;
  for (const auto& s : st)
    if (s["name"] == "prefill" || s["name"] == "decode") {
      model_flops += s["model_flops"].get<double>();
      ms += s["time_ms"].get<double>();
    }
  EXPECT_NEAR(b["metrics"]["mfu"].get<double>(), model_flops / (ms / 1e3) / int8_peak,
              1e-9 + 1e-6 * b["metrics"]["mfu"].get<double>());
}

TEST(RunCli, OverheadRunIsReported) {
  const auto j = run_json("--input 16 --output 8 --overhead", "overhead");
  const auto& o = j["setup"]["profiler_overhead"];
  EXPECT_GT(o["bare_e2e_ms"].get<double>(), 0);
  EXPECT_GT(o["instrumented_e2e_ms"].get<double>(), 0);
  EXPECT_TRUE(o["overhead_fraction"].is_number());
}

struct BadCase {
  const char* args;
  const char* expect;  // a word the message must contain
};
void PrintTo(const BadCase& c, std::ostream* os) {
  *os << "latprof run " << c.args;
}
// The arguments as an identifier: "--model tiny --input 0" -> "model_tiny_input_0".
std::string case_name(const ::testing::TestParamInfo<BadCase>& i) {
  std::string n;
  for (const char* c = i.param.args; *c; ++c) {
    const bool alnum = std::isalnum(static_cast<unsigned char>(*c));
    if (*c == '-' && std::isdigit(static_cast<unsigned char>(c[1])) &&
        (c == i.param.args || c[-1] == ' '))
      n += "minus";  // "--input -3" -> "input_minus3"
    else if (alnum)
      n += *c;
    else if (!n.empty() && n.back() != '_')
      n += '_';
  }
  while (!n.empty() && n.back() == '_') n.pop_back();
  return n;
}

class BadInput : public ::testing::TestWithParam<BadCase> {};

TEST_P(BadInput, OneLineAndExitTwoAndNoFile) {
  const auto dir = cli_test::temp_dir("bad");
  const auto out = dir / "report.json";
  fs::remove(out);
  std::string args = GetParam().args;
  const bool own_json = args.find("--json") != std::string::npos;
  if (!own_json) args += " --json " + out.string();
  const auto r = latprof("run --quiet " + args);
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_NE(r.err.find(GetParam().expect), std::string::npos) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_FALSE(fs::exists(out));
  for (const auto& f : fs::directory_iterator(dir))
    EXPECT_EQ(f.path().filename().string().find(".tmp"), std::string::npos) << f.path();
}

INSTANTIATE_TEST_SUITE_P(
    Cases, BadInput,
    ::testing::Values(BadCase{"--model tiny --input 0", "--input"},
                      BadCase{"--model tiny --input -3", "input"},
                      BadCase{"--model tiny --input abc", "input"},
                      BadCase{"--model tiny --output 0", "--output"},
                      BadCase{"--model tiny --input 400 --output 200", "context"},
                      BadCase{"--model nosuchmodel", "unknown model"},
                      BadCase{"--model tiny --dtype fp8", "dtype"},
                      BadCase{"--model tiny --input 8 --output 4 --dtype fp8", "dtype"},
                      BadCase{"--model tiny --backend tpu", "backend"},
                      BadCase{"--model tiny --input 8 --output 4 --backend tpu", "backend"},
                      BadCase{"--model tiny --batch 0", "--batch"},
                      BadCase{"--model tiny --json /nonexistent-dir/x.json", "does not exist"},
                      BadCase{"--model llama-2-13b --batch 64 --input 2000 --output 2000",
                              "available"}),
    case_name);

}  // namespace
