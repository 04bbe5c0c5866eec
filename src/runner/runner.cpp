#include "runner/runner.hpp"

#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>
#include <fstream>
#include <thread>

#include "backend/backend.hpp"
#include "backend/cpu/cpu_backend.hpp"
#include "core/checked.hpp"
#include "core/error.hpp"
#include "core/format.hpp"
#include "core/progress.hpp"
#include "latprof/build_info.hpp"
#include "model/open.hpp"
#include "roofline/fit.hpp"
#include "roofline/physics.hpp"
#include "runner/forward.hpp"
#include "runner/host_ceilings.hpp"
#include "runner/model.hpp"
#include "runner/profiler.hpp"

namespace latprof {

namespace {

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// What one timed request measured.
struct RequestTimes {
  double e2e_ms = 0;                 // wall clock, host, after the final synchronisation
  double stage_ms[kNumStages] = {};  // per stage
  double op_ms[kNumStages][kNumOps] = {};
  int64_t op_calls[kNumStages][kNumOps] = {};
  std::vector<double> step_ms;          // per decode token: forward + sample + detokenize
  std::vector<double> step_forward_ms;  // forward only
  double first_token_ms = 0;            // TTFT: tokenize + prefill + sample + detokenize
  std::vector<int32_t> prompt_ids;      // sequence 0
  std::vector<int32_t> output_ids;      // sequence 0
  std::string output_text;
  std::vector<TraceEvent> timeline;
};

class Request {
 public:
  Request(LoadedModel& m, const Tokenizer& tok, Profiler& prof, const RunOptions& o,
          const std::string& prompt_text)
      : m_(m), tok_(tok), prof_(prof), o_(o), prompt_(prompt_text) {}

  // n_out: tokens to generate per sequence; timeline: keep spans as trace events.
  RequestTimes run(int64_t n_out, bool timeline, bool progress) {
    Backend& b = m_.backend();
    RequestTimes t;
    const int64_t B = o_.batch;
    b.reset_events();
    prof_.clear();
    b.synchronize();
    const auto t_start = Clock::now();
    const int ev_origin = b.record_event();

    // ---- tokenize (host) ----
    std::vector<int32_t> ids;
    {
      NvtxRange r("tokenize");
      const auto t0 = Clock::now();
      std::vector<int32_t> all;
      for (int64_t s = 0; s < B; ++s) {
        std::vector<int32_t> seq = tok_.encode(prompt_, true);
        if (s == 0) ids = seq;
        all.insert(all.end(), seq.begin(), seq.end());
      }
      t.stage_ms[int(Stage::tokenize)] = ms_since(t0);
      const int64_t n_in = int64_t(ids.size());
      if (n_in < 1 || int64_t(all.size()) != n_in * B)
        throw std::logic_error("tokenizer gave an empty or ragged prompt");
      tokens_in_ = n_in;
      host_tokens_ = std::move(all);
    }
    t.prompt_ids = ids;
    const int64_t n_in = tokens_in_;

    // ---- prefill ----
    std::vector<int32_t> next(static_cast<size_t>(B));
    int ev_prefill0, ev_prefill1, ev_sample1;
    {
      NvtxRange r("prefill");
      prof_.set_context(Stage::prefill, -1);
      ev_prefill0 = b.record_event();
      b.copy_to_device(m_.tokens, host_tokens_.data(), host_tokens_.size() * 4);
      const int32_t pos0 = 0;
      b.copy_to_device(m_.pos, &pos0, 4);
      Progress bar("prefill", m_.config().n_layers, progress);
      forward(m_, prof_, B, n_in, [&](int) { bar.advance(); });
      ev_prefill1 = b.record_event();
      bar.finish();
    }
    {
      NvtxRange r("sample");
      prof_.set_context(Stage::sample, 0);
      {
        auto s = prof_.op(Op::sample);
        b.sample(m_.logits, B, m_.config().vocab_size, sampling(), 0, m_.tokens);
      }
      ev_sample1 = b.record_event();
      b.copy_to_host(next.data(), m_.tokens, size_t(B) * 4);
      b.synchronize();
    }
    t.stage_ms[int(Stage::prefill)] = b.elapsed_ms(ev_prefill0, ev_prefill1);
    const double sample0 = b.elapsed_ms(ev_prefill1, ev_sample1);
    t.stage_ms[int(Stage::sample)] += sample0;
    double detok0;
    {
      NvtxRange r("detokenize");
      const auto t0 = Clock::now();
      t.output_text += tok_.decode_token(next[0]);
      detok0 = ms_since(t0);
    }
    t.stage_ms[int(Stage::detokenize)] += detok0;
    t.output_ids.push_back(next[0]);
    t.first_token_ms = ms_since(t_start);
    if (timeline) {
      push_stage(t, "tokenize", 0, t.stage_ms[int(Stage::tokenize)], -1);
      push_stage(t, "prefill", b.elapsed_ms(ev_origin, ev_prefill0),
                 t.stage_ms[int(Stage::prefill)], -1);
      push_stage(t, "sample", b.elapsed_ms(ev_origin, ev_prefill1), sample0, 0);
    }

    // ---- decode ----
    const bool graph = b.graph_enabled();
    Progress bar("decode", n_out - 1, progress);
    for (int64_t k = 1; k < n_out; ++k) {
      NvtxRange r("decode_step");
      const int32_t pos = int32_t(n_in + k - 1);
      b.copy_to_device(m_.pos, &pos, 4);
      prof_.set_context(Stage::decode, int(k));
      // Inside a replayed CUDA graph, per-op events are not meaningful: time the step only.
      const bool saved = prof_.op_events();
      if (graph) prof_.set_op_events(false);
      const int ev0 = b.record_event();
      b.run_step([&] { forward(m_, prof_, B, 1); });
      const int ev1 = b.record_event();
      prof_.set_op_events(saved);
      prof_.set_context(Stage::sample, int(k));
      {
        auto s = prof_.op(Op::sample);
        b.sample(m_.logits, B, m_.config().vocab_size, sampling(), k, m_.tokens);
      }
      const int ev2 = b.record_event();
      b.copy_to_host(next.data(), m_.tokens, size_t(B) * 4);
      b.synchronize();
      const double fwd = b.elapsed_ms(ev0, ev1), smp = b.elapsed_ms(ev1, ev2);
      const auto td = Clock::now();
      t.output_text += tok_.decode_token(next[0]);
      const double det = ms_since(td);
      t.output_ids.push_back(next[0]);
      t.stage_ms[int(Stage::decode)] += fwd;
      t.stage_ms[int(Stage::sample)] += smp;
      t.stage_ms[int(Stage::detokenize)] += det;
      t.step_forward_ms.push_back(fwd);
      t.step_ms.push_back(fwd + smp + det);
      if (timeline) {
        push_stage(t, "decode_step", b.elapsed_ms(ev_origin, ev0), fwd, int(k));
        push_stage(t, "sample", b.elapsed_ms(ev_origin, ev1), smp, int(k));
      }
      bar.advance();
    }
    bar.finish();

    // ---- serialize: the response a server would send ----
    {
      NvtxRange r("serialize");
      const auto t0 = Clock::now();
      nlohmann::json resp = {{"object", "text_completion"},
                             {"model", m_.config().name},
                             {"choices", nlohmann::json::array()}};
      resp["choices"].push_back({{"index", 0},
                                 {"text", t.output_text},
                                 {"token_ids", t.output_ids},
                                 {"finish_reason", "length"}});
      resp["usage"] = {{"prompt_tokens", n_in * B}, {"completion_tokens", n_out * B}};
      response_ = resp.dump();
      t.stage_ms[int(Stage::serialize)] = ms_since(t0);
    }
    b.synchronize();
    t.e2e_ms = ms_since(t_start);

    // ---- op spans ----
    for (const Span& s : prof_.spans()) {
      const double ms = b.elapsed_ms(s.ev_begin, s.ev_end);
      t.op_ms[int(s.stage)][int(s.op)] += ms;
      t.op_calls[int(s.stage)][int(s.op)] += 1;
      if (timeline) {
        TraceEvent e;
        e.name = op_name(s.op);
        e.stage = stage_name(s.stage);
        e.layer = s.layer;
        e.step = s.step;
        e.start_us = b.elapsed_ms(ev_origin, s.ev_begin) * 1e3;
        e.dur_us = ms * 1e3;
        t.timeline.push_back(e);
      }
    }
    if (timeline) {
      const double tail = t.e2e_ms - t.stage_ms[int(Stage::serialize)];
      push_stage(t, "serialize", tail, t.stage_ms[int(Stage::serialize)], -1);
    }
    return t;
  }

  int64_t prompt_tokens() const { return tokens_in_; }

 private:
  SamplingParams sampling() const {
    SamplingParams p;
    p.temperature = o_.temperature;
    p.top_k = o_.top_k;
    p.seed = o_.seed;
    return p;
  }
  static void push_stage(RequestTimes& t, const char* name, double start_ms, double dur_ms,
                         int step) {
    TraceEvent e;
    e.name = name;
    e.step = step;
    e.start_us = start_ms * 1e3;
    e.dur_us = dur_ms * 1e3;
    t.timeline.push_back(e);
  }

  LoadedModel& m_;
  const Tokenizer& tok_;
  Profiler& prof_;
  const RunOptions& o_;
  std::string prompt_;
  std::vector<int32_t> host_tokens_;
  int64_t tokens_in_ = 0;
  std::string response_;
};

// 1-minute load average of the machine (-1 when unknown).
double load_average() {
  std::ifstream in("/proc/loadavg");
  double l = -1;
  in >> l;
  return l;
}

nlohmann::json machine_json(const Backend& b) {
  nlohmann::json j;
  char host[256] = {0};
  gethostname(host, sizeof host - 1);
  j["hostname"] = host;
  j["cpu"] = host_cpu_name();
  j["cores"] = std::thread::hardware_concurrency();
  j["memory_bytes"] = host_memory_total_bytes();
  utsname u{};
  if (uname(&u) == 0) j["os"] = std::string(u.sysname) + " " + u.release + " " + u.machine;
  const DeviceInfo d = b.device();
  j["device"] = {{"backend", d.backend},
                 {"name", d.name},
                 {"memory_bytes", d.memory_total_bytes},
                 {"details", d.details}};
  j["backends"] = describe_backends();
  return j;
}

nlohmann::json tool_json() {
  return {{"name", "latprof"},
          {"version", build::kVersion},
          {"git_commit", build::kGitCommit},
          {"git_dirty", build::kGitDirty},
          {"build_type", build::kBuildType},
          {"compiler", build::kCompiler},
          {"nvtx", kNvtxCompiled}};
}

// Ceilings of the device the run uses: measured by the backend (GPU) or the host probe (CPU).
void measure_ceilings(Backend& b, const RunOptions& o, int threads, RunReport& r) {
  const std::string gpu = b.measure_ceilings_json();
  if (!gpu.empty()) {
    const nlohmann::json j = nlohmann::json::parse(gpu);
    Ceilings& c = r.ceilings;
    c.device = b.device().name;
    c.source = "measured on the device: " + j.value("method", std::string("backend probe"));
    c.mem_bw_bytes_per_s = j.value("memory_bandwidth_bytes_per_s", 0.0);
    c.matmul_flops_per_s = j.value("fp16_flops_per_s", 0.0);
    c.vector_flops_per_s = j.value("fp32_flops_per_s", 0.0);
    c.int8_ops_per_s = j.value("int8_ops_per_s", 0.0);
    c.memory_bytes = b.device().memory_total_bytes;
    c.cache_bytes = j.value("l2_bytes", 0.0);
    r.ceilings_info = j;
    return;
  }
  HostCeilings h = host_ceilings(threads, o.reprobe, o.quiet);
  r.ceilings = h.ceilings;
  r.ceilings_info = h.info;
  r.ceilings_info["triad_bytes_per_s"] = h.triad_bytes_per_s;
}

// Fills the derived columns of a row from its time, cost and the ceilings.
void derive(Row& row, const Ceilings& c, const Precision& p, Op op_for_peak, bool has_cost) {
  if (!has_cost || row.cost.bytes() <= 0) return;
  row.arithmetic_intensity = row.cost.intensity();
  const double peak = c.peak_for(op_for_peak, p);
  const RooflinePoint rp = roofline_point(row.cost, peak, c.mem_bw_bytes_per_s);
  row.floor_ms = rp.floor_ms;
  row.bound = rp.bound;
  if (row.time_ms > 0) {
    const double s = row.time_ms / 1e3;
    row.achieved_flops_per_s = row.cost.flops / s;
    row.achieved_bytes_per_s = row.cost.bytes() / s;
    row.roofline_fraction = row.floor_ms / row.time_ms;
    row.mfu = peak > 0 ? row.cost.model_flops / s / peak : 0;
    row.mbu = c.mem_bw_bytes_per_s > 0 ? row.cost.bytes() / s / c.mem_bw_bytes_per_s : 0;
  }
}

// A stage's bound: the larger of the summed compute and memory floors of its ops.
void derive_stage(Row& row, const OpCosts& ops, const Ceilings& c, const Precision& p) {
  if (row.cost.bytes() <= 0) return;
  const RooflinePoint rp = roofline_ops(ops, c, p);
  row.arithmetic_intensity = row.cost.intensity();
  row.floor_ms = rp.floor_ms;
  row.bound = rp.bound;
  if (row.time_ms > 0) {
    const double s = row.time_ms / 1e3;
    row.achieved_flops_per_s = row.cost.flops / s;
    row.achieved_bytes_per_s = row.cost.bytes() / s;
    row.roofline_fraction = row.floor_ms / row.time_ms;
    row.mfu = c.matmul_flops_per_s > 0 ? row.cost.model_flops / s / c.matmul_flops_per_s : 0;
    row.mbu = c.mem_bw_bytes_per_s > 0 ? row.cost.bytes() / s / c.mem_bw_bytes_per_s : 0;
  }
}

}  // namespace

const char* stage_name(Stage s) {
  static const char* const names[kNumStages] = {"tokenize", "prefill",    "decode",
                                                "sample",   "detokenize", "serialize"};
  return names[int(s)];
}

void validate_run_options(const RunOptions& o, int64_t max_seq_len) {
  if (o.prompt.empty() && (o.input < 1 || o.input > kMaxTokens))
    usage_error("--input must be between 1 and " + std::to_string(kMaxTokens) + " tokens (got " +
                std::to_string(o.input) + ")");
  if (o.output < 1 || o.output > kMaxTokens)
    usage_error("--output must be between 1 and " + std::to_string(kMaxTokens) + " tokens (got " +
                std::to_string(o.output) + ")");
  if (o.batch < 1 || o.batch > 4096)
    usage_error("--batch must be between 1 and 4096 (got " + std::to_string(o.batch) + ")");
  if (o.repeat < 1 || o.repeat > 1000)
    usage_error("--repeat must be between 1 and 1000 (got " + std::to_string(o.repeat) + ")");
  if (o.warmup < 0 || o.warmup > 100)
    usage_error("--warmup must be between 0 and 100 (got " + std::to_string(o.warmup) + ")");
  check_threads(o.threads, "--threads");
  if (!std::isfinite(o.temperature) || o.temperature < 0)
    usage_error("--temperature must be a finite number >= 0 (0: greedy; got " +
                std::to_string(o.temperature) + ")");
  if (o.top_k < 0) usage_error("--top-k must be >= 0");
  if (o.prompt.size() > kMaxPromptBytes)
    usage_error("the prompt text is " + std::to_string(o.prompt.size()) +
                " bytes, more than the cap of " + std::to_string(kMaxPromptBytes) + " bytes");
  if (o.prompt.empty() && checked_add(o.input, o.output, "--input + --output") > max_seq_len)
    usage_error("--input " + std::to_string(o.input) + " + --output " + std::to_string(o.output) +
                " = " + std::to_string(o.input + o.output) +
                " tokens exceeds the model's context of " + std::to_string(max_seq_len) +
                "; use fewer tokens");
}

RunReport run_benchmark(const RunOptions& o) {
  RunReport r;
  r.created_utc = utc_now();
  r.tool = tool_json();
  const auto setup0 = Clock::now();

  const double load_before = load_average();
  // ---- flags that need no model first, then the model, tokenizer and prompt ----
  if (o.backend != "auto" && o.backend != "cpu" && o.backend != "cuda")
    usage_error("unknown backend '" + o.backend + "'; use auto, cpu or cuda");
  Precision wanted = precision_for(o.dtype, 4, 2);
  OpenedModel om = open_model(o.model, o.seed);
  const ModelConfig& cfg = om.config;
  validate_run_options(o, cfg.max_seq_len);
  if (wanted.weights == WeightFormat::int8_w8a8)
    usage_error("--dtype int8-w8a8 is a roofline-only precision; run with fp16 or int8");
  const WeightType wtype = wanted.weights == WeightFormat::f16 ? WeightType::f16 : WeightType::i8;

  std::string prompt = o.prompt.empty() ? om.tokenizer->make_prompt(o.input, o.seed) : o.prompt;
  const int64_t n_in = int64_t(om.tokenizer->encode(prompt, true).size());
  if (!o.prompt.empty() && n_in + o.output > cfg.max_seq_len)
    usage_error("the prompt (" + std::to_string(n_in) + " tokens) + --output " +
                std::to_string(o.output) + " exceeds the model's context of " +
                std::to_string(cfg.max_seq_len));
  if (o.prompt.empty() && n_in != o.input)
    throw std::logic_error("prompt builder gave " + std::to_string(n_in) + " tokens, asked " +
                           std::to_string(o.input));

  // ---- backend ----
  BackendOptions bo;
  bo.kind = o.backend;
  bo.threads = o.threads;
  bo.graphs = o.graphs;
  std::string why_not_cuda;
  std::unique_ptr<Backend> backend = create_backend(bo, &why_not_cuda);
  Backend& b = *backend;
  b.set_graph_enabled(o.graphs);
  const DeviceInfo dev = b.device();
  if (!why_not_cuda.empty() && o.backend == "auto")
    r.notes.push_back("CUDA backend not used: " + why_not_cuda);
  const int threads = dev.backend == "cpu"
                          ? (o.threads > 0 ? o.threads : int(std::thread::hardware_concurrency()))
                          : o.threads;
  const Precision p = precision_for(o.dtype, b.act_bytes(), b.kv_bytes());

  // ---- ceilings (before the weights take memory and caches) ----
  const auto tc0 = Clock::now();
  measure_ceilings(b, o, threads, r);
  const double ceilings_ms = ms_since(tc0);

  // ---- weights and KV cache ----
  const int64_t ctx_cap = n_in + o.output;
  const auto ta0 = Clock::now();
  LoadedModel m(cfg, wtype, b, o.batch, n_in, ctx_cap);
  const double alloc_ms = ms_since(ta0);
  const auto tw0 = Clock::now();
  {
    Progress bar("weights", 1, !o.quiet);
    m.load(*om.weights, [&](int64_t done, int64_t total) {
      bar.set(done * 1000 / total);
      (void)bar;
    });
    bar.finish();
  }
  const double weights_ms = ms_since(tw0);
  const Footprint fp = LoadedModel::footprint(cfg, wtype, b, o.batch, n_in, ctx_cap);

  // ---- warm-up: short untimed requests that touch every weight and kernel ----
  Profiler prof(b);
  const auto twu = Clock::now();
  {
    RunOptions wo = o;
    const std::string wprompt =
        o.prompt.empty() ? om.tokenizer->make_prompt(std::min<int64_t>(n_in, 64), o.seed + 1)
                         : prompt;
    Request wreq(m, *om.tokenizer, prof, wo, wprompt);
    for (int i = 0; i < o.warmup; ++i) wreq.run(std::min<int64_t>(o.output, 4), false, false);
  }
  const double warmup_ms = ms_since(twu);

  // ---- timed requests (with activity tracing where the backend has it) ----
  std::string why_no_trace;
  const bool tracing = b.enable_tracing(true, &why_no_trace);
  std::vector<RequestTimes> reps;
  Request req(m, *om.tokenizer, prof, o, prompt);
  for (int i = 0; i < o.repeat; ++i) {
    reps.push_back(req.run(o.output, o.keep_timeline, !o.quiet));
    if (!o.quiet && Progress::terminal() && o.repeat > 1)
      std::fprintf(stderr, "repeat %d/%d: %s\n", i + 1, o.repeat,
                   fmt_ms(reps.back().e2e_ms).c_str());
  }
  if (tracing) {
    b.enable_tracing(false, nullptr);
    const std::string pj = b.take_profile_json();
    if (!pj.empty()) r.profile["trace"] = nlohmann::json::parse(pj);
  } else if (dev.backend != "cpu") {
    r.profile["trace"] = {{"available", false}, {"reason", why_no_trace}};
    r.notes.push_back("activity tracing unavailable: " + why_no_trace);
  }
  // Profiler overhead: the same request with no NVTX ranges, op events or tracing.
  nlohmann::json overhead_json;
  if (o.overhead) {
    prof.set_instrumented(false);
    const RequestTimes bare = req.run(o.output, false, false);
    prof.set_instrumented(true);
    std::vector<double> e;
    for (const auto& rep : reps) e.push_back(rep.e2e_ms);
    const double with = median(e);
    overhead_json = {
        {"instrumented_e2e_ms", with},
        {"bare_e2e_ms", bare.e2e_ms},
        {"overhead_fraction", bare.e2e_ms > 0 ? (with - bare.e2e_ms) / bare.e2e_ms : 0.0},
        {"instrumented",
         tracing ? "NVTX ranges, per-op events, activity tracing" : "NVTX ranges, per-op events"},
        {"note",
         "one bare request against the median instrumented one: within run-to-run "
         "noise when small"}};
  }
  // With CUDA graphs, decode ops were not timed one by one: one eager request attributes them.
  const bool graph = b.graph_enabled();
  RequestTimes attribution;
  if (graph) {
    b.set_graph_enabled(false);
    attribution = req.run(o.output, false, false);
    b.set_graph_enabled(true);
    r.notes.push_back(
        "decode steps timed as CUDA graph replays; the decode op breakdown comes "
        "from one extra eager request (per-op events cannot be taken inside a "
        "graph)");
  }

  // ---- optional profile passes (never mixed into the latency figures) ----
  {
    std::string why;
    if (o.counters) {
      if (b.enable_counters(true, &why)) {
        req.run(o.output, false, false);
        b.enable_counters(false, nullptr);
        const std::string pj = b.take_profile_json();
        if (!pj.empty()) r.profile["counters"] = nlohmann::json::parse(pj);
        r.notes.push_back(
            "hardware counters collected in a separate request; its times are not "
            "used");
      } else {
        r.profile["counters"] = {{"available", false}, {"reason", why}};
        r.notes.push_back("hardware counters unavailable (" + why +
                          "); bytes are the cost model's");
      }
    }
  }

  // ---- pick the median repeat ----
  std::vector<size_t> order(reps.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(),
            [&](size_t a, size_t c) { return reps[a].e2e_ms < reps[c].e2e_ms; });
  const RequestTimes& med = reps[order[order.size() / 2]];

  // ---- run info ----
  RunInfo& ri = r.run;
  ri.model = cfg.name;
  ri.model_source = om.source;
  ri.weights = om.weights->describe();
  ri.dtype = p.name();
  ri.backend = dev.backend;
  ri.device = dev.name;
  ri.input_tokens = n_in;
  ri.output_tokens = o.output;
  ri.batch = o.batch;
  ri.threads = threads;
  ri.repeat = o.repeat;
  ri.warmup = o.warmup;
  ri.seed = o.seed;
  ri.temperature = o.temperature;
  ri.top_k = o.top_k;
  ri.graphs = graph;
  ri.tokenizer = om.tokenizer->name();
  ri.prompt_token_ids = med.prompt_ids;
  ri.output_token_ids = med.output_ids;
  ri.output_text = med.output_text;
  ri.argv = o.argv;
  r.model_config = model_to_json(cfg);
  r.model_config["weight_bytes"] = fp.weights;
  r.machine = machine_json(b);
  r.machine["load_average_1min_before"] = load_before;
  // Other work on the CPU cores makes CPU timings (and the host side of GPU timings) unreliable:
  // a parallel region waits for its slowest thread, so a thread that loses its core stalls all.
  if (const unsigned cores = std::thread::hardware_concurrency();
      load_before >= 0 && cores > 0 && load_before > 0.5 * cores)
    r.checks.push_back({"warning", "machine.load_average_1min_before",
                        "the machine was busy before the run (load average " +
                            fmt_fixed(load_before, 2) + " on " + std::to_string(cores) +
                            " cores): other processes compete for the cores, so these times "
                            "are likely slower and noisier than this machine can do"});

  // ---- cost model ----
  const OpCosts prefill_ops = forward_cost(cfg, p, o.batch, n_in, 0);
  const OpCosts decode_ops = decode_cost(cfg, p, o.batch, n_in, o.output - 1);
  const Cost sample_one = sample_cost(cfg, p, o.batch);
  OpCosts sample_ops{};
  sample_ops[int(Op::sample)] = sample_one * double(o.output);

  // ---- stage rows ----
  auto stage_times = [&](Stage s) {
    std::vector<double> v;
    for (const auto& rep : reps) v.push_back(rep.stage_ms[int(s)]);
    return v;
  };
  std::vector<double> e2es;
  for (const auto& rep : reps) e2es.push_back(rep.e2e_ms);
  const double e2e = median(e2es);
  const Stage order_stages[] = {Stage::tokenize, Stage::prefill,    Stage::decode,
                                Stage::sample,   Stage::detokenize, Stage::serialize};
  for (Stage s : order_stages) {
    Row row;
    row.name = stage_name(s);
    const auto v = stage_times(s);
    row.time_ms = median(v);
    row.time_min_ms = *std::min_element(v.begin(), v.end());
    row.time_max_ms = *std::max_element(v.begin(), v.end());
    row.share = e2e > 0 ? row.time_ms / e2e : 0;
    const OpCosts* ops = s == Stage::prefill  ? &prefill_ops
                         : s == Stage::decode ? &decode_ops
                         : s == Stage::sample ? &sample_ops
                                              : nullptr;
    row.calls = s == Stage::decode ? o.output - 1 : s == Stage::sample ? o.output : o.batch;
    if (s == Stage::prefill) row.calls = 1;
    if (s == Stage::detokenize) row.calls = o.output;
    if (s == Stage::serialize) row.calls = 1;
    if (ops) {
      row.cost = total(*ops);
      derive_stage(row, *ops, r.ceilings, p);
    }
    r.stages.push_back(row);
  }

  // ---- op rows ----
  const RequestTimes* op_src_decode = graph ? &attribution : nullptr;
  for (Stage s : {Stage::prefill, Stage::decode, Stage::sample}) {
    const OpCosts& ops = s == Stage::prefill  ? prefill_ops
                         : s == Stage::decode ? decode_ops
                                              : sample_ops;
    const double stage_ms = r.stages[s == Stage::prefill ? 1 : s == Stage::decode ? 2 : 3].time_ms;
    for (int i = 0; i < kNumOps; ++i) {
      std::vector<double> v;
      int64_t calls = 0;
      if (s == Stage::decode && op_src_decode) {
        v.push_back(op_src_decode->op_ms[int(s)][i]);
        calls = op_src_decode->op_calls[int(s)][i];
      } else {
        for (const auto& rep : reps) v.push_back(rep.op_ms[int(s)][i]);
        calls = reps[0].op_calls[int(s)][i];
      }
      if (calls == 0) continue;
      Row row;
      row.stage = stage_name(s);
      row.name = op_name(static_cast<Op>(i));
      row.time_ms = median(v);
      row.time_min_ms = *std::min_element(v.begin(), v.end());
      row.time_max_ms = *std::max_element(v.begin(), v.end());
      row.share = stage_ms > 0 ? row.time_ms / stage_ms : 0;
      row.calls = calls;
      row.cost = ops[i];
      derive(row, r.ceilings, p, static_cast<Op>(i), true);
      r.ops.push_back(row);
    }
  }

  // ---- metrics ----
  Metrics& mt = r.metrics;
  std::vector<double> ttfts, all_steps;
  for (const auto& rep : reps) {
    ttfts.push_back(rep.first_token_ms);
    all_steps.insert(all_steps.end(), rep.step_ms.begin(), rep.step_ms.end());
  }
  mt.ttft_ms = median(ttfts);
  mt.e2e_ms = e2e;
  mt.itl_ms = percentiles(all_steps);
  mt.tpot_ms = all_steps.empty() ? 0 : mt.itl_ms.mean;
  mt.e2e_repeats_ms = percentiles(e2es);
  const Row& prefill_row = r.stages[1];
  const Row& decode_row = r.stages[2];
  mt.prefill_tokens_per_s =
      prefill_row.time_ms > 0 ? double(o.batch * n_in) / (prefill_row.time_ms / 1e3) : 0;
  double decode_phase_ms = 0;
  for (double v : med.step_ms) decode_phase_ms += v;
  mt.decode_tokens_per_s =
      decode_phase_ms > 0 ? double(o.batch * (o.output - 1)) / (decode_phase_ms / 1e3) : 0;
  const double compute_ms = prefill_row.time_ms + decode_row.time_ms;
  const double model_flops = prefill_row.cost.model_flops + decode_row.cost.model_flops;
  mt.mfu = compute_ms > 0 && r.ceilings.matmul_flops_per_s > 0
               ? model_flops / (compute_ms / 1e3) / r.ceilings.matmul_flops_per_s
               : 0;
  mt.mbu = decode_row.mbu;
  r.decode_step_ms = med.step_forward_ms;
  // Step time against context: the slope is the cost of one more cached token (KV reads), the
  // intercept what every step pays (weight streaming + fixed overhead). decode_step_ms[0] is the
  // step that attends over n_in + 1 positions.
  if (const LinearFit fit = fit_decode_steps(med.step_forward_ms, n_in + 1); fit.ok) {
    mt.decode_step_intercept_ms = fit.intercept;
    mt.decode_step_slope_us_per_token = fit.slope * 1e3;
    mt.decode_step_r2 = fit.r2;
    mt.decode_kv_bytes_per_s =
        kv_bandwidth_from_slope(fit.slope, kv_bytes_per_token(cfg, p) * double(o.batch));
  }
  r.repeat_e2e_ms = e2es;
  r.timeline = med.timeline;

  // ---- setup ----
  mt.setup_ms = ms_since(setup0) - [&] {
    double s = 0;
    for (const auto& rep : reps) s += rep.e2e_ms;
    return s;
  }();
  r.setup = {{"ceilings_ms", ceilings_ms},
             {"allocate_ms", alloc_ms},
             {"weights_ms", weights_ms},
             {"weights_source", om.weights->describe()},
             {"weights_bytes", fp.weights},
             {"weights_bytes_read", om.weights->bytes_read()},
             {"weights_bytes_per_s", weights_ms > 0 ? fp.weights / (weights_ms / 1e3) : 0.0},
             {"kv_cache_bytes", fp.kv_cache},
             {"activation_bytes", fp.activations},
             {"warmup_ms", warmup_ms},
             {"warmup_requests", o.warmup}};
  if (!overhead_json.is_null()) r.setup["profiler_overhead"] = overhead_json;
  double stage_sum = 0;
  for (const auto& s : r.stages) stage_sum += s.time_ms;
  r.setup["unattributed_ms"] = e2e - stage_sum;
  r.notes.push_back(std::string("times measured with ") + b.clock_name() +
                    "; FLOPs and bytes from the cost model; ceilings " + r.ceilings.source);
  for (const auto& n : b.notes()) r.notes.push_back(n);
  add_physics_checks(r);
  return r;
}

}  // namespace latprof
