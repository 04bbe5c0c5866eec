// latprof roofline: what a model must cost on a device, from the cost model alone (nothing runs);
// or, with --from, a measured run's ops next to their floors and projected onto another device.
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>

#include "cli/commands.hpp"
#include "core/atomic_file.hpp"
#include "core/error.hpp"
#include "core/format.hpp"
#include "report/plot.hpp"
#include "report/report.hpp"
#include "roofline/fit.hpp"
#include "roofline/flags.hpp"

namespace latprof::cli {

namespace {

struct RooflineArgs {
  ScenarioFlags f;
  std::string from, json, svg;
};

std::string pct_or_dash(double v) {
  return v > 0 ? fmt_pct(v) : "-";
}

void print_ceilings(const Ceilings& c) {
  std::printf("device:   %s\n", c.device.c_str());
  std::printf(
      "  roofs:  %s matmul, %s vector (elementwise), %s int8, %s memory, %s "
      "capacity, %s last-level cache\n",
      fmt_rate(c.matmul_flops_per_s, "FLOP/s").c_str(),
      fmt_rate(c.vector_flops_per_s, "FLOP/s").c_str(),
      c.int8_ops_per_s > 0 ? fmt_rate(c.int8_ops_per_s, "OP/s").c_str() : "no",
      fmt_rate(c.mem_bw_bytes_per_s, "B/s").c_str(), fmt_bytes(c.memory_bytes).c_str(),
      fmt_bytes(c.cache_bytes).c_str());
  std::printf("  source: %s\n", c.source.c_str());
}

void print_times(const char* label, const Times& t) {
  std::printf("%-9s TTFT %-10s TPOT %-10s E2E %-10s prefill %-10s decode %s tokens/s\n", label,
              fmt_ms(t.ttft_ms).c_str(), t.tpot_ms > 0 ? fmt_ms(t.tpot_ms).c_str() : "-",
              fmt_ms(t.e2e_ms).c_str(), fmt_ms(t.prefill_ms).c_str(),
              t.decode_tokens_per_s > 0 ? fmt_fixed(t.decode_tokens_per_s, 1).c_str() : "-");
}

int run_prediction(const RooflineArgs& a) {
  if (!a.json.empty()) check_writable(a.json, "--json");
  if (!a.svg.empty()) check_writable(a.svg, "--svg");
  check_distinct_outputs({{"--json", a.json}, {"--svg", a.svg}});
  HardwareSpec spec;
  const Scenario s = make_scenario(a.f, &spec);
  const Efficiency eff = a.f.factors();
  const Prediction p = predict(s, eff);
  const Precision& pr = s.precision;
  const int64_t steps = s.output - 1;

  std::printf(
      "latprof roofline: %s, weights %s, KV cache %d B/elem, activations %d B/elem; "
      "batch %lld, input %lld, output %lld (%lld decode steps)\n",
      s.model.name.c_str(), pr.name().c_str(), pr.kv_bytes, pr.act_bytes, (long long)s.batch,
      (long long)s.input, (long long)s.output, (long long)steps);
  print_ceilings(s.ceilings);
  std::printf("  ridge:  %s FLOP/byte for the matmul roof%s\n",
              fmt_fixed(s.ceilings.ridge(pr), 1).c_str(),
              pr.weights == WeightFormat::int8_w8a8 ? " (INT8 peak, W8A8)" : "");
  std::printf(
      "\nFLOPs: exec = executed (causal attention), model = MFU convention (2 x matmul "
      "params/token + full attention). Decode rows: per step, mean of %lld steps.\n",
      (long long)steps);
  std::printf("%-8s %-12s %11s %11s %11s %9s %7s %-7s %10s %10s\n", "stage", "op", "FLOPs exec",
              "FLOPs model", "bytes", "FLOP/B", "ridge", "bound", "floor", "expected");
  auto line = [&](const std::string& stage, const std::string& name, const Cost& c, double div,
                  double ridge, const RooflinePoint& f, double exp_ms) {
    std::printf("%-8s %-12s %11s %11s %11s %9s %7s %-7s %10s %10s\n", stage.c_str(), name.c_str(),
                fmt_count(c.flops / div).c_str(), fmt_count(c.model_flops / div).c_str(),
                fmt_bytes(c.bytes() / div).c_str(),
                c.bytes() > 0 ? fmt_fixed(c.intensity(), c.intensity() < 10 ? 2 : 0).c_str() : "-",
                ridge > 0 ? fmt_fixed(ridge, 0).c_str() : "", f.bound.c_str(),
                fmt_ms(f.floor_ms / div).c_str(), fmt_ms(exp_ms / div).c_str());
  };
  std::string last;
  for (const auto& o : p.ops) {
    if (o.cost.flops <= 0 && o.cost.bytes() <= 0) continue;
    const double div = o.stage == "decode" ? double(std::max<int64_t>(1, o.calls)) : 1;
    line(o.stage, op_name(o.op), o.cost, div, o.ridge, o.floor, o.expected_ms);
  }
  double pre_exp = 0, dec_exp = 0;
  for (const auto& o : p.ops) {
    if (o.stage == "prefill") pre_exp += o.expected_ms;
    if (o.stage == "decode") dec_exp += o.expected_ms;
  }
  std::printf("%s\n", std::string(104, '-').c_str());
  line("prefill", "(stage)", p.prefill_cost, 1, 0, p.prefill_floor, pre_exp);
  if (steps > 0)
    line("decode", "(per step)", p.decode_cost, double(steps), 0, p.decode_floor,
         dec_exp + double(steps) * eff.step_overhead_ms);
  std::printf("\n");
  print_times("floor:", p.floor);
  print_times("expected:", p.expected);
  std::printf(
      "  expected assumes %s of peak bandwidth and %s of peak FLOP/s, %s per decode "
      "step (justification: --json 'efficiency', README.md 'Efficiency factors of expected')\n",
      fmt_pct(eff.memory).c_str(), fmt_pct(eff.compute).c_str(),
      fmt_ms(eff.step_overhead_ms).c_str());

  std::printf(
      "\nmemory:   weights %s + KV cache %s (%s per token x %lld tokens x batch %lld) = "
      "%s of %s: %s; largest batch that fits: %lld\n",
      fmt_bytes(p.weight_bytes).c_str(), fmt_bytes(p.kv_cache_bytes).c_str(),
      fmt_bytes(kv_bytes_per_token(s.model, pr)).c_str(), (long long)(s.input + s.output),
      (long long)s.batch, fmt_bytes(p.working_set_bytes).c_str(),
      fmt_bytes(s.ceilings.memory_bytes).c_str(), p.fits ? "fits" : "DOES NOT FIT",
      (long long)p.max_batch);
  std::printf(
      "          (weights + KV only: activations and framework workspace are not "
      "counted)\n");
  auto bound_at = [&](int64_t b) {
    if (b <= 0) return "not up to batch " + std::to_string(p.search_limit_batch);
    return "from batch " + std::to_string(b) + (b > p.max_batch ? " (does not fit in memory)" : "");
  };
  std::printf(
      "compute:  decode linear layers turn compute-bound %s; the whole decode step %s "
      "(context %lld)\n",
      bound_at(p.linear_compute_bound_batch).c_str(), bound_at(p.step_compute_bound_batch).c_str(),
      (long long)s.input);
  if (p.prefill_compute_bound_input > 0)
    std::printf("          prefill at batch %lld is compute-bound from %lld prompt tokens\n",
                (long long)s.batch, (long long)p.prefill_compute_bound_input);
  else
    std::printf("          prefill at batch %lld stays memory-bound up to the context window\n",
                (long long)s.batch);
  if (!p.fits)
    std::printf("warning:  this batch does not fit in %s; the times above assume it did\n",
                fmt_bytes(s.ceilings.memory_bytes).c_str());

  nlohmann::json j = prediction_json(p, scenario_argv("roofline", a.f));
  j["ceilings"]["info"] = {{"hardware", hardware_to_json(spec)}};
  if (!a.json.empty()) {
    write_file_atomic(a.json, j.dump(2) + "\n");
    std::printf("wrote %s\n", a.json.c_str());
  }
  if (!a.svg.empty()) {
    const RunReport r = report_from_json(j, "prediction");  // points at their floors
    write_file_atomic(a.svg, roofline_svg(r, nullptr));
    std::printf("wrote %s\n", a.svg.c_str());
  }
  return 0;
}

// ---- --from: a measured run ------------------------------------------------------------------

int run_from(const RooflineArgs& a) {
  RunReport r = load_report(a.from);
  const Ceilings& c = r.ceilings;
  std::printf(
      "latprof roofline --from %s: %s %s on %s (%s backend); batch %lld, input %lld, "
      "output %lld\n",
      a.from.c_str(), r.run.model.c_str(), r.run.dtype.c_str(), r.run.device.c_str(),
      r.run.backend.c_str(), (long long)r.run.batch, (long long)r.run.input_tokens,
      (long long)r.run.output_tokens);
  print_ceilings(c);
  std::printf("\n%-8s %-12s %10s %10s %9s %-7s %7s %7s\n", "stage", "op", "measured", "floor",
              "%roofline", "bound", "MFU", "MBU");
  for (const auto* rows : {&r.stages, &r.ops})
    for (const Row& o : *rows) {
      if (!(o.time_ms > 0)) continue;
      std::printf("%-8s %-12s %10s %10s %9s %-7s %7s %7s\n",
                  (o.stage.empty() ? "stage" : o.stage).c_str(), o.name.c_str(),
                  fmt_ms(o.time_ms).c_str(), o.floor_ms > 0 ? fmt_ms(o.floor_ms).c_str() : "-",
                  pct_or_dash(o.roofline_fraction).c_str(), o.bound.c_str(),
                  pct_or_dash(o.mfu).c_str(), pct_or_dash(o.mbu).c_str());
    }

  // the report's physics checks (added by the runner), errors first
  for (const char* level : {"error", "warning", "info"})
    for (const Check& k : r.checks)
      if (k.level == level)
        std::printf("%s: %s: %s\n", k.level.c_str(), k.subject.c_str(), k.message.c_str());

  // decode-step fit: time = intercept + slope x context
  const LinearFit fit = fit_decode_steps(r.decode_step_ms, r.run.input_tokens);
  ModelConfig m;
  bool have_model = false;
  try {
    m = model_from_json(r.model_config, a.from + ": model");
    have_model = true;
  } catch (const UsageError&) {
  }
  const Precision prec = run_precision(r.run);
  if (fit.ok) {
    std::printf("\ndecode-step fit (%lld steps, r2 %.3f): step = %s + %s us x context\n",
                (long long)fit.n, fit.r2, fmt_ms(fit.intercept).c_str(),
                fmt_fixed(fit.slope * 1e3, 3).c_str());
    if (have_model) {
      const double kv_tok = kv_bytes_per_token(m, prec) * double(std::max<int64_t>(1, r.run.batch));
      const double bw = kv_bandwidth_from_slope(fit.slope, kv_tok);
      std::printf(
          "  slope: one more cached token costs %s us: %s of KV read per step -> "
          "effective KV-read bandwidth %s\n",
          fmt_fixed(fit.slope * 1e3, 3).c_str(), fmt_bytes(kv_tok).c_str(),
          bw > 0 ? fmt_rate(bw, "B/s").c_str() : "n/a (slope not positive)");
      const double wfloor =
          c.mem_bw_bytes_per_s > 0 ? weight_bytes(m, prec) / c.mem_bw_bytes_per_s * 1e3 : 0;
      std::printf(
          "  intercept: %s = weight streaming (floor %s at %s) + fixed per-step overhead "
          "%s\n",
          fmt_ms(fit.intercept).c_str(), fmt_ms(wfloor).c_str(),
          fmt_rate(c.mem_bw_bytes_per_s, "B/s").c_str(), fmt_ms(fit.intercept - wfloor).c_str());
    }
  } else {
    std::printf("\ndecode-step fit: needs at least 2 decode steps (the report has %zu)\n",
                r.decode_step_ms.size());
  }

  if (a.f.hw.empty() && a.f.hw_file.empty()) return 0;

  // ---- projection onto another device
  HardwareSpec spec;
  const Ceilings t = resolve_ceilings(a.f.hw, a.f.hw_file, &spec);
  const Efficiency eff = a.f.factors();
  validate_efficiency(eff);
  std::printf("\nprojection onto %s (%s)\n", t.device.c_str(), t.source.c_str());
  std::printf(
      "  assumes: the same model, dtype, batch and lengths; each op keeps the FLOPs and "
      "bytes the cost model gave the measured run (with the activation and KV widths "
      "of its backend); 'at measured %%' keeps each op's measured fraction of its "
      "roofline, 'at efficiency' uses %s of peak bandwidth and %s of peak FLOP/s; time "
      "not attributed to an op (host work, launch gaps) stays as measured.\n",
      fmt_pct(eff.memory).c_str(), fmt_pct(eff.compute).c_str());
  std::printf("%-8s %-12s %10s %12s %14s %14s\n", "stage", "op", "measured", "target floor",
              "at measured %", "at efficiency");
  std::map<std::string, double> op_meas, op_proj, op_eff;
  for (const Row& o : r.ops) {
    if (!(o.time_ms > 0) || (o.cost.flops <= 0 && o.cost.bytes() <= 0)) continue;
    Op op = Op::embed;
    double peak_t = t.matmul_flops_per_s, peak_s = c.matmul_flops_per_s;
    try {
      op = op_from_name(o.name);
      peak_t = t.peak_for(op, prec);
      peak_s = c.peak_for(op, prec);
    } catch (const UsageError&) {
    }
    const RooflinePoint tf = roofline_point(o.cost, peak_t, t.mem_bw_bytes_per_s);
    const double sf =
        o.floor_ms > 0 ? o.floor_ms : roofline_point(o.cost, peak_s, c.mem_bw_bytes_per_s).floor_ms;
    const double proj = sf > 0 ? o.time_ms * tf.floor_ms / sf : o.time_ms;
    const double t_c = peak_t > 0 ? o.cost.flops / (peak_t * eff.compute) * 1e3 : 0;
    const double t_m = o.cost.bytes() / (t.mem_bw_bytes_per_s * eff.memory) * 1e3;
    const double at_eff = std::max(t_c, t_m);
    std::printf("%-8s %-12s %10s %12s %14s %14s\n", o.stage.c_str(), o.name.c_str(),
                fmt_ms(o.time_ms).c_str(), fmt_ms(tf.floor_ms).c_str(), fmt_ms(proj).c_str(),
                fmt_ms(at_eff).c_str());
    op_meas[o.stage] += o.time_ms;
    op_proj[o.stage] += proj;
    op_eff[o.stage] += at_eff;
  }
  // stage totals: projected ops + the stage's unattributed time
  double delta_proj = 0, delta_eff = 0, dec_meas = 0, dec_proj = 0, dec_eff = 0, pre_meas = 0,
         pre_proj = 0, pre_eff = 0;
  for (const Row& s : r.stages) {
    if (!op_meas.count(s.name)) continue;
    const double rest = std::max(0.0, s.time_ms - op_meas[s.name]);
    const double p = op_proj[s.name] + rest, e = op_eff[s.name] + rest;
    delta_proj += s.time_ms - p;
    delta_eff += s.time_ms - e;
    if (s.name == "decode") dec_meas = s.time_ms, dec_proj = p, dec_eff = e;
    if (s.name == "prefill") pre_meas = s.time_ms, pre_proj = p, pre_eff = e;
  }
  const Metrics& mm = r.metrics;
  auto scale = [](double v, double num, double den) { return den > 0 ? v * num / den : 0.0; };
  std::printf("%-21s %10s %12s %14s %14s\n", "", "measured", "", "at measured %", "at efficiency");
  std::printf("%-21s %10s %12s %14s %14s\n", "TTFT", fmt_ms(mm.ttft_ms).c_str(), "",
              fmt_ms(mm.ttft_ms - (pre_meas - pre_proj)).c_str(),
              fmt_ms(mm.ttft_ms - (pre_meas - pre_eff)).c_str());
  std::printf("%-21s %10s %12s %14s %14s\n", "TPOT", fmt_ms(mm.tpot_ms).c_str(), "",
              fmt_ms(scale(mm.tpot_ms, dec_proj, dec_meas)).c_str(),
              fmt_ms(scale(mm.tpot_ms, dec_eff, dec_meas)).c_str());
  std::printf("%-21s %10s %12s %14s %14s\n", "E2E", fmt_ms(mm.e2e_ms).c_str(), "",
              fmt_ms(mm.e2e_ms - delta_proj).c_str(), fmt_ms(mm.e2e_ms - delta_eff).c_str());
  if (have_model && t.memory_bytes > 0) {
    const double need =
        weight_bytes(m, prec) +
        kv_cache_bytes(m, prec, r.run.batch, r.run.input_tokens + r.run.output_tokens);
    std::printf("memory on the target: %s of %s: %s\n", fmt_bytes(need).c_str(),
                fmt_bytes(t.memory_bytes).c_str(),
                need <= t.memory_bytes ? "fits" : "DOES NOT FIT");
  }
  return 0;
}

}  // namespace

CommandFn add_roofline_command(CLI::App& app) {
  auto a = std::make_shared<RooflineArgs>();
  CLI::App* sub = app.add_subcommand(
      "roofline",
      "Roofline floors and expected times of a model on a device from the cost model (runs "
      "nothing); --from report.json: a measured run next to its floors, projected with --hw");
  add_scenario_flags(sub, a->f, true);
  sub->add_option("--from", a->from, "A run report (latprof run --json) to analyse");
  sub->add_option("--json", a->json, "Write the prediction as JSON");
  sub->add_option("--svg", a->svg, "Write the roofline chart of the prediction as SVG");
  return [a]() -> int {
    if (!a->from.empty() && (!a->json.empty() || !a->svg.empty()))
      usage_error(
          "--json and --svg write a prediction; with --from, plot the report with "
          "'latprof plot REPORT'");
    return a->from.empty() ? run_prediction(*a) : run_from(*a);
  };
}

}  // namespace latprof::cli
