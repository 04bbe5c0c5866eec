// The roofline analyzer's library: parameter counts and FLOPs against hand-computed values,
// floors on the A100 80GB and H200, the memory -> compute flip, the decode-step fit, the
// hardware database and its validation, physics checks of run reports, and the SVG.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>

#include "core/error.hpp"
#include "model/config.hpp"
#include "model/cost_model.hpp"
#include "report/physics.hpp"
#include "report/plot.hpp"
#include "report/report.hpp"
#include "roofline/fit.hpp"
#include "roofline/hardware.hpp"
#include "roofline/predict.hpp"

using namespace latprof;

namespace {

Scenario scenario(const std::string& model, const std::string& hw, int64_t input = 500,
                  int64_t output = 200, int64_t batch = 1, const std::string& dtype = "fp16") {
  Scenario s;
  s.model = find_model(model);
  s.precision = precision_from_flags(dtype, "fp16", "fp16");
  s.ceilings = to_ceilings(find_hardware(hw));
  s.input = input;
  s.output = output;
  s.batch = batch;
  return s;
}

bool linear_compute_bound(const Scenario& s, int64_t batch, int64_t n_new, int64_t ctx0) {
  const OpCosts ops = forward_cost(s.model, s.precision, batch, n_new, ctx0);
  double tc = 0, tm = 0;
  for (Op op : {Op::qkv_proj, Op::o_proj, Op::mlp_gate_up, Op::mlp_down}) {
    const RooflinePoint r = roofline_point(ops[int(op)], s.ceilings.peak_for(op, s.precision),
                                           s.ceilings.mem_bw_bytes_per_s);
    tc += r.compute_ms;
    tm += r.memory_ms;
  }
  return tc > tm;
}

}  // namespace

// ---- parameter counts: per layer 2*d*q + 2*d*kv_dim + 3*d*ffn, plus embeddings, LM head, norms
TEST(Params, BuiltinModelsMatchHandCounts) {
  // llama-2-7b: 32 x (4*4096^2 + 3*4096*11008) + 2*32000*4096 + 65*4096
  EXPECT_EQ(find_model("llama-2-7b").params_total(), 6'738'415'616);
  // llama-2-13b: 40 x (4*5120^2 + 3*5120*13824) + 2*32000*5120 + 81*5120
  EXPECT_EQ(find_model("llama-2-13b").params_total(), 13'015'864'320);
  // llama-3-8b: 32 x (2*4096^2 + 2*4096*1024 + 3*4096*14336) + 2*128256*4096 + 65*4096
  EXPECT_EQ(find_model("llama-3-8b").params_total(), 8'030'261'248);
  // mistral-7b: same layers as llama-3-8b, vocabulary 32000
  EXPECT_EQ(find_model("mistral-7b").params_total(), 7'241'732'096);
  // tinyllama-1.1b: 22 x (2*2048^2 + 2*2048*256 + 3*2048*5632) + 2*32000*2048 + 45*2048
  EXPECT_EQ(find_model("tinyllama-1.1b").params_total(), 1'100'048'384);
  // tiny: 2 x (2*64^2 + 2*64*32 + 3*64*176) + 2*256*64 + 5*64
  EXPECT_EQ(find_model("tiny").params_total(), 125'248);
}

TEST(Flops, DecodeModelFlopsAre2NPlusFullAttention) {
  const ModelConfig m = find_model("llama-2-7b");
  const Precision p = precision_from_flags("fp16", "fp16", "fp16");
  // one token at context 499 (500 keys): 2 x 6,607,077,376 matmul params + 4*32*4096*500
  const Cost c = total(forward_cost(m, p, 1, 1, 499));
  EXPECT_DOUBLE_EQ(c.model_flops, 2.0 * 6'607'077'376 + 4.0 * 32 * 4096 * 500);
  // weights read once: 13,477,363,712 bytes in fp16 (embedding rows gathered, not all read)
  EXPECT_DOUBLE_EQ(weight_bytes(m, p), 13'477'363'712.0);
}

TEST(Flops, PrefillAttentionExecutedIsCausalModelIsFull) {
  const ModelConfig m = find_model("llama-2-7b");
  const Precision p = precision_from_flags("fp16", "fp16", "fp16");
  const OpCosts ops = forward_cost(m, p, 1, 500, 0);
  const Cost& a = ops[int(Op::attention)];
  // causal: 500*501/2 keys; 4*q_dim per key for QK and PV, 5 softmax FLOPs per head and key
  EXPECT_DOUBLE_EQ(a.flops, 32.0 * 125'250 * (4.0 * 4096 + 32 * 5));
  EXPECT_DOUBLE_EQ(a.model_flops, 32.0 * 4 * 4096 * 500 * 500);
  // GQA: attention FLOPs use query heads, KV bytes the KV heads (llama-3-8b: 8 of 32)
  const ModelConfig g = find_model("llama-3-8b");
  const OpCosts og = forward_cost(g, p, 1, 1, 999);
  EXPECT_DOUBLE_EQ(og[int(Op::attention)].model_flops, 32.0 * 4 * 4096 * 1000);
  EXPECT_DOUBLE_EQ(og[int(Op::attention)].kv_bytes, 32.0 * 1024 * 2 * 2 * (1 + 1000));
}

// ---- floors
TEST(Floors, Llama7bDecodeOnA100AndH200) {
  const Times a100 = floor_times(scenario("llama-2-7b", "a100-80gb-sxm"));
  EXPECT_NEAR(a100.tpot_ms, 6.6, 0.1);  // 13.48 GB / 2.039 TB/s = 6.61 ms, plus KV reads
  EXPECT_GT(a100.tpot_ms, 13'477'363'712.0 / 2.039e12 * 1e3);
  const Times h200 = floor_times(scenario("llama-2-7b", "h200-sxm"));
  EXPECT_NEAR(h200.tpot_ms, 2.8, 0.06);  // 13.48 GB / 4.8 TB/s = 2.81 ms
  EXPECT_NEAR(a100.decode_tokens_per_s, 1e3 / a100.tpot_ms, 1e-6);
  EXPECT_NEAR(a100.e2e_ms, a100.ttft_ms + 199 * a100.tpot_ms, 1e-6);
}

TEST(Floors, Int8WeightsHalveTheDecodeFloorAndW8A8UsesTheInt8Peak) {
  const double fp16 = floor_times(scenario("llama-2-7b", "a100-80gb-sxm")).tpot_ms;
  const double int8 =
      floor_times(scenario("llama-2-7b", "a100-80gb-sxm", 500, 200, 1, "int8")).tpot_ms;
  EXPECT_NEAR(int8 / fp16, 0.5, 0.03);
  const double pre16 =
      floor_times(scenario("llama-2-7b", "a100-80gb-sxm", 2000, 2, 8, "int8")).prefill_ms;
  const double pre8 =
      floor_times(scenario("llama-2-7b", "a100-80gb-sxm", 2000, 2, 8, "int8-w8a8")).prefill_ms;
  EXPECT_LT(pre8, pre16 * 0.7);  // compute-bound prefill on a 2x faster INT8 roof
}

TEST(Floors, IntensityFlipsFromMemoryToComputePastTheRidge) {
  const Scenario s = scenario("llama-2-7b", "a100-80gb-sxm");
  EXPECT_FALSE(linear_compute_bound(s, 1, 1, 500));   // decode, batch 1
  EXPECT_TRUE(linear_compute_bound(s, 512, 1, 500));  // decode, batch 512
  EXPECT_FALSE(linear_compute_bound(s, 1, 16, 0));    // short prompt
  EXPECT_TRUE(linear_compute_bound(s, 1, 2048, 0));   // long prompt
  const Prediction p = predict(s);
  // ridge 312e12 / 2.039e12 = 153 FLOP/B; a linear layer at batch B does ~B FLOP per fp16 byte
  EXPECT_GT(p.linear_compute_bound_batch, 140);
  EXPECT_LT(p.linear_compute_bound_batch, 200);
  EXPECT_FALSE(linear_compute_bound(s, p.linear_compute_bound_batch - 1, 1, 500));
  EXPECT_TRUE(linear_compute_bound(s, p.linear_compute_bound_batch, 1, 500));
  EXPECT_GT(p.prefill_compute_bound_input, 100);
  EXPECT_LT(p.prefill_compute_bound_input, 300);
  // the decode ops are memory-bound, prefill's matmuls compute-bound
  for (const auto& o : p.ops) {
    if (o.op == Op::qkv_proj && o.stage == "decode") {
      EXPECT_EQ(o.floor.bound, "memory");
    }
    if (o.op == Op::qkv_proj && o.stage == "prefill") {
      EXPECT_EQ(o.floor.bound, "compute");
    }
  }
}

TEST(Floors, MemoryFitAndLargestBatch) {
  Scenario s = scenario("llama-2-7b", "a100-80gb-sxm");
  const Prediction p = predict(s);
  EXPECT_TRUE(p.fits);
  // (80e9 - 13.477e9) / (524,288 B/token x 700 tokens)
  EXPECT_EQ(p.max_batch, int64_t((80e9 - 13'477'363'712.0) / (524'288.0 * 700)));
  s.batch = p.max_batch + 1;
  EXPECT_FALSE(predict(s).fits);
  // an INT8 KV cache halves the KV bytes per token
  Scenario k = scenario("llama-2-7b", "a100-80gb-sxm");
  k.precision.kv_bytes = 1;
  EXPECT_DOUBLE_EQ(kv_bytes_per_token(k.model, k.precision), 262'144.0);
}

TEST(Floors, ExpectedIsSlowerThanTheFloorByTheStatedFactors) {
  const Prediction p = predict(scenario("llama-2-7b", "a100-80gb-sxm"), Efficiency{0.5, 0.5, 0});
  EXPECT_NEAR(p.expected.tpot_ms, 2 * p.floor.tpot_ms, 1e-6);
  EXPECT_NEAR(p.expected.prefill_ms, 2 * p.floor.prefill_ms, 1e-6);
}

TEST(Floors, ContextPastTheWindowIsAUsageError) {
  EXPECT_THROW(predict(scenario("llama-2-7b", "a100-80gb-sxm", 4000, 200)), UsageError);
  EXPECT_THROW(predict(scenario("llama-2-7b", "a100-80gb-sxm", 500, 0)), UsageError);
}

// ---- decode-step fit
TEST(Fit, RecoversInterceptAndSlope) {
  std::vector<double> steps;
  // Step k attends over 100 prompt tokens + 1 + k.
  for (int k = 0; k < 50; ++k) steps.push_back(5.0 + 0.002 * (100 + 1 + k));
  const LinearFit f = fit_decode_steps(steps, 100);
  ASSERT_TRUE(f.ok);
  EXPECT_NEAR(f.intercept, 5.0, 1e-9);
  EXPECT_NEAR(f.slope, 0.002, 1e-12);
  EXPECT_NEAR(f.r2, 1.0, 1e-9);
  // 0.002 ms per token for 524,288 KV bytes per token: 262 GB/s
  EXPECT_NEAR(kv_bandwidth_from_slope(f.slope, 524'288.0), 524'288.0 / 2e-6, 1);
  EXPECT_FALSE(fit_decode_steps({1.0}, 10).ok);
}

// ---- hardware database
TEST(Hardware, EveryBuiltinHasPositiveFiguresAndASource) {
  const auto& all = builtin_hardware();
  for (const char* n : {"a100-40gb-sxm", "a100-80gb-sxm", "a100-80gb-pcie", "h100-sxm", "h100-pcie",
                        "h200-sxm", "l40s", "l4", "rtx-4090", "cpu-local"})
    EXPECT_NO_THROW(find_hardware(n)) << n;
  EXPECT_EQ(find_hardware("local").name, "cpu-local");
  for (const auto& h : all) {
    EXPECT_FALSE(h.source.empty()) << h.name;
    if (h.measure) continue;
    EXPECT_NE(h.source.find("http"), std::string::npos) << h.name;
    const Ceilings c = to_ceilings(h);
    EXPECT_GT(c.mem_bw_bytes_per_s, 0) << h.name;
    EXPECT_GT(c.matmul_flops_per_s, c.vector_flops_per_s) << h.name;
    EXPECT_GT(c.int8_ops_per_s, 0) << h.name;
    EXPECT_GT(c.memory_bytes, 0) << h.name;
    EXPECT_GT(c.cache_bytes, 0) << h.name;
  }
  // dense, not sparse: the A100's 312 TFLOP/s, the H100 SXM's 989.5
  EXPECT_DOUBLE_EQ(find_hardware("a100-80gb-sxm").fp16_tensor_flops_per_s, 312e12);
  EXPECT_DOUBLE_EQ(find_hardware("h100-sxm").fp16_tensor_flops_per_s, 989.5e12);
  EXPECT_DOUBLE_EQ(find_hardware("a100-80gb-sxm").mem_bw_bytes_per_s, 2.039e12);
  EXPECT_EQ(find_hardware("a100-80gb-sxm").fp8_tensor_flops_per_s, 0);  // none on Ampere
  // GeForce: FP16 with FP32 accumulate
  EXPECT_DOUBLE_EQ(find_hardware("rtx-4090").fp16_tensor_flops_per_s, 165.2e12);
}

TEST(Hardware, BadFilesAreRejectedWithTheFieldNamed) {
  nlohmann::json good = hardware_to_json(find_hardware("h100-sxm"));
  EXPECT_NO_THROW(hardware_from_json(good, "good.json"));
  auto expect_field = [&](nlohmann::json j, const std::string& field) {
    try {
      hardware_from_json(j, "bad.json");
      ADD_FAILURE() << "accepted a file with a bad " << field;
    } catch (const UsageError& e) {
      EXPECT_NE(std::string(e.what()).find("'" + field + "'"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("bad.json"), std::string::npos) << e.what();
    }
  };
  for (const char* f : {"fp16_tensor_flops_per_s", "fp32_flops_per_s", "mem_bw_bytes_per_s",
                        "memory_bytes", "l2_bytes", "int8_tensor_ops_per_s", "name", "source"}) {
    nlohmann::json j = good;
    j.erase(f);
    expect_field(j, f);
  }
  for (const char* f : {"mem_bw_bytes_per_s", "memory_bytes", "fp16_tensor_flops_per_s"}) {
    nlohmann::json j = good;
    j[f] = 0;
    expect_field(j, f);
    j[f] = -1e12;
    expect_field(j, f);
    j[f] = "fast";
    expect_field(j, f);
  }
  nlohmann::json j = good;
  j["mem_bw_bytes_per_s"] = nullptr;  // only int8/fp8/bf16/interconnect may be null
  expect_field(j, "mem_bw_bytes_per_s");
  EXPECT_THROW(find_hardware("a100-90gb"), UsageError);
}

// ---- physics checks of run reports
namespace {
RunReport report_for(const std::string& model, const Ceilings& c, double time_factor) {
  RunReport r;
  const ModelConfig m = find_model(model);
  r.model_config = model_to_json(m);
  r.run.model = model;
  r.run.dtype = "fp16";
  r.run.input_tokens = 100;
  r.run.output_tokens = 10;
  r.ceilings = c;
  const Precision p = precision_for("fp16", 2, 2);
  const OpCosts ops = forward_cost(m, p, 1, 1, 100);
  for (Op op : {Op::qkv_proj, Op::mlp_down}) {
    Row row;
    row.stage = "decode";
    row.name = op_name(op);
    row.cost = ops[int(op)];
    row.floor_ms = roofline_point(row.cost, c.peak_for(op, p), c.mem_bw_bytes_per_s).floor_ms;
    row.time_ms = row.floor_ms * time_factor;
    r.ops.push_back(row);
  }
  return r;
}
// A llama-2-7b fp16 report of one prefill op over `input` prompt tokens in `calls` calls, its
// cost from the cost model (CPU precision: fp32 activations); the caller sets the row's times and
// rates, then runs the checks.
RunReport prefill_op_report(const Ceilings& c, Op op, int64_t input, int64_t calls) {
  RunReport r;
  const ModelConfig m = find_model("llama-2-7b");
  r.model_config = model_to_json(m);
  r.run.model = "llama-2-7b";
  r.run.dtype = "fp16";
  r.run.input_tokens = input;
  r.run.output_tokens = 2;
  r.ceilings = c;
  Row row;
  row.stage = "prefill";
  row.name = op_name(op);
  row.calls = calls;
  row.cost = forward_cost(m, precision_for("fp16", 4, 2), 1, input, 0)[int(op)];
  r.ops.push_back(row);
  return r;
}
// A CPU's measured ceilings: read bandwidth, FP32 peak (matmuls and vector ops alike), cache.
Ceilings cpu_ceilings(double bw, double flops, double cache = 0) {
  Ceilings c;
  c.device = "test CPU";
  c.mem_bw_bytes_per_s = bw;
  c.matmul_flops_per_s = c.vector_flops_per_s = flops;
  c.cache_bytes = cache;
  return c;
}
int count(const RunReport& r, const std::string& level) {
  int n = 0;
  for (const auto& c : r.checks) n += c.level == level;
  return n;
}
}  // namespace

TEST(Physics, FasterThanTheFloorIsATimingError) {
  const Ceilings a100 = to_ceilings(find_hardware("a100-80gb-sxm"));
  RunReport fast = report_for("llama-2-7b", a100, 0.5);
  add_physics_checks(fast);
  EXPECT_EQ(count(fast, "error"), 2);
  for (const auto& c : fast.checks)
    if (c.level == "error") {
      EXPECT_NE(c.message.find("likely timing error"), std::string::npos);
    }
  RunReport honest = report_for("llama-2-7b", a100, 1.5);
  add_physics_checks(honest);
  EXPECT_EQ(count(honest, "error"), 0);
}

// The memory roof is the mean of the reads just before and after a run; on a machine whose
// bandwidth changes from one moment to the next a memory-bound op can beat it without a timing
// error. Below the floor at the roof but not at the highest read of the run: a warning that says
// so; below the floor even there: still an error.
TEST(Physics, BandwidthThatChangedDuringTheRunIsAWarningNotATimingError) {
  const Ceilings c = cpu_ceilings(33e9, 233e9);
  auto make = [&](double after, double mbu) {
    RunReport r = report_for("llama-2-7b", c, 0.7);  // 1.43x faster than the floor at 33 GB/s
    r.ceilings_info = {{"read_bandwidth_before", 33e9}, {"read_bandwidth_after", after}};
    r.metrics.mbu = mbu;
    add_physics_checks(r);
    return r;
  };
  const RunReport drifted = make(52e9, 1.3);  // the floor at 52 GB/s: 0.63x of it
  EXPECT_EQ(count(drifted, "error"), 0);
  EXPECT_EQ(count(drifted, "warning"), 4);  // two ops, the MBU and the reads' disagreement
  for (const auto& k : drifted.checks)
    if (k.level == "warning") {
      EXPECT_NE(k.message.find("uncertain"), std::string::npos) << k.message;
    }
  const RunReport too_fast = make(36e9, 1.6);  // 36 GB/s does not explain 1.43x, nor MBU 160%
  EXPECT_EQ(count(too_fast, "error"), 3);
  RunReport no_reads = report_for("llama-2-7b", c, 0.7);  // no reads recorded: as before
  add_physics_checks(no_reads);
  EXPECT_EQ(count(no_reads, "error"), 2);
}

// One request's decode steps, 63 of them: 46 at ~31.5 ms and then 17 at ~20.6 (a run on a VM
// whose memory bandwidth rose mid-run while the reads around it agreed) is a warning that names
// the step and both speeds; a steady ramp (the context's growth), noise, too few steps or a load
// run (where the batch sets each step's time) are not.
TEST(Physics, DecodeStepsAtTwoSpeedsAreAWarning) {
  auto shift_checks = [](std::vector<double> steps, bool load = false) {
    RunReport r = report_for("llama-2-7b", cpu_ceilings(60e9, 233e9), 1.5);
    r.decode_step_ms = std::move(steps);
    if (load) r.load = nlohmann::json::object();
    add_physics_checks(r);
    std::vector<std::string> out;
    for (const auto& k : r.checks)
      if (k.subject == "decode_step_ms") out.push_back(k.level + ": " + k.message);
    return out;
  };
  std::vector<double> jump;
  for (int i = 0; i < 63; ++i) jump.push_back((i < 46 ? 31.5 : 20.6) * (1 + 0.02 * ((i % 3) - 1)));
  const auto w = shift_checks(jump);
  ASSERT_EQ(w.size(), 1u);
  EXPECT_EQ(w[0].rfind("warning: ", 0), 0u) << w[0];
  for (const char* part : {"before decode step 47", "31.50 ms", "20.60 ms", "1.53x"})
    EXPECT_NE(w[0].find(part), std::string::npos) << part << " in " << w[0];
  std::vector<double> ramp, noise;
  for (int i = 0; i < 200; ++i) {
    ramp.push_back(20.0 + 0.1 * i);  // 20 to 40 ms: twice as slow at the end, but gradually
    noise.push_back(25.0 * (1 + 0.08 * ((i * 7919) % 5 - 2) / 2.0));  // +-8%
  }
  EXPECT_TRUE(shift_checks(ramp).empty());
  EXPECT_TRUE(shift_checks(noise).empty());
  EXPECT_TRUE(shift_checks({jump.begin() + 38, jump.begin() + 53}).empty());  // 15 steps
  EXPECT_EQ(shift_checks({jump.begin() + 30, jump.begin() + 62}).size(), 1u);
  EXPECT_TRUE(shift_checks(jump, true).empty());
}

// The same jump with the pool's time off its CPUs per step (steps[].offcpu_ms, the pure decode
// steps in decode_step_ms's order): where the slower steps lost about the difference, the warning
// says the machine took the CPUs; where they lost no more than the faster ones, it says that the
// time off the CPUs does not explain them; without the figures (CUDA), neither.
TEST(Physics, DecodeStepsAtTwoSpeedsSayWhetherTheCpusWereTaken) {
  auto message = [](const std::vector<double>& steps, const std::vector<double>& off) {
    RunReport r = report_for("llama-2-7b", cpu_ceilings(60e9, 233e9), 1.5);
    r.decode_step_ms = steps;
    r.steps.push_back(StepRow{});  // the prefill step: not one of decode_step_ms
    r.steps.back().prefill_tokens = 500;
    for (size_t i = 0; i < steps.size(); ++i) {
      StepRow s;
      s.index = int64_t(i) + 1;
      s.decode_tokens = 1;
      s.time_ms = steps[i];
      s.offcpu_ms = off.empty() ? -1 : off[i];
      r.steps.push_back(s);
    }
    add_physics_checks(r);
    for (const auto& k : r.checks)
      if (k.subject == "decode_step_ms") return k.message;
    return std::string();
  };
  std::vector<double> steps, taken, kept;
  for (int i = 0; i < 40; ++i) {
    const bool slow = i >= 20 && i < 30;
    steps.push_back(slow ? 70.0 : 36.0);
    taken.push_back(slow ? 33.0 : 0.5);  // the slower steps lost about the difference
    kept.push_back(0.5);
  }
  const std::string t = message(steps, taken);
  EXPECT_NE(t.find("the machine took the CPUs"), std::string::npos) << t;
  EXPECT_NE(t.find("33.00 ms"), std::string::npos) << t;
  const std::string k = message(steps, kept);
  EXPECT_NE(k.find("memory bandwidth"), std::string::npos) << k;
  EXPECT_NE(k.find("not the time off the CPUs"), std::string::npos) << k;
  const std::string none = message(steps, {});
  EXPECT_NE(none.find("memory bandwidth"), std::string::npos) << none;
  EXPECT_EQ(none.find("off the CPUs"), std::string::npos) << none;
}

TEST(Physics, CacheResidentWorkingSetSaysTheMemoryRoofDoesNotApply) {
  Ceilings c = to_ceilings(find_hardware("a100-80gb-sxm"));  // 40 MiB L2 > tiny's 250 KB
  RunReport r = report_for("tiny", c, 0.5);
  add_physics_checks(r);
  EXPECT_EQ(count(r, "error"), 0);
  ASSERT_EQ(count(r, "info"), 1);
  for (const auto& k : r.checks)
    if (k.level == "info") {
      EXPECT_NE(k.message.find("does not apply"), std::string::npos);
    }
  c.cache_bytes = 1000;  // the same run without a cache that holds it
  RunReport r2 = report_for("tiny", c, 0.5);
  add_physics_checks(r2);
  EXPECT_EQ(count(r2, "error"), 2);
}

// A prefill residual add of a 7B model moves 1.57 GB in 64 calls of 25 MB each: on a CPU whose
// L3 holds one call's activations they come from cache, so beating the DRAM floor is no error.
TEST(Physics, ActivationsThatFitInCacheAreNotHeldToTheDramRoof) {
  const Ceilings c = cpu_ceilings(31.7e9, 444e9, 503e6);
  auto make = [&](double cache, double of_floor = 0.6) {
    Ceilings cc = c;
    cc.cache_bytes = cache;
    RunReport r = prefill_op_report(cc, Op::residual, 500, 64);
    Row& row = r.ops[0];
    row.floor_ms = roofline_point(row.cost, c.vector_flops_per_s, c.mem_bw_bytes_per_s).floor_ms;
    row.time_ms = of_floor * row.floor_ms;
    add_physics_checks(r);
    return r;
  };
  const RunReport cached = make(503e6);
  EXPECT_EQ(count(cached, "error"), 0);
  bool said = false;
  for (const auto& k : cached.checks)
    said |= k.level == "info" && k.message.find("prefill.residual") != std::string::npos;
  EXPECT_TRUE(said);
  EXPECT_EQ(count(make(1e6), "error"), 1);  // a 1 MB cache cannot hold 25 MB per call
  // 25 MB a call against a 14 MB cache: what it reads can be there and what it writes can stay
  // there, so none of it need cross DRAM during the call (even at 0.2 of the floor); against a 6 MB
  // cache at least 13 MB of the 25 do: 0.6 of the full floor is then allowed, 0.4 is not.
  EXPECT_EQ(count(make(14e6, 0.2), "error"), 0);
  EXPECT_EQ(count(make(6e6), "error"), 0);
  const RunReport spilled = make(6e6, 0.4);
  ASSERT_EQ(count(spilled, "error"), 1);
  for (const auto& k : spilled.checks)
    if (k.level == "error") {
      EXPECT_NE(k.message.find("from DRAM"), std::string::npos) << k.message;
    }
}

// A working set larger than the last-level cache but not by much (tinyllama-1.1b's 2.2 GB of
// fp16 weights against a 1.1 GB cache): the replacement policy may keep part of one step's
// weights for the next, so each op is credited its share (cache / working set, here ~0.5) and
// held to the DRAM floor for the rest. At 0.6 of the full floor no error and one info line
// naming both ops; at 0.4 both are errors, and with a 32 MB cache 0.6 is too.
TEST(Physics, WeightsPartlyInALargeCacheAreCreditedTheirShare) {
  auto make = [](double cache, double of_floor) {
    RunReport r = report_for("tinyllama-1.1b", cpu_ceilings(28.5e9, 434e9, cache), of_floor);
    add_physics_checks(r);
    return r;
  };
  const RunReport credited = make(1.1e9, 0.6);
  EXPECT_EQ(count(credited, "error"), 0);
  int named = 0;
  for (const auto& k : credited.checks)
    if (k.level == "info" && k.message.find("weights faster than DRAM") != std::string::npos) {
      ++named;
      EXPECT_NE(k.message.find("decode.qkv_proj, decode.mlp_down"), std::string::npos) << k.message;
    }
  EXPECT_EQ(named, 1);
  EXPECT_EQ(count(make(1.1e9, 0.4), "error"), 2);
  EXPECT_EQ(count(make(32e6, 0.6), "error"), 2);
  EXPECT_EQ(count(make(1.1e9, 1.01), "error"), 0);  // at the floor: no credit needed, none said
  for (const auto& k : make(1.1e9, 1.01).checks)
    EXPECT_EQ(k.message.find("weights faster than DRAM"), std::string::npos) << k.message;
}

// A decode GEMV's activations fit in any cache, but its weights do not: when it beats the floor
// at the run's mean read (the bandwidth rose during the run) the cache is not why, and the note
// that blames it must not name it.
TEST(Physics, ADecodeOpBelowItsWeightsFloorIsNotBlamedOnTheCache) {
  const Ceilings c = cpu_ceilings(42e9, 233e9, 33.6e6);
  RunReport r = report_for("llama-2-7b", c, 0.95);  // 5% under the floor at 42 GB/s
  r.ceilings_info = {{"read_bandwidth_before", 32e9}, {"read_bandwidth_after", 52e9}};
  for (Row& row : r.ops) row.calls = 127 * 32;
  add_physics_checks(r);
  EXPECT_EQ(count(r, "error"), 0);
  EXPECT_EQ(count(r, "warning"), 3);  // two ops and the reads' disagreement
  for (const auto& k : r.checks)
    EXPECT_EQ(k.message.find("served from cache"), std::string::npos) << k.message;
}

// The reads before and after a run 56.4 and 34.0 GB/s (seen on a cloud VM): MBU against their
// mean is neither figure, so a warning gives it against each; reads within 20% of each other, or
// none, say nothing.
TEST(Physics, ReadsThatDisagreeSayHowUncertainTheMbuIs) {
  auto make = [](double before, double after) {
    const double mean = 0.5 * (before + after);
    RunReport r = report_for("llama-2-7b", cpu_ceilings(mean, 233e9), 1.5);
    r.ceilings_info = {{"read_bandwidth_before", before}, {"read_bandwidth_after", after}};
    r.metrics.mbu = 0.713;
    add_physics_checks(r);
    std::vector<std::string> drift;
    for (const auto& k : r.checks)
      if (k.subject == "ceilings.mem_bw_bytes_per_s") drift.push_back(k.level + ": " + k.message);
    return drift;
  };
  const auto flipped = make(56.4e9, 34.0e9);
  ASSERT_EQ(flipped.size(), 1u);
  EXPECT_EQ(flipped[0].rfind("warning: ", 0), 0u) << flipped[0];
  for (const char* part :
       {"56.4 GB/s just before", "34.0 GB/s just after", "(45.2 GB/s, their mean)",
        "MBU 71.3% would be 57.1% against the faster read and 94.8% against "
        "the slower"})
    EXPECT_NE(flipped[0].find(part), std::string::npos) << part << " in " << flipped[0];
  EXPECT_EQ(make(34.0e9, 56.4e9).size(), 1u);  // either way round
  EXPECT_TRUE(make(50e9, 43e9).empty());       // 16% apart
  RunReport none = report_for("llama-2-7b", cpu_ceilings(45e9, 233e9), 1.5);
  none.metrics.mbu = 0.713;
  add_physics_checks(none);
  for (const auto& k : none.checks) EXPECT_NE(k.subject, "ceilings.mem_bw_bytes_per_s");
}

TEST(Physics, MfuAboveOneAndInconsistentTokensPerSecond) {
  RunReport r = report_for("llama-2-7b", to_ceilings(find_hardware("a100-80gb-sxm")), 2);
  r.metrics.mfu = 1.7;
  r.metrics.tpot_ms = 10;
  r.metrics.decode_tokens_per_s = 400;  // 1000/10 = 100 tokens/s from the step time
  add_physics_checks(r);
  bool mfu = false, tps = false;
  for (const auto& c : r.checks) {
    mfu |= c.subject == "metrics.mfu" && c.level == "error";
    tps |= c.subject == "metrics.decode_tokens_per_s" && c.level == "error";
  }
  EXPECT_TRUE(mfu);
  EXPECT_TRUE(tps);
}

// The attention op's roof on a bf16 KV cache is the bf16 dot-product peak where one was measured
// above the FP32 FMA peak, on an fp16 cache 4/5 of the AMX tiles' FP16 roof where the tiles run
// it; everything else keeps theirs.
TEST(Ceilings, AttentionOnABf16CacheUsesTheBf16Peak) {
  Ceilings c;
  c.mem_bw_bytes_per_s = 5e10;
  c.matmul_flops_per_s = 2.3e11;
  c.vector_flops_per_s = 2.3e11;
  c.int8_ops_per_s = 9.4e11;
  Precision f16 = precision_for("fp16", 4, 2), bf16 = f16;
  bf16.kv_bf16 = true;
  EXPECT_DOUBLE_EQ(c.peak_for(Op::attention, bf16), 2.3e11);  // not measured: the FMA peak
  c.bf16_flops_per_s = 1.15e11;  // below the FMA peak (the Intel Xeon's): the FMA peak
  EXPECT_DOUBLE_EQ(c.peak_for(Op::attention, bf16), 2.3e11);
  c.bf16_flops_per_s = 4.7e11;
  EXPECT_DOUBLE_EQ(c.peak_for(Op::attention, bf16), 4.7e11);
  EXPECT_DOUBLE_EQ(c.peak_for(Op::attention, f16), 2.3e11);
  EXPECT_DOUBLE_EQ(c.peak_for(Op::mlp_down, bf16), 2.3e11);
  // Where the AMX-BF16 tiles run the FP16 GEMM, they run an fp16 cache's prefill attention too:
  // five tile products a product, 4/5 of the GEMM's roof; not a bf16 or int8 cache's.
  c.f16_tile_flops_per_s = 1.5e12;
  EXPECT_DOUBLE_EQ(c.peak_for(Op::attention, f16), 1.2e12);
  EXPECT_DOUBLE_EQ(c.peak_for(Op::attention, bf16), 4.7e11);
  EXPECT_DOUBLE_EQ(c.peak_for(Op::attention, precision_for("fp16", 4, 1)), 2.3e11);
  c.f16_tile_flops_per_s = 2e11;  // below the FMA peak: the FMA peak
  EXPECT_DOUBLE_EQ(c.peak_for(Op::attention, f16), 2.3e11);
  c.f16_tile_flops_per_s = 0;
  EXPECT_TRUE(precision_from_flags("fp16", "bf16", "fp32").kv_bf16);
  EXPECT_FALSE(precision_from_flags("fp16", "fp16", "fp32").kv_bf16);
  // It survives the report's JSON.
  const Ceilings back = ceilings_from_json(ceilings_to_json(c), "test");
  EXPECT_DOUBLE_EQ(back.bf16_flops_per_s, 4.7e11);
}

// W8A16 matmuls are judged against the int16 dot-product peak where one was measured (the CPU's
// vpdpwssd kernels); FP16 and W8A8 keep theirs.
TEST(Ceilings, W8A16MatmulsUseTheInt16Peak) {
  Ceilings c;
  c.mem_bw_bytes_per_s = 5e10;
  c.matmul_flops_per_s = 2.3e11;
  c.int8_ops_per_s = 9.4e11;
  const Precision f16 = precision_for("fp16", 4, 2), w8a16 = precision_for("int8", 4, 2),
                  w8a8 = precision_for("int8-w8a8", 4, 2);
  EXPECT_DOUBLE_EQ(c.matmul_peak(w8a16), 2.3e11);  // not measured: the matmul peak
  c.int16_ops_per_s = 4.7e11;
  EXPECT_DOUBLE_EQ(c.matmul_peak(w8a16), 4.7e11);
  EXPECT_DOUBLE_EQ(c.peak_for(Op::qkv_proj, w8a16), 4.7e11);
  EXPECT_DOUBLE_EQ(c.matmul_peak(f16), 2.3e11);
  EXPECT_DOUBLE_EQ(c.matmul_peak(w8a8), 9.4e11);
  EXPECT_DOUBLE_EQ(c.peak_for(Op::attention, w8a16), 2.3e11);
  EXPECT_DOUBLE_EQ(ceilings_from_json(ceilings_to_json(c), "test").int16_ops_per_s, 4.7e11);
}

// FP16 matmuls on the AMX-BF16 tiles are judged against the tiles' FP16 roof (never below the
// matmul peak), an fp16 cache's attention against 4/5 of it (five tile products a product where
// the GEMM's take four); the INT8 formats keep theirs.
TEST(Ceilings, F16MatmulsUseTheTileRoofWhereTheGemmUsesTheTiles) {
  Ceilings c;
  c.mem_bw_bytes_per_s = 5e10;
  c.matmul_flops_per_s = 4.3e11;
  c.int16_ops_per_s = 6e12;
  const Precision f16 = precision_for("fp16", 4, 2), w8a16 = precision_for("int8", 4, 2);
  EXPECT_DOUBLE_EQ(c.matmul_peak(f16), 4.3e11);
  c.f16_tile_flops_per_s = 1.5e12;
  EXPECT_DOUBLE_EQ(c.matmul_peak(f16), 1.5e12);
  EXPECT_DOUBLE_EQ(c.peak_for(Op::mlp_down, f16), 1.5e12);
  EXPECT_DOUBLE_EQ(c.peak_for(Op::attention, f16), 1.2e12);
  EXPECT_DOUBLE_EQ(c.matmul_peak(w8a16), 6e12);
  EXPECT_DOUBLE_EQ(c.ridge(f16), 1.5e12 / 5e10);
  c.f16_tile_flops_per_s = 1e11;  // below the FMA peak: the FMA peak
  EXPECT_DOUBLE_EQ(c.matmul_peak(f16), 4.3e11);
  EXPECT_DOUBLE_EQ(ceilings_from_json(ceilings_to_json(c), "test").f16_tile_flops_per_s, 1e11);
}

// Causal prefill attention executes about half the FLOPs the MFU convention counts (every key
// for every query): at 60% of the peak in executed FLOPs its MFU is ~120%, which is no error.
TEST(Physics, AttentionMfuAboveOneByTheConventionIsNoError) {
  const Ceilings c = to_ceilings(find_hardware("a100-80gb-sxm"));
  auto make = [&](bool causal) {
    RunReport r = prefill_op_report(c, Op::attention, 2000, 32);
    Row& row = r.ops[0];
    if (!causal) row.cost.model_flops = row.cost.flops;
    const double peak = c.peak_for(Op::attention, precision_for("fp16", 4, 2));
    row.time_ms = row.cost.flops / (0.6 * peak) * 1e3;
    row.mfu = row.cost.model_flops / (row.time_ms / 1e3) / peak;
    if (!causal) row.mfu = 1.2;  // no convention to explain it: a timing error
    add_physics_checks(r);
    return r;
  };
  const RunReport causal = make(true);
  ASSERT_GT(causal.ops[0].mfu, 1.1);
  EXPECT_EQ(count(causal, "error"), 0);
  bool said = false;
  for (const auto& k : causal.checks)
    said |= k.level == "info" && k.subject == "prefill.attention.mfu" &&
            k.message.find("60.0% of the peak") != std::string::npos;
  EXPECT_TRUE(said);
  const RunReport plain = make(false);
  EXPECT_EQ(count(plain, "error"), 1);
}

TEST(Physics, TpotAgainstTokenTimesAndTheForwardItContains) {
  RunReport r = report_for("llama-2-7b", to_ceilings(find_hardware("a100-80gb-sxm")), 2);
  r.metrics.tpot_ms = 10;
  r.metrics.decode_tokens_per_s = 100;
  r.token_times_ms = {50, 60, 70, 80};  // (80 - 50) / 3 = 10 ms: consistent
  r.decode_step_ms = {9, 9, 9};         // the forward passes fit inside
  auto errors = [](RunReport x) {
    add_physics_checks(x);
    std::string s;
    for (const auto& c : x.checks)
      if (c.level == "error") s += c.subject + ": " + c.message + "\n";
    return s;
  };
  EXPECT_EQ(errors(r), "");
  RunReport spread = r;
  spread.token_times_ms = {50, 70, 90, 110};  // 20 ms between tokens, not 10
  EXPECT_NE(errors(spread).find("metrics.tpot_ms"), std::string::npos);
  RunReport slow_forward = r;
  slow_forward.decode_step_ms = {12, 12, 12};  // longer than the TPOT that contains them
  EXPECT_NE(errors(slow_forward).find("shorter than the mean decode forward"), std::string::npos);
}

// ---- SVG
TEST(Plot, SvgIsWellFormedWithOnePointPerOp) {
  const Prediction p = predict(scenario("llama-2-7b", "h100-sxm", 128, 16));
  const RunReport r = report_from_json(prediction_json(p, {}), "prediction");
  const Ceilings ds = to_ceilings(find_hardware("h100-pcie"));
  const std::string svg = roofline_svg(r, &ds);
  int expected = 0;
  for (const Row& o : r.ops) expected += o.cost.flops > 0 && o.cost.bytes() > 0;
  const std::regex point("<circle class=\"op\"");
  EXPECT_EQ(
      std::distance(std::sregex_iterator(svg.begin(), svg.end(), point), std::sregex_iterator()),
      expected);
  EXPECT_NE(svg.find("ridge"), std::string::npos);
  EXPECT_NE(svg.find("stroke-dasharray"), std::string::npos);  // datasheet roofs
  EXPECT_EQ(svg.find("<script"), std::string::npos);
  EXPECT_EQ(svg.find("http://fonts"), std::string::npos);
  const auto path = std::filesystem::temp_directory_path() / "latprof_test_plot.svg";
  std::ofstream(path) << svg;
  const std::string cmd =
      "python3 -c 'import sys, xml.dom.minidom; xml.dom.minidom.parse(sys.argv[1])' " +
      path.string();
  EXPECT_EQ(std::system(cmd.c_str()), 0) << "the SVG is not well-formed XML";
  std::filesystem::remove(path);
}

TEST(Hardware, ASavedCpuFileRoundTrips) {
  // what `latprof hw --save` writes for a CPU: no bf16/fp8 rate, no interconnect (null)
  HardwareSpec h;
  h.name = "measured-cpu";
  h.description = "test CPU";
  h.kind = "cpu";
  h.source = "measured by latprof hw";
  h.fp16_tensor_flops_per_s = 4e11;
  h.fp32_flops_per_s = 4e11;
  h.int8_tensor_ops_per_s = 8e11;
  h.mem_bw_bytes_per_s = 3e10;
  h.memory_bytes = 2.5e10;
  h.l2_bytes = 3.2e7;
  const nlohmann::json j = hardware_to_json(h);
  EXPECT_TRUE(j["interconnect_bytes_per_s"].is_null());
  EXPECT_TRUE(j["fp8_tensor_flops_per_s"].is_null());
  const HardwareSpec back = hardware_from_json(j, "saved.json");
  const Ceilings c = to_ceilings(back);
  EXPECT_DOUBLE_EQ(c.mem_bw_bytes_per_s, 3e10);
  EXPECT_DOUBLE_EQ(c.matmul_flops_per_s, 4e11);
  EXPECT_DOUBLE_EQ(c.int8_ops_per_s, 8e11);
  EXPECT_DOUBLE_EQ(c.cache_bytes, 3.2e7);
  EXPECT_THROW(to_ceilings(find_hardware("cpu-local")), UsageError);  // no stored figures
}
