// `latprof run --requests N`: latency under load, in process. N requests arrive by an arrival
// process (or a dataset's times) into the continuous-batching engine on the model; every token
// is stamped on one host clock when it is in host memory and detokenized; each request's TTFT,
// TPOT, ITL and E2E count from its arrival, so its queueing is inside them. One timed run (the
// spread is over the requests); a warm-up pass at the run's shapes goes first.
#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <thread>

#include "backend/backend.hpp"
#include "core/checked.hpp"
#include "core/error.hpp"
#include "core/format.hpp"
#include "core/nvtx.hpp"
#include "core/progress.hpp"
#include "core/workload.hpp"
#include "engine/engine.hpp"
#include "model/detokenizer.hpp"
#include "report/physics.hpp"
#include "report/requests.hpp"
#include "runner/model_runner.hpp"
#include "runner/profiler.hpp"
#include "runner/run_common.hpp"
#include "runner/runner.hpp"

namespace latprof {

using namespace run_detail;

namespace {

// The most requests one run takes: far more than a CPU run gets through in minutes.
constexpr int64_t kMaxRequests = 100'000;
// Warm-up: requests of the run's first shapes, each generating this many tokens.
constexpr int64_t kWarmupRequests = 8;
constexpr int64_t kWarmupDecodeTokens = 4;

struct Planned {
  int64_t id = 0;
  std::vector<int32_t> prompt;
  int64_t output = 0;
  double arrival_ms = 0;
};

// What one pass of requests through the engine measured.
struct Pass {
  std::vector<engine::StepRecord> steps;
  std::vector<ModelRunner::StepTimes> backend;  // per step
  std::vector<double> detok_ms;                 // per step: detokenizing its tokens
  // Per step, per sequence: (request, new tokens, cached positions before, samples).
  struct Seq {
    int64_t request, n_new, past;
    bool sample;
  };
  std::vector<std::vector<Seq>> seqs;
  std::map<int64_t, engine::RequestTimeline> timelines;
  std::map<int64_t, std::string> text;
  engine::PrefixCacheStats prefix;
  double end_ms = 0;
};

// Runs `reqs` through a fresh engine (an empty KV pool) on the model. With wait_for_arrivals
// each request enters at its arrival time on the pass's clock (0 = the pass's start), else all
// at once.
Pass run_pass(LoadedModel& m, const Tokenizer& tok, Profiler& prof, const SamplingParams& sp,
              const std::vector<Planned>& reqs, bool wait_for_arrivals, bool prefix_cache,
              bool progress) {
  Backend& b = m.backend();
  const EngineShape& es = m.shape();
  b.reset_events();
  prof.clear();
  b.synchronize();
  Pass out;
  engine::BlockPool pool(es.kv_blocks, es.block_size);
  engine::SchedulerConfig sc;
  sc.max_batched_tokens = es.max_step_tokens;
  sc.max_seqs = es.max_seqs;
  sc.max_model_len = es.max_model_len;
  sc.enable_prefix_caching = prefix_cache;
  ModelRunner runner(m, prof, sp);
  const auto t0 = Clock::now();
  engine::Clock clock = engine::Clock::steady();
  clock.now_ms = [t0] { return ms_since(t0); };
  clock.wait_until_ms = [t0, wait_for_arrivals](double ms) {
    if (wait_for_arrivals)
      std::this_thread::sleep_until(t0 + std::chrono::duration_cast<Clock::duration>(
                                             std::chrono::duration<double, std::milli>(ms)));
  };
  engine::Engine eng(sc, pool, runner, clock);
  int64_t total_out = 0;
  for (const Planned& r : reqs) {
    eng.submit(r.id, r.prompt, r.output, wait_for_arrivals ? r.arrival_ms : 0.0);
    total_out += r.output;
  }
  Progress bar("requests", total_out, progress);
  runner.before_step = [&](const engine::StepBatch& batch) {
    std::vector<Pass::Seq> seqs;
    bool any_prefill = false;
    const std::vector<bool> samples = batch.samples();
    for (int64_t i = 0; i < batch.num_seqs(); ++i) {
      const int64_t n = batch.new_tokens(i);
      seqs.push_back({batch.request_ids[size_t(i)], n, batch.past(i), samples[size_t(i)]});
      any_prefill = any_prefill || n > 1 || !samples[size_t(i)];
    }
    prof.set_context(any_prefill ? Stage::prefill : Stage::decode, int(out.seqs.size()));
    out.seqs.push_back(std::move(seqs));
    out.detok_ms.push_back(0);
  };
  // Each request's tokens go through its own streaming detokenizer, as a server's would.
  std::map<int64_t, StreamingDetokenizer> detok;
  eng.on_token = [&](int64_t id, int32_t token) {
    const auto d0 = Clock::now();
    {
      NvtxRange r("detokenize");
      auto it = detok.find(id);
      if (it == detok.end()) it = detok.emplace(id, StreamingDetokenizer(tok)).first;
      out.text[id] += it->second.push(token);
    }
    out.detok_ms.back() += ms_since(d0);
    bar.advance();
  };
  eng.run();
  bar.finish();
  out.end_ms = ms_since(t0);
  out.steps = eng.steps();
  out.backend = runner.history();
  out.timelines = eng.timelines();
  out.prefix = eng.scheduler().prefix_cache_stats();
  for (auto& [id, d] : detok) out.text[id] += d.finish();
  return out;
}

// The flags of the load mode that need the model's context; the rest were checked before.
void validate_load_options(const RunOptions& o) {
  if (o.requests < 0 || o.requests > kMaxRequests)
    usage_error("--requests must be from 1 to " + std::to_string(kMaxRequests) + " (got " +
                std::to_string(o.requests) + ")");
  if (!o.prompt.empty())
    usage_error(
        "--prompt gives one request's text; with --requests give --dataset FILE.jsonl "
        "(a \"prompt\" per line) or synthetic lengths with --input/--output");
  if (o.batch != 1)
    usage_error("--batch runs requests arriving together; with --requests use --rate inf");
  if (o.repeat > 1)
    usage_error("--requests runs once (the spread is over its requests); drop --repeat");
  if (o.overhead) usage_error("--overhead takes the single-request mode; drop --requests");
  if (!std::isfinite(o.burstiness) || o.burstiness <= 0)
    usage_error("--burstiness must be a finite number > 0 (1: Poisson; below 1: burstier)");
  if (o.warmup < 0 || o.warmup > 100)
    usage_error("--warmup must be between 0 and 100 (got " + std::to_string(o.warmup) + ")");
  check_threads(o.threads, "--threads");
  if (!std::isfinite(o.temperature) || o.temperature < 0)
    usage_error("--temperature must be a finite number >= 0 (0: greedy; got " +
                std::to_string(o.temperature) + ")");
  if (o.top_k < 0) usage_error("--top-k must be >= 0");
}

// The run's requests: lengths from the distributions (or the dataset), a synthetic prompt of its
// own per request (or the dataset's text), arrival times from the arrival process (or the
// dataset's). Lengths are clamped to at least 1 and to max_len (prompt + output).
std::vector<Planned> plan_requests(const RunOptions& o, const Tokenizer& tok, int64_t max_len,
                                   std::vector<std::string>& notes) {
  std::vector<Planned> reqs;
  std::vector<double> arrivals;
  const workload::Arrival arrival = workload::parse_arrival(o.arrival);
  if (!o.dataset.empty()) {
    const auto ds = workload::read_dataset(o.dataset, o.requests > 0 ? o.requests : kMaxRequests);
    if (o.requests > int64_t(ds.size()))
      notes.push_back("--dataset " + o.dataset + " has " + std::to_string(ds.size()) +
                      " requests, fewer than --requests " + std::to_string(o.requests) +
                      ": ran them all");
    bool timed = !ds.empty();
    for (size_t i = 0; i < ds.size(); ++i) {
      const auto& e = ds[i];
      Planned p;
      p.id = int64_t(i);
      if (!e.prompt.empty())
        p.prompt = tok.encode(e.prompt, true);
      else if (e.input_tokens > 0 && e.input_tokens < max_len)
        p.prompt = tok.encode(tok.make_prompt(e.input_tokens, o.seed + 1 + i), true);
      p.output = e.output_tokens;
      const int64_t n_in = int64_t(p.prompt.size());
      if (n_in < 1 || n_in + p.output > max_len)
        usage_error("--dataset " + o.dataset + ": request " + std::to_string(i + 1) + " has " +
                    std::to_string(n_in > 0 ? n_in : e.input_tokens) + " prompt + " +
                    std::to_string(p.output) + " output tokens, beyond the " +
                    std::to_string(max_len) +
                    " positions of one request (the context or --max-model-len); shorten it");
      timed = timed && e.arrival_ms.has_value();
      reqs.push_back(std::move(p));
    }
    if (timed) {
      const double first = ds.front().arrival_ms.value_or(0);
      for (const auto& e : ds) arrivals.push_back(std::max(0.0, *e.arrival_ms - first));
      std::sort(arrivals.begin(), arrivals.end());
      notes.push_back("arrival times replayed from the dataset's arrival_ms");
    }
  } else {
    const workload::LengthDist in = o.input_dist.empty()
                                        ? workload::LengthDist::constant_of(o.input)
                                        : workload::LengthDist::parse(o.input_dist, "--input");
    const workload::LengthDist out = o.output_dist.empty()
                                         ? workload::LengthDist::constant_of(o.output)
                                         : workload::LengthDist::parse(o.output_dist, "--output");
    if (o.input_dist.empty() && o.output_dist.empty() && o.input + o.output > max_len)
      usage_error("--input " + std::to_string(o.input) + " + --output " + std::to_string(o.output) +
                  " = " + std::to_string(o.input + o.output) + " tokens exceeds the " +
                  std::to_string(max_len) +
                  " positions of one request (the context or --max-model-len); use fewer tokens");
    std::mt19937_64 rng(o.seed);
    for (int64_t i = 0; i < o.requests; ++i) {
      Planned p;
      p.id = i;
      const int64_t n_in = in.sample(rng, max_len - 1);
      p.output = out.sample(rng, max_len - n_in);
      p.prompt = tok.encode(tok.make_prompt(n_in, o.seed + 1 + uint64_t(i)), true);
      LATPROF_ASSERT(int64_t(p.prompt.size()) == n_in, "prompt builder gave the wrong length");
      reqs.push_back(std::move(p));
    }
  }
  if (arrivals.empty())
    arrivals = workload::arrival_times(int64_t(reqs.size()), o.rate, arrival, o.burstiness, o.seed);
  for (size_t i = 0; i < reqs.size(); ++i) reqs[i].arrival_ms = arrivals[i];
  return reqs;
}

// The default KV pool holds every request that may run at once; when that does not fit beside the
// weights and activations, it shrinks to kKvMemoryFraction of the memory left (as a server sizes
// its pool), and requests wait for blocks or are preempted. A pool that cannot hold the largest
// request is left for the memory check to refuse, with the bytes it needs.
constexpr double kKvMemoryFraction = 0.9;
void fit_kv_pool(const RunOptions& o, RunSetup& s, EngineShape& es,
                 const std::vector<RequestShape>& shapes) {
  if (!o.kv_cache_memory.empty()) return;
  const Backend& b = *s.backend;
  const double avail = b.device().memory_available_bytes;
  const Footprint f = LoadedModel::footprint(s.om.config, s.wtype, b, es);
  if (avail <= 0 || f.total() <= avail) return;
  const double block_bytes = f.kv_cache / double(es.kv_blocks);
  const double room = kKvMemoryFraction * avail - f.weights - f.activations;
  int64_t largest = 0;
  for (const RequestShape& r : shapes)
    largest = std::max(largest, (r.prompt + r.output - 1 + es.block_size - 1) / es.block_size);
  const int64_t fit = room > 0 ? int64_t(room / block_bytes) : 0;
  if (fit < largest) return;
  s.r.notes.push_back("the KV pool the requests need (" + std::to_string(es.kv_blocks) +
                      " blocks, " + fmt_bytes(f.kv_cache) +
                      ") does not fit beside the weights: "
                      "it holds " +
                      std::to_string(fit) + " blocks (" + fmt_bytes(double(fit) * block_bytes) +
                      ", " + fmt_pct(kKvMemoryFraction) +
                      " of the available memory less weights and activations), so requests may "
                      "wait for blocks or be preempted; set --kv-cache-memory to choose");
  es.kv_blocks = fit;
}

double median_of(std::vector<int64_t> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : double(v[(v.size() - 1) / 2]);
}

}  // namespace

RunReport run_load(const RunOptions& o) {
  RunSetup s;
  RunReport& r = s.r;
  validate_load_options(o);
  open_run_model(o, s);
  const ModelConfig& cfg = s.om.config;
  const Tokenizer& tok = *s.om.tokenizer;
  check_engine_flags(o.kv_block_size, o.max_batched_tokens, o.max_seqs, o.max_model_len,
                     cfg.max_seq_len);
  const int64_t max_len = o.max_model_len > 0 ? o.max_model_len : cfg.max_seq_len;
  std::optional<workload::Slo> slo;
  if (!o.slo.empty()) slo = workload::Slo::parse(o.slo);
  const std::vector<Planned> reqs = plan_requests(o, tok, max_len, r.notes);
  if (reqs.empty()) usage_error("--dataset " + o.dataset + " holds no requests");

  // ---- backend, engine shape (checked before anything is allocated), weights ----
  open_run_backend(o, s);
  Backend& b = *s.backend;
  const Precision& p = s.p;
  std::vector<RequestShape> shapes;
  for (const Planned& q : reqs) shapes.push_back({int64_t(q.prompt.size()), q.output});
  EngineShape es = engine_shape_for(o, cfg, b, shapes);
  fit_kv_pool(o, s, es, shapes);
  load_run_weights(o, s, es);
  LoadedModel& m = *s.model;
  SamplingParams sp;
  sp.temperature = o.temperature;
  sp.top_k = o.top_k;
  sp.seed = o.seed;

  // ---- warm-up at the run's shapes: its first requests' prompt lengths, all at once ----
  Profiler prof(b);
  const auto twu = Clock::now();
  const double kv_touched = touch_kv_cache(m);
  std::vector<Planned> warm;
  for (size_t i = 0; i < reqs.size() && int64_t(i) < kWarmupRequests; ++i) {
    Planned w;
    w.id = int64_t(i);
    w.prompt = tok.encode(tok.make_prompt(int64_t(reqs[i].prompt.size()), o.seed + 1000 + i), true);
    w.output = std::min(reqs[i].output, kWarmupDecodeTokens);
    warm.push_back(std::move(w));
  }
  for (int i = 0; i < o.warmup; ++i) run_pass(m, tok, prof, sp, warm, false, o.prefix_cache, false);
  const double warmup_ms = ms_since(twu);

  // ---- the timed run ----
  const Pass pass = run_pass(m, tok, prof, sp, reqs, true, o.prefix_cache, !o.quiet);

  settle_read_bandwidth(r);  // the memory roof: read bandwidth before and after the timed part

  // ---- per request: stamps, and the latency classes from the steps it was in ----
  LatencyClassifier classify(r.ceilings, p);
  OpCosts prefill_ops{}, decode_ops{}, sample_ops{};
  double stage_ms[kNumStages] = {};
  int64_t stage_steps[kNumStages] = {};
  double busy_ms = 0;
  int64_t prefill_tokens = 0, max_seqs_seen = 0, preempted = 0;
  for (size_t k = 0; k < pass.steps.size(); ++k) {
    const engine::StepRecord& rec = pass.steps[k];
    const auto& seqs = pass.seqs[k];
    const double step_ms = rec.end_ms - rec.start_ms;
    busy_ms += step_ms;
    std::vector<StepSeq> all;
    std::vector<std::pair<int64_t, OpCosts>> own;
    int64_t n_logits = 0;
    for (const auto& q : seqs) {
      all.push_back({q.n_new, q.past, q.sample});
      OpCosts c = step_cost(cfg, p, {{q.n_new, q.past, q.sample}});
      if (q.sample) {
        c[int(Op::sample)] = sample_cost(cfg, p, 1);
        ++n_logits;
      }
      own.emplace_back(q.request, c);
    }
    OpCosts work = step_cost(cfg, p, all);
    const Cost sampling = sample_cost(cfg, p, n_logits);
    const bool prefill = rec.prefill_tokens > 0;
    OpCosts& into = prefill ? prefill_ops : decode_ops;
    for (int i = 0; i < kNumOps; ++i) into[i] += work[i];
    sample_ops[int(Op::sample)] += sampling;
    work[int(Op::sample)] = sampling;
    classify.add_step(step_ms, work, own);
    const double sample_ms = pass.backend[k].sample_ms, detok_ms = pass.detok_ms[k];
    const Stage st = prefill ? Stage::prefill : Stage::decode;
    stage_ms[int(st)] += step_ms - sample_ms - detok_ms;
    stage_steps[int(st)] += 1;
    stage_ms[int(Stage::sample)] += sample_ms;
    stage_steps[int(Stage::sample)] += 1;
    stage_ms[int(Stage::detokenize)] += detok_ms;
    stage_steps[int(Stage::detokenize)] += 1;
    prefill_tokens += rec.prefill_tokens;
    max_seqs_seen = std::max(max_seqs_seen, rec.seqs);
    preempted += rec.preempted;
    // The step's row, with its cost-model work (sampling apart, as in the single-request mode).
    OpCosts forward_work = work;
    forward_work[int(Op::sample)] = Cost{};
    if (!prefill) r.decode_step_ms.push_back(pass.backend[k].forward_ms);
    r.steps.push_back(step_row(rec, rec.start_ms, pass.backend[k].forward_ms, sample_ms,
                               pass.backend[k].sync, total(forward_work), r.ceilings, p));
  }
  fill_sync_metrics(r);
  std::vector<RequestRecord> records;
  std::vector<int64_t> ins, outs;
  for (const auto& [id, tl] : pass.timelines) {
    RequestRecord rec;
    rec.id = id;
    rec.input_tokens = tl.input_tokens;
    rec.output_tokens = int64_t(tl.token_ms.size());
    rec.arrival_ms = tl.arrival_ms;
    rec.token_ms = tl.token_ms;
    rec.finished_ms = tl.finished_ms;
    if (tl.first_scheduled_ms >= 0) rec.queue_ms = tl.first_scheduled_ms - tl.arrival_ms;
    rec.preemptions = tl.preemptions;
    rec.prefix_hit_tokens = tl.prefix_hit_tokens;
    rec.classes_ms = classify.classes(id, rec.e2e_ms());
    ins.push_back(rec.input_tokens);
    outs.push_back(rec.output_tokens);
    records.push_back(std::move(rec));
  }
  const LoadSummary sum = summarize(records, slo.value_or(workload::Slo{}));
  r.requests = nlohmann::json::array();
  for (const RequestRecord& rec : records)
    r.requests.push_back(request_to_json(rec, slo.value_or(workload::Slo{})));
  r.summary = summary_to_json(sum);

  // ---- stages: the run's time line, first arrival to last token, partitioned ----
  const double run_ms = pass.end_ms;
  auto stage_row = [&](const char* name, double ms, int64_t calls, const OpCosts* ops) {
    Row row;
    row.name = name;
    row.time_ms = row.time_min_ms = row.time_max_ms = ms;
    row.share = run_ms > 0 ? ms / run_ms : 0;
    row.calls = calls;
    if (ops) {
      row.cost = total(*ops);
      derive_stage(row, *ops, r.ceilings, p);
    }
    r.stages.push_back(row);
  };
  stage_row("prefill", stage_ms[int(Stage::prefill)], stage_steps[int(Stage::prefill)],
            &prefill_ops);
  stage_row("decode", stage_ms[int(Stage::decode)], stage_steps[int(Stage::decode)], &decode_ops);
  stage_row("sample", stage_ms[int(Stage::sample)], stage_steps[int(Stage::sample)], &sample_ops);
  stage_row("detokenize", stage_ms[int(Stage::detokenize)], stage_steps[int(Stage::detokenize)],
            nullptr);
  stage_row("idle", run_ms - busy_ms, 0, nullptr);

  // ---- ops: profiled spans per stage (backend clock) ----
  double op_ms[kNumStages][kNumOps] = {};
  int64_t op_calls[kNumStages][kNumOps] = {};
  for (const Span& sp_ : prof.spans()) {
    op_ms[int(sp_.stage)][int(sp_.op)] += b.elapsed_ms(sp_.ev_begin, sp_.ev_end);
    op_calls[int(sp_.stage)][int(sp_.op)] += 1;
  }
  for (Stage st : {Stage::prefill, Stage::decode, Stage::sample}) {
    const OpCosts& ops = st == Stage::prefill  ? prefill_ops
                         : st == Stage::decode ? decode_ops
                                               : sample_ops;
    for (int i = 0; i < kNumOps; ++i) {
      if (op_calls[int(st)][i] == 0) continue;
      Row row;
      row.stage = stage_name(st);
      row.name = op_name(static_cast<Op>(i));
      row.time_ms = row.time_min_ms = row.time_max_ms = op_ms[int(st)][i];
      row.share = stage_ms[int(st)] > 0 ? row.time_ms / stage_ms[int(st)] : 0;
      row.calls = op_calls[int(st)][i];
      row.cost = ops[i];
      derive(row, r.ceilings, p, static_cast<Op>(i), true);
      r.ops.push_back(row);
    }
  }

  // ---- run info and metrics: medians over the requests ----
  fill_run_identity(o, s, es);
  RunInfo& ri = r.run;
  ri.input_tokens = int64_t(median_of(ins));
  ri.output_tokens = std::max<int64_t>(1, int64_t(median_of(outs)));
  ri.batch = std::max<int64_t>(1, max_seqs_seen);
  ri.repeat = 1;
  Metrics& mt = r.metrics;
  mt.ttft_ms = sum.ttft_ms.p50;
  mt.tpot_ms = sum.tpot_ms.p50;
  mt.e2e_ms = sum.e2e_ms.p50;
  mt.itl_ms = sum.itl_ms;
  mt.e2e_repeats_ms = sum.e2e_ms;
  const Row& prefill_row = r.stages[0];
  const Row& decode_row = r.stages[1];
  mt.prefill_tokens_per_s =
      prefill_row.time_ms > 0 ? double(prefill_tokens) / (prefill_row.time_ms / 1e3) : 0;
  mt.decode_tokens_per_s = sum.output_tokens_per_s;
  const double compute_ms = prefill_row.time_ms + decode_row.time_ms;
  const double model_flops = prefill_row.cost.model_flops + decode_row.cost.model_flops;
  const double peak = r.ceilings.matmul_peak(p);
  mt.mfu = compute_ms > 0 && peak > 0 ? model_flops / (compute_ms / 1e3) / peak : 0;
  mt.mbu = decode_row.mbu;
  mt.setup_ms = ms_since(s.start) - run_ms;
  r.repeat_e2e_ms = {run_ms};

  r.load = {{"requests", int64_t(reqs.size())},
            {"rate", std::isinf(o.rate) ? nlohmann::json("inf") : nlohmann::json(o.rate)},
            {"arrival", o.arrival},
            {"burstiness", o.burstiness},
            {"input", o.input_dist.empty() ? std::to_string(o.input) : o.input_dist},
            {"output", o.output_dist.empty() ? std::to_string(o.output) : o.output_dist},
            {"dataset", o.dataset.empty() ? nlohmann::json() : nlohmann::json(o.dataset)},
            {"slo", o.slo.empty() ? nlohmann::json() : nlohmann::json(o.slo)},
            {"prefix_cache", o.prefix_cache},
            {"prefix_cache_queries", pass.prefix.queries},
            {"prefix_cache_hits", pass.prefix.hits},
            {"duration_ms", run_ms}};
  r.setup["warmup_ms"] = warmup_ms;
  r.setup["warmup_requests"] = int64_t(warm.size()) * o.warmup;
  r.setup["warmup"] = {{"requests", int64_t(warm.size()) * o.warmup},
                       {"prompt_tokens", warm.empty() ? 0 : int64_t(warm[0].prompt.size())},
                       {"output_tokens", o.warmup > 0 && !warm.empty() ? warm[0].output : 0},
                       {"kv_cache_bytes_touched", kv_touched},
                       {"time_ms", warmup_ms}};
  r.setup["engine"]["preemptions"] = preempted;
  r.notes.push_back(
      "--requests: " + std::to_string(reqs.size()) +
      " requests, one timed run; latencies count "
      "from each request's arrival (queueing included); prompts were tokenized before the run; "
      "the stage table partitions the run from the first arrival to the last token");
  finish_report(r, b, run_ms);
  return r;
}

}  // namespace latprof
