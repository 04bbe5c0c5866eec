#include "roofline/predict.hpp"

#include <algorithm>
#include <cmath>
#include <functional>
#include <nlohmann/json.hpp>

#include "core/checked.hpp"
#include "core/error.hpp"

namespace latprof {

namespace {

nlohmann::json num(double v) {
  return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json();
}

bool is_linear(Op op) {
  return op_is_matmul(op) && op != Op::attention;
}

// Expected time of one piece of work under the efficiency factors.
double expected_ms(const Cost& c, double peak, double bw, const Efficiency& e) {
  const double t_c = peak > 0 ? c.flops / (peak * e.compute) * 1e3 : 0;
  const double t_m = bw > 0 ? c.bytes() / (bw * e.memory) * 1e3 : 0;
  return std::max(t_c, t_m);
}

// Smallest x in [lo, hi] with pred(x) true, for a predicate false then true; 0 if none.
int64_t first_true(int64_t lo, int64_t hi, const std::function<bool(int64_t)>& pred) {
  if (lo > hi || !pred(hi)) return 0;
  // exponential probe from lo keeps the evaluations near the answer
  int64_t good = hi, bad = lo - 1;
  for (int64_t x = lo; x < hi; x = x * 2) {
    if (pred(x)) {
      good = x;
      break;
    }
    bad = x;
  }
  while (good - bad > 1) {
    const int64_t mid = bad + (good - bad) / 2;
    if (pred(mid))
      good = mid;
    else
      bad = mid;
  }
  return good;
}

// compute floor >= memory floor, summed over the selected ops.
bool compute_bound(const OpCosts& ops, const Ceilings& c, const Precision& p, bool linear_only) {
  double t_c = 0, t_m = 0;
  for (int i = 0; i < kNumOps; ++i) {
    const Op op = static_cast<Op>(i);
    if (linear_only && !is_linear(op)) continue;
    const RooflinePoint r = roofline_point(ops[i], c.peak_for(op, p), c.mem_bw_bytes_per_s);
    t_c += r.compute_ms;
    t_m += r.memory_ms;
  }
  return t_c >= t_m && t_c > 0;
}

}  // namespace

nlohmann::json efficiency_json(const Efficiency& e) {
  return {{"memory",
           {{"value", e.memory},
            {"applies_to", "bytes / memory bandwidth (decode steps, elementwise ops, attention)"},
            {"justification",
             "gpt-fast (pytorch-labs/gpt-fast README) decodes Llama-2-7B in bf16 at 104.9 tokens/s "
             "moving 1,397 GB/s on an A100-80GB (power-limited to 330 W): 68.5% of the 2,039 GB/s "
             "datasheet peak. Tuned engines (vLLM, "
             "TensorRT-LLM) are often reported higher; latprof has no measurement of its own for "
             "them, so it uses the gpt-fast figure, rounded."}}},
          {"compute",
           {{"value", e.compute},
            {"applies_to", "FLOPs / tensor peak (prefill and large-batch matmuls)"},
            {"justification",
             "Model FLOPs utilisation of tuned transformer stacks on A100: 46.2% for PaLM "
             "(Chowdhery et al. 2022) and up to 72% for FlashAttention-2 training (Dao 2023); "
             "prefill is the same large-GEMM regime. 0.60 sits between them."}}},
          {"step_overhead_ms",
           {{"value", e.step_overhead_ms},
            {"applies_to", "added once per decode step"},
            {"justification",
             "Kernel-launch gaps and scheduling; about zero with CUDA graphs, so not modelled by "
             "default. Measure it: the intercept of a run's decode-step fit minus its weight "
             "streaming time (latprof roofline --from)."}}}};
}

nlohmann::json times_json(const Times& t) {
  return {{"ttft_ms", num(t.ttft_ms)},
          {"tpot_ms", t.tpot_ms > 0 ? num(t.tpot_ms) : nlohmann::json()},
          {"e2e_ms", num(t.e2e_ms)},
          {"prefill_ms", num(t.prefill_ms)},
          {"decode_ms", num(t.decode_ms)},
          {"decode_tokens_per_s",
           t.decode_tokens_per_s > 0 ? num(t.decode_tokens_per_s) : nlohmann::json()}};
}

Precision precision_from_flags(const std::string& dtype, const std::string& kv_dtype,
                               const std::string& act_dtype) {
  int kv = 0, act = 0;
  if (kv_dtype == "fp16" || kv_dtype == "bf16")
    kv = 2;
  else if (kv_dtype == "int8")
    kv = 1;
  else if (kv_dtype == "fp32")
    kv = 4;
  else
    usage_error("--kv-dtype '" + kv_dtype + "' is not supported; use fp16, bf16, int8 or fp32");
  if (act_dtype == "fp16" || act_dtype == "bf16")
    act = 2;
  else if (act_dtype == "fp32")
    act = 4;
  else
    usage_error("--act-dtype '" + act_dtype + "' is not supported; use fp16 or fp32");
  if (dtype != "fp16" && dtype != "int8" && dtype != "int8-w8a16" && dtype != "int8-w8a8")
    usage_error("--dtype '" + dtype + "' is not supported; use fp16, int8 (W8A16) or int8-w8a8");
  Precision p = precision_for(dtype, act, kv);
  p.kv_bf16 = kv_dtype == "bf16";
  p.kv_scale_bytes = kv_dtype == "int8" ? 4 : 0;  // latprof's int8 cache: an fp32 scale a slice
  return p;
}

void validate_scenario(const Scenario& s) {
  if (s.input < 1 || s.input > kMaxTokens)
    usage_error("--input must be between 1 and " + std::to_string(kMaxTokens) + " tokens (got " +
                std::to_string(s.input) + ")");
  if (s.output < 1 || s.output > kMaxTokens)
    usage_error("--output must be between 1 and " + std::to_string(kMaxTokens) + " tokens (got " +
                std::to_string(s.output) + ")");
  if (s.batch < 1 || s.batch > (1 << 20))
    usage_error("--batch must be between 1 and 1048576 (got " + std::to_string(s.batch) + ")");
  if (checked_add(s.input, s.output, "--input + --output") > s.model.max_seq_len)
    usage_error("--input " + std::to_string(s.input) + " + --output " + std::to_string(s.output) +
                " exceeds the context window of " + s.model.name + " (max_seq_len " +
                std::to_string(s.model.max_seq_len) + ")");
  if (!(s.ceilings.mem_bw_bytes_per_s > 0) || !(s.ceilings.matmul_flops_per_s > 0))
    usage_error("device '" + s.ceilings.device + "' has no memory bandwidth or compute peak");
}

RooflinePoint decode_step_floor(const Scenario& s, int64_t ctx0) {
  const OpCosts step = forward_cost(s.model, s.precision, s.batch, 1, ctx0);
  RooflinePoint r = roofline_ops(step, s.ceilings, s.precision);
  const RooflinePoint smp =
      roofline_point(sample_cost(s.model, s.precision, s.batch),
                     s.ceilings.peak_for(Op::sample, s.precision), s.ceilings.mem_bw_bytes_per_s);
  r.floor_ms += smp.floor_ms;
  r.compute_ms += smp.compute_ms;
  r.memory_ms += smp.memory_ms;
  r.bound = r.compute_ms >= r.memory_ms ? "compute" : "memory";
  return r;
}

Times floor_times(const Scenario& s) {
  Times t;
  const Ceilings& c = s.ceilings;
  const Precision& p = s.precision;
  t.prefill_ms = roofline_ops(forward_cost(s.model, p, s.batch, s.input, 0), c, p).floor_ms;
  const double sample_ms = roofline_point(sample_cost(s.model, p, s.batch),
                                          c.peak_for(Op::sample, p), c.mem_bw_bytes_per_s)
                               .floor_ms;
  t.ttft_ms = t.prefill_ms + sample_ms;
  for (int64_t k = 0; k + 1 < s.output; ++k)
    t.decode_ms += decode_step_floor(s, s.input + k).floor_ms;
  const int64_t steps = s.output - 1;
  if (steps > 0) {
    t.tpot_ms = t.decode_ms / double(steps);
    t.decode_tokens_per_s = double(s.batch) * double(steps) / (t.decode_ms / 1e3);
  }
  t.e2e_ms = t.ttft_ms + t.decode_ms;
  return t;
}

int64_t max_batch_that_fits(const Scenario& s) {
  const double w = weight_bytes(s.model, s.precision);
  const double kv1 = kv_cache_bytes(s.model, s.precision, 1, s.input + s.output);
  if (!(s.ceilings.memory_bytes > 0) || w > s.ceilings.memory_bytes || !(kv1 > 0)) return 0;
  return int64_t(std::floor((s.ceilings.memory_bytes - w) / kv1));
}

Prediction predict(const Scenario& s, const Efficiency& e) {
  validate_scenario(s);
  Prediction pr;
  pr.scenario = s;
  pr.efficiency = e;
  const ModelConfig& m = s.model;
  const Precision& p = s.precision;
  const Ceilings& c = s.ceilings;
  const double bw = c.mem_bw_bytes_per_s;

  // ---- prefill: one forward pass over batch x input tokens
  const OpCosts pre = forward_cost(m, p, s.batch, s.input, 0);
  double pre_expected = 0;
  for (int i = 0; i < kNumOps; ++i) {
    const Op op = static_cast<Op>(i);
    if (op == Op::sample) continue;
    OpPrediction o;
    o.stage = "prefill";
    o.op = op;
    o.calls = 1;
    o.cost = pre[i];
    o.peak_flops_per_s = c.peak_for(op, p);
    o.ridge = bw > 0 ? o.peak_flops_per_s / bw : 0;
    o.floor = roofline_point(o.cost, o.peak_flops_per_s, bw);
    o.expected_ms = expected_ms(o.cost, o.peak_flops_per_s, bw, e);
    pre_expected += o.expected_ms;
    pr.prefill_cost += o.cost;
    pr.ops.push_back(o);
  }
  pr.prefill_floor = roofline_ops(pre, c, p);

  // ---- decode: output-1 steps, step k attends over input + k + 1 positions
  const int64_t steps = s.output - 1;
  std::vector<OpPrediction> dec(kNumOps);
  for (int i = 0; i < kNumOps; ++i) {
    dec[i].stage = "decode";
    dec[i].op = static_cast<Op>(i);
    dec[i].calls = steps;
    dec[i].peak_flops_per_s = c.peak_for(dec[i].op, p);
    dec[i].ridge = bw > 0 ? dec[i].peak_flops_per_s / bw : 0;
  }
  for (int64_t k = 0; k < steps; ++k) {
    const OpCosts step = forward_cost(m, p, s.batch, 1, s.input + k);
    for (int i = 0; i < kNumOps; ++i) {
      const RooflinePoint r = roofline_point(step[i], dec[i].peak_flops_per_s, bw);
      dec[i].cost += step[i];
      dec[i].floor.floor_ms += r.floor_ms;
      dec[i].floor.compute_ms += r.compute_ms;
      dec[i].floor.memory_ms += r.memory_ms;
      dec[i].expected_ms += expected_ms(step[i], dec[i].peak_flops_per_s, bw, e);
    }
  }
  double dec_expected = 0;
  if (steps > 0) {
    for (int i = 0; i < kNumOps; ++i) {
      if (dec[i].op == Op::sample) continue;
      dec[i].floor.bound = dec[i].floor.compute_ms >= dec[i].floor.memory_ms ? "compute" : "memory";
      pr.decode_cost += dec[i].cost;
      pr.decode_floor.floor_ms += dec[i].floor.floor_ms;
      pr.decode_floor.compute_ms += dec[i].floor.compute_ms;
      pr.decode_floor.memory_ms += dec[i].floor.memory_ms;
      dec_expected += dec[i].expected_ms;
      pr.ops.push_back(dec[i]);
    }
    pr.decode_floor.bound =
        pr.decode_floor.compute_ms >= pr.decode_floor.memory_ms ? "compute" : "memory";
  }

  // ---- sampling: once after prefill, once per decode step
  OpPrediction smp;
  smp.stage = "sample";
  smp.op = Op::sample;
  smp.calls = s.output;
  smp.cost = sample_cost(m, p, s.batch) * double(s.output);
  smp.peak_flops_per_s = c.peak_for(Op::sample, p);
  smp.ridge = bw > 0 ? smp.peak_flops_per_s / bw : 0;
  smp.floor = roofline_point(smp.cost, smp.peak_flops_per_s, bw);
  smp.expected_ms = expected_ms(smp.cost, smp.peak_flops_per_s, bw, e);
  pr.sample_cost = smp.cost;
  pr.sample_floor = smp.floor;
  pr.ops.push_back(smp);
  const double smp_floor_one = smp.floor.floor_ms / double(s.output);
  const double smp_exp_one = smp.expected_ms / double(s.output);

  // ---- headline times
  pr.floor = floor_times(s);
  Times& x = pr.expected;
  x.prefill_ms = pre_expected;
  x.ttft_ms = pre_expected + smp_exp_one;
  x.decode_ms = dec_expected + double(steps) * (smp_exp_one + e.step_overhead_ms);
  if (steps > 0) {
    x.tpot_ms = x.decode_ms / double(steps);
    x.decode_tokens_per_s = double(s.batch) * double(steps) / (x.decode_ms / 1e3);
  }
  x.e2e_ms = x.ttft_ms + x.decode_ms;
  (void)smp_floor_one;

  // ---- memory
  pr.weight_bytes = weight_bytes(m, p);
  pr.kv_cache_bytes = kv_cache_bytes(m, p, s.batch, s.input + s.output);
  pr.working_set_bytes = pr.weight_bytes + pr.kv_cache_bytes;
  pr.fits = c.memory_bytes > 0 && pr.working_set_bytes <= c.memory_bytes;
  pr.max_batch = max_batch_that_fits(s);

  // ---- where decode and prefill turn compute-bound
  pr.search_limit_batch = int64_t(1) << 16;
  auto step_ops = [&](int64_t b) { return forward_cost(m, p, b, 1, s.input); };
  pr.linear_compute_bound_batch = first_true(
      1, pr.search_limit_batch, [&](int64_t b) { return compute_bound(step_ops(b), c, p, true); });
  pr.step_compute_bound_batch = first_true(
      1, pr.search_limit_batch, [&](int64_t b) { return compute_bound(step_ops(b), c, p, false); });
  pr.prefill_compute_bound_input = first_true(1, m.max_seq_len, [&](int64_t n) {
    return compute_bound(forward_cost(m, p, s.batch, n, 0), c, p, false);
  });
  return pr;
}

}  // namespace latprof
