#pragma once
// Run reports built in the tests: FLOPs and bytes from the cost model for a built-in model, times
// from the roofline floor at a fixed efficiency, repeats spread by a given jitter, and a
// timeline laid out like the runner's (stages > decode steps > per-layer ops).
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "core/workload.hpp"
#include "model/config.hpp"
#include "model/cost_model.hpp"
#include "report/report.hpp"
#include "report/requests.hpp"
#include "roofline/ceilings.hpp"

namespace report_test {

struct Fixture {
  std::string model = "tiny";
  std::string dtype = "fp16";
  int64_t input = 16, output = 8, batch = 1;
  int repeat = 5;
  double efficiency = 0.4;  // floor / time of every op
  double slowdown = 1.0;    // multiplies every time
  double jitter = 0.02;     // repeats spread over time * (1 -+ jitter)
  std::string hostname = "test-host";
};

inline latprof::Ceilings fixture_ceilings() {
  latprof::Ceilings c;
  c.device = "Test CPU";
  c.source = "test fixture";
  c.mem_bw_bytes_per_s = 30e9;
  c.matmul_flops_per_s = 400e9;
  c.vector_flops_per_s = 400e9;
  c.int8_ops_per_s = 800e9;
  c.memory_bytes = 64e9;
  c.cache_bytes = 32e6;
  return c;
}

inline void derive(latprof::Row& row, double peak, const latprof::Ceilings& c, double floor_ms,
                   const std::string& bound) {
  row.arithmetic_intensity = row.cost.intensity();
  row.floor_ms = floor_ms;
  row.bound = bound;
  const double s = row.time_ms / 1e3;
  row.achieved_flops_per_s = row.cost.flops / s;
  row.achieved_bytes_per_s = row.cost.bytes() / s;
  row.roofline_fraction = floor_ms / row.time_ms;
  row.mfu = row.cost.model_flops / s / peak;
  row.mbu = row.cost.bytes() / s / c.mem_bw_bytes_per_s;
}

inline latprof::RunReport make_report(const Fixture& f = {}) {
  using namespace latprof;
  RunReport r;
  const ModelConfig m = find_model(f.model);
  const Precision p = precision_for(f.dtype, 4, 2);
  r.ceilings = fixture_ceilings();
  r.tool = {{"name", "latprof"},  {"version", "0.1.0"},      {"git_commit", "0123456789ab"},
            {"git_dirty", false}, {"build_type", "Release"}, {"compiler", "test"}};
  r.machine = {{"hostname", f.hostname}, {"cpu", "Test CPU"}, {"cores", 8}};
  r.created_utc = "2026-01-01T00:00:00Z";
  RunInfo& ri = r.run;
  ri.model = m.name;
  ri.model_source = "builtin";
  ri.weights = "synthetic (seed 42)";
  ri.dtype = p.name();
  ri.backend = "cpu";
  ri.device = "Test CPU";
  ri.input_tokens = f.input;
  ri.output_tokens = f.output;
  ri.batch = f.batch;
  ri.threads = 8;
  ri.repeat = f.repeat;
  ri.tokenizer = "test";
  r.model_config = model_to_json(m);
  r.setup = nlohmann::json::object();
  r.ceilings_info = nlohmann::json::object();

  const OpCosts pre = forward_cost(m, p, f.batch, f.input, 0);
  const OpCosts dec = decode_cost(m, p, f.batch, f.input, f.output - 1);
  OpCosts smp{};
  smp[int(Op::sample)] = sample_cost(m, p, f.batch) * double(f.output);
  const std::pair<const char*, const OpCosts*> stages[] = {
      {"prefill", &pre}, {"decode", &dec}, {"sample", &smp}};
  auto spread = [&](Row& row) {
    row.time_min_ms = row.time_ms * (1 - f.jitter);
    row.time_max_ms = row.time_ms * (1 + f.jitter);
  };
  double stage_ms[3] = {0, 0, 0};
  for (int s = 0; s < 3; ++s) {
    for (int i = 0; i < kNumOps; ++i) {
      const Cost& c = (*stages[s].second)[i];
      if (c.bytes() <= 0) continue;
      const double peak = r.ceilings.peak_for(static_cast<Op>(i), p);
      const RooflinePoint rp = roofline_point(c, peak, r.ceilings.mem_bw_bytes_per_s);
      Row row;
      row.stage = stages[s].first;
      row.name = op_name(static_cast<Op>(i));
      row.cost = c;
      row.calls = s == 1 ? f.output - 1 : s == 2 ? f.output : 1;
      row.time_ms = rp.floor_ms / f.efficiency * f.slowdown;
      spread(row);
      derive(row, peak, r.ceilings, rp.floor_ms, rp.bound);
      stage_ms[s] += row.time_ms;
      r.ops.push_back(row);
    }
  }
  for (auto& o : r.ops)
    o.share = o.time_ms / stage_ms[o.stage == "prefill" ? 0 : o.stage == "decode" ? 1 : 2];
  const double host_ms = 0.01 * f.slowdown;  // tokenize, detokenize, serialize
  const char* names[] = {"tokenize", "prefill", "decode", "sample", "detokenize", "serialize"};
  double e2e = 0;
  for (const char* n : names) {
    Row row;
    row.name = n;
    const std::string s = n;
    const int k = s == "prefill" ? 0 : s == "decode" ? 1 : s == "sample" ? 2 : -1;
    row.time_ms = k >= 0 ? stage_ms[k] : host_ms;
    row.calls = 1;
    spread(row);
    if (k >= 0) {
      row.cost = total(*stages[k].second);
      const RooflinePoint rp = roofline_ops(*stages[k].second, r.ceilings, p);
      derive(row, r.ceilings.matmul_flops_per_s, r.ceilings, rp.floor_ms, rp.bound);
    }
    e2e += row.time_ms;
    r.stages.push_back(row);
  }
  for (auto& s : r.stages) s.share = s.time_ms / e2e;

  Metrics& mt = r.metrics;
  const int64_t steps = f.output - 1;
  const double step_ms = steps > 0 ? stage_ms[1] / double(steps) : 0;
  for (int64_t k = 0; k < steps; ++k)  // step time grows with the context
    r.decode_step_ms.push_back(step_ms *
                               (0.95 + 0.1 * double(k) / double(std::max<int64_t>(1, steps - 1))));
  for (int i = 0; i < f.repeat; ++i)
    r.repeat_e2e_ms.push_back(e2e *
                              (1 + f.jitter * (f.repeat > 1 ? 2.0 * i / (f.repeat - 1) - 1 : 0)));
  mt.e2e_ms = e2e;
  mt.ttft_ms = r.stages[0].time_ms + stage_ms[0] + stage_ms[2] / double(f.output);
  mt.tpot_ms = step_ms;
  mt.itl_ms = percentiles(r.decode_step_ms);
  mt.e2e_repeats_ms = percentiles(r.repeat_e2e_ms);
  mt.prefill_tokens_per_s = double(f.batch * f.input) / (stage_ms[0] / 1e3);
  mt.decode_tokens_per_s = steps > 0 ? double(f.batch * steps) / (stage_ms[1] / 1e3) : 0;
  mt.mfu = (r.stages[1].cost.model_flops + r.stages[2].cost.model_flops) /
           ((stage_ms[0] + stage_ms[1]) / 1e3) / r.ceilings.matmul_flops_per_s;
  mt.mbu = r.stages[2].mbu;
  r.notes.push_back("test fixture: times are floor / efficiency");

  // Timeline: tokenize, prefill (embed, layers, final norm, lm_head), sample, decode steps.
  double t_us = 0;
  auto push = [&](const std::string& name, const std::string& stage, int layer, int step,
                  double dur_us) {
    r.timeline.push_back({name, stage, layer, step, t_us, dur_us});
  };
  auto forward = [&](const std::string& stage, int step, double total_us) {
    const Op layer_ops[] = {Op::norm,   Op::qkv_proj, Op::rope,    Op::attention,
                            Op::o_proj, Op::residual, Op::norm,    Op::mlp_gate_up,
                            Op::swiglu, Op::mlp_down, Op::residual};
    const double n = double(3 + m.n_layers * 11);
    const double each = total_us / n;
    push("embed", stage, -1, step, each);
    t_us += each;
    for (int l = 0; l < int(m.n_layers); ++l)
      for (Op o : layer_ops) {
        push(op_name(o), stage, l, step, each);
        t_us += each;
      }
    for (Op o : {Op::norm, Op::lm_head}) {
      push(op_name(o), stage, -1, step, each);
      t_us += each;
    }
  };
  push("tokenize", "", -1, -1, host_ms * 1e3);
  t_us += host_ms * 1e3;
  push("prefill", "", -1, -1, stage_ms[0] * 1e3);
  forward("prefill", -1, stage_ms[0] * 1e3);
  const double sample_us = stage_ms[2] * 1e3 / double(f.output);
  push("sample", "", -1, 0, sample_us);
  push("sample", "sample", -1, 0, sample_us);
  t_us += sample_us;
  for (int k = 1; k <= int(steps); ++k) {
    const double fwd_us = r.decode_step_ms[size_t(k - 1)] * 1e3;
    push("decode_step", "", -1, k, fwd_us);
    forward("decode", k, fwd_us);
    push("sample", "", -1, k, sample_us);
    push("sample", "sample", -1, k, sample_us);
    t_us += sample_us;
  }
  push("serialize", "", -1, -1, host_ms * 1e3);
  return r;
}

// A load-mode report (`run --requests`): the fixture's stages and ops, plus `requests` requests
// built by hand and turned into the report's records and summary by report/requests (the same
// code the runner uses), and engine steps over the run. Request k arrives at 5k ms, waits
// 0.5 + 0.1k ms, has its first token 2 ms after that, then output - 1 gaps of 1 + 0.1j ms
// (plus `itl_spike_ms` on request 0's first gap), and finishes 0.01 ms after its last token.
// Request 3 has no queue time (as the HTTP client sees it), request 7 one output token.
struct LoadFixture {
  int requests = 12;
  double itl_spike_ms = 0;
  std::string slo = "ttft:3ms";
};

inline latprof::RunReport make_load_report(const LoadFixture& lf = {}) {
  using namespace latprof;
  RunReport r = make_report();
  r.run.repeat = 1;
  r.timeline.clear();  // the load mode has no single-request timeline
  const workload::Slo slo = lf.slo.empty() ? workload::Slo{} : workload::Slo::parse(lf.slo);
  std::vector<RequestRecord> recs;
  double end_ms = 0;
  for (int k = 0; k < lf.requests; ++k) {
    RequestRecord q;
    q.id = k;
    q.input_tokens = 16 + k;
    const int out = k == 7 ? 1 : 4 + k % 5;
    q.arrival_ms = 5.0 * k;
    const double queue = 0.5 + 0.1 * k;
    if (k != 3) q.queue_ms = queue;
    double t = q.arrival_ms + queue + 2;
    for (int j = 0; j < out; ++j) {
      if (j) t += 1 + 0.1 * j + (k == 0 && j == 1 ? lf.itl_spike_ms : 0);
      q.token_ms.push_back(t);
    }
    q.output_tokens = out;
    q.finished_ms = t + 0.01;
    q.preemptions = k == 5 ? 1 : 0;
    q.prefix_hit_tokens = k % 4 == 0 ? 16 : 0;
    const double e2e = q.e2e_ms();
    q.classes_ms = LatencyClasses{0.2 * e2e, 0.3 * e2e, 0, 0.5 * e2e};
    end_ms = std::max(end_ms, q.finished_ms);
    recs.push_back(q);
  }
  r.requests = nlohmann::json::array();
  for (const auto& q : recs) r.requests.push_back(request_to_json(q, slo));
  r.summary = summary_to_json(summarize(recs, slo));
  r.load = {{"requests", lf.requests},
            {"rate", 200.0},
            {"arrival", "constant"},
            {"burstiness", 1.0},
            {"input", "16"},
            {"output", "uniform:1:8"},
            {"dataset", nullptr},
            {"slo", lf.slo.empty() ? nlohmann::json() : nlohmann::json(lf.slo)},
            {"prefix_cache", false},
            {"duration_ms", end_ms}};
  // Steps of 0.8 ms every ms while a request is in flight; a request prefills in the step after
  // its queue time and decodes in the steps up to its last token.
  r.steps.clear();
  r.decode_step_ms.clear();
  for (int64_t ms = 0, index = 0; ms < int64_t(end_ms); ++ms) {
    StepRow st;
    for (const auto& q : recs) {
      const double first = q.token_ms.front(), last = q.token_ms.back();
      const double start = q.arrival_ms + (q.queue_ms ? *q.queue_ms : 0.5);
      if (double(ms) <= start && start < double(ms + 1)) {
        st.prefill_tokens += q.input_tokens;
        ++st.seqs;
      } else if (first <= double(ms) && double(ms) < last) {
        ++st.decode_tokens;
        ++st.seqs;
      }
    }
    if (st.seqs == 0) continue;
    st.index = index++;
    st.start_ms = double(ms);
    st.time_ms = 0.8;
    st.kv_usage = 0.05 * double(st.seqs);
    st.kv_blocks_used = 2 * st.seqs;
    r.steps.push_back(st);
  }
  return r;
}

// A file under the test binary's directory (the build tree), for artifacts.
inline std::filesystem::path artifact_path(const std::string& name) {
  const auto dir = std::filesystem::canonical("/proc/self/exe").parent_path() / "artifacts";
  std::filesystem::create_directories(dir);
  return dir / name;
}

// The non-empty lines of a text (CSV, JSON Lines), without carriage returns.
inline std::vector<std::string> lines_of(const std::string& s) {
  std::vector<std::string> out;
  std::istringstream in(s);
  for (std::string l; std::getline(in, l);) {
    if (!l.empty() && l.back() == '\r') l.pop_back();
    if (!l.empty()) out.push_back(l);
  }
  return out;
}

inline void write_text(const std::filesystem::path& p, const std::string& s) {
  std::ofstream o(p, std::ios::binary);
  o << s;
}

}  // namespace report_test
