#include "runner/runner.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <map>
#include <thread>

#include "backend/backend.hpp"
#include "core/checked.hpp"
#include "core/error.hpp"
#include "core/format.hpp"
#include "core/host.hpp"
#include "core/progress.hpp"
#include "engine/engine.hpp"
#include "model/detokenizer.hpp"
#include "model/open.hpp"
#include "report/physics.hpp"
#include "report/requests.hpp"
#include "roofline/fit.hpp"
#include "runner/forward.hpp"
#include "runner/model.hpp"
#include "runner/model_runner.hpp"
#include "runner/profiler.hpp"
#include "runner/run_common.hpp"

namespace latprof {

namespace {

using namespace run_detail;

// The lower median: a value that was measured (the middle one, or the lower of the two middle
// ones for an even count), as the median repeat is chosen.
double lower_median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[(v.size() - 1) / 2];
}

// Timed requests when --repeat is 0 (the default), unless one takes longer than kLongRequestMs.
constexpr int kDefaultRepeat = 3;
constexpr double kLongRequestMs = 20'000;
// Decode steps each warm-up request runs after its prefill at the timed prompt length.
constexpr int64_t kWarmupDecodeTokens = 4;

// One engine step as the runner saw it (host clock, ms from the request start), with the
// backend-clock times of its forward pass and sampling beneath.
struct StepTimes {
  engine::StepRecord rec;
  double begin_ms = 0;  // the end of the previous step (or of tokenization): steps tile the run
  double forward_ms = 0, sample_ms = 0, detok_ms = 0;
  Backend::SyncTime sync;  // the host thread pool's synchronisation in the step
  bool replayed = false;
  bool prefill = false;       // before (and with) sequence 0's first token
  std::vector<StepSeq> seqs;  // per sequence: tokens, cached positions before, whether it samples
};

// What one request (a batch of o.batch sequences arriving together) measured. Stage times
// partition its wall-clock time on the host clock (they add up to e2e_ms by construction);
// device and op times sit beneath as attribution.
struct RequestTimes {
  double e2e_ms = 0;                 // request start (before tokenize) -> response serialized
  double stage_ms[kNumStages] = {};  // per stage, host clock (see Request::run)
  double op_ms[kNumStages][kNumOps] = {};
  int64_t op_calls[kNumStages][kNumOps] = {};
  std::vector<double> token_ms;         // each output token of sequence 0 in host memory and
                                        // detokenized, from request start (host clock); [0]: TTFT
  std::vector<double> step_forward_ms;  // decode-only steps after the first token: forward pass
                                        // only (backend clock)
  std::vector<StepTimes> steps;
  int64_t preemptions = 0;
  std::vector<int32_t> prompt_ids;  // sequence 0
  std::vector<int32_t> output_ids;  // sequence 0
  std::string output_text;
  std::vector<TraceEvent> timeline;

  double ttft_ms() const { return token_ms.empty() ? 0 : token_ms.front(); }
  // Gaps between successive tokens of sequence 0 (ITL samples), and TPOT (0 with one token).
  std::vector<double> itl_ms() const { return token_gaps_ms(token_ms); }
  double tpot_ms() const { return tpot_from_tokens_ms(token_ms).value_or(0.0); }
};

// A request of `latprof run`: o.batch sequences (one prompt each) that arrive together and run
// through the continuous-batching engine (src/engine) on the model.
class Request {
 public:
  Request(LoadedModel& m, const Tokenizer& tok, Profiler& prof, const RunOptions& o,
          std::vector<std::string> prompts)
      : m_(m), tok_(tok), prof_(prof), o_(o), prompts_(std::move(prompts)) {}

  // n_out: tokens to generate per sequence; timeline: keep spans as trace events.
  //
  // Every per-token time is read on one host clock (steady_clock) at the moment the token is in
  // host memory and detokenized. Engine steps tile the time from the prompt ids being ready to
  // the last step's end; the stages partition the request's time line:
  //   tokenize   [start, prompt ids ready]
  //   prefill    the steps until sequence 0's first token is in host memory, minus their
  //              sampling and detokenization (scheduling, uploads, launches and waiting count)
  //   decode     the steps after it, minus the same
  //   sample     the sampling ops (backend clock)
  //   detokenize sequence 0's tokens: [token in host memory, token detokenized]
  //   serialize  [last step's end, response serialized]
  RequestTimes run(int64_t n_out, bool timeline, bool progress) {
    Backend& b = m_.backend();
    RequestTimes t;
    StreamingDetokenizer detok(tok_);  // UTF-8 safe: holds back a character split across tokens
    const int64_t B = int64_t(prompts_.size());
    b.reset_events();
    prof_.clear();
    b.synchronize();
    const auto t_start = Clock::now();
    auto now_ms = [&] { return ms_since(t_start); };

    // ---- tokenize (host) ----
    std::vector<std::vector<int32_t>> ids(static_cast<size_t>(B));
    {
      NvtxRange r("tokenize");
      for (int64_t s = 0; s < B; ++s) ids[size_t(s)] = tok_.encode(prompts_[size_t(s)], true);
    }
    const double t_tokenized = now_ms();
    t.stage_ms[int(Stage::tokenize)] = t_tokenized;
    t.prompt_ids = ids[0];
    const int64_t n_in = int64_t(ids[0].size());

    // ---- the engine ----
    const EngineShape& es = m_.shape();
    engine::BlockPool pool(es.kv_blocks, es.block_size);
    engine::SchedulerConfig sc;
    sc.max_batched_tokens = es.max_step_tokens;
    sc.max_seqs = es.max_seqs;
    sc.max_model_len = es.max_model_len;
    sc.enable_prefix_caching = o_.prefix_cache;
    ModelRunner runner(m_, prof_, sampling());
    engine::Clock clock{now_ms, [](double) {}};  // every sequence has arrived: nothing to wait for
    engine::Engine eng(sc, pool, runner, clock);
    for (int64_t s = 0; s < B; ++s) eng.submit(s, ids[size_t(s)], n_out, t_tokenized);

    Progress bar("generate", n_out, progress);
    int64_t seq0_tokens = 0;
    // Ops are profiled under the stage sequence 0 is in and the engine step's index.
    runner.before_step = [&](const engine::StepBatch& batch) {
      prof_.set_context(seq0_tokens > 0 ? Stage::decode : Stage::prefill, int(t.steps.size()));
      StepTimes st;
      const std::vector<bool> samples = batch.samples();
      for (int64_t i = 0; i < batch.num_seqs(); ++i)
        st.seqs.push_back({batch.new_tokens(i), batch.past(i), samples[size_t(i)]});
      t.steps.push_back(std::move(st));
    };
    eng.on_token = [&](int64_t id, int32_t token) {
      if (id != 0) return;
      const auto t0 = Clock::now();
      {
        NvtxRange r("detokenize");
        t.output_text += detok.push(token);
      }
      t.output_ids.push_back(token);
      t.steps.back().detok_ms = ms_since(t0);
      ++seq0_tokens;
      bar.advance();
    };
    // The engine loop, one step at a time through the runner; afterwards each step is placed on
    // the request's time line from the engine's records.
    eng.run();
    bar.finish();
    t.output_text += detok.finish();  // an incomplete character at the end becomes U+FFFD

    // ---- serialize: the response a server would send ----
    {
      NvtxRange r("serialize");
      nlohmann::json resp = {{"object", "text_completion"},
                             {"model", m_.config().name},
                             {"choices", nlohmann::json::array()}};
      resp["choices"].push_back({{"index", 0},
                                 {"text", t.output_text},
                                 {"token_ids", t.output_ids},
                                 {"finish_reason", "length"}});
      resp["usage"] = {{"prompt_tokens", n_in * B}, {"completion_tokens", n_out * B}};
      response_ = resp.dump();
    }
    t.e2e_ms = now_ms();
    t.token_ms = eng.timelines().at(0).token_ms;
    for (const auto& [id, tl] : eng.timelines()) t.preemptions += tl.preemptions;
    return finish_times(t, eng, runner, t_tokenized, timeline);
  }

 private:
  // Places the engine's steps on the request's time line and partitions it into stages.
  RequestTimes& finish_times(RequestTimes& t, const engine::Engine& eng, const ModelRunner& runner,
                             double t_tokenized, bool timeline) {
    Backend& b = m_.backend();
    const auto& recs = eng.steps();
    const auto& hist = runner.history();
    LATPROF_ASSERT(recs.size() == t.steps.size() && hist.size() == recs.size(),
                   "engine, runner and request disagree on the steps");
    double prev_end = t_tokenized;
    std::map<std::pair<Stage, int>, std::pair<double, int>> anchors;  // see below
    int64_t seq0 = 0;
    for (size_t k = 0; k < recs.size(); ++k) {
      StepTimes& st = t.steps[k];
      st.rec = recs[k];
      st.begin_ms = prev_end;
      st.forward_ms = hist[k].forward_ms;
      st.sample_ms = hist[k].sample_ms;
      st.sync = hist[k].sync;
      st.replayed = hist[k].replayed;
      // Sequence 0's token in this step, if any, was detokenized just before the step's end.
      const bool has0 =
          seq0 < int64_t(t.token_ms.size()) && t.token_ms[size_t(seq0)] <= st.rec.end_ms;
      // Until (and with) the step that gives sequence 0 its first token, the batch prefills.
      const bool prefill = seq0 == 0;
      st.prefill = prefill;
      const double work = st.rec.end_ms - prev_end - st.sample_ms - st.detok_ms;
      t.stage_ms[int(prefill ? Stage::prefill : Stage::decode)] += work;
      t.stage_ms[int(Stage::sample)] += st.sample_ms;
      t.stage_ms[int(Stage::detokenize)] += st.detok_ms;
      if (!prefill && st.rec.prefill_tokens == 0) t.step_forward_ms.push_back(st.forward_ms);
      // Op spans on the host time line: the forward pass's last event had passed when the
      // sampling began (end - detok - sample), the sampling's when the tokens were in host memory.
      const double in_host = st.rec.end_ms - st.detok_ms;
      const int pstep = int(k);
      anchors[{prefill ? Stage::prefill : Stage::decode, pstep}] = {in_host - st.sample_ms,
                                                                    hist[k].ev_forward1};
      anchors[{Stage::sample, pstep}] = {in_host, hist[k].ev_sample1};
      if (timeline) {
        push_stage(t, prefill ? "prefill" : "decode_step", prev_end, work,
                   prefill ? -1 : int(seq0));
        push_stage(t, "sample", in_host - st.sample_ms, st.sample_ms, prefill ? 0 : int(seq0));
        if (has0) push_stage(t, "detokenize", in_host, st.detok_ms, int(seq0));
      }
      if (has0) ++seq0;
      prev_end = st.rec.end_ms;
    }
    t.stage_ms[int(Stage::serialize)] = t.e2e_ms - prev_end;
    if (timeline) {
      push_stage(t, "tokenize", 0, t_tokenized, -1);
      push_stage(t, "serialize", prev_end, t.stage_ms[int(Stage::serialize)], -1);
    }
    // ---- op spans (backend clock): attribution beneath the stages. On the trace's host time
    // line an op sits where its stage's last event had certainly passed (the anchor) minus the
    // backend time from the op to that event: the backend's work lies inside the host interval
    // that waited for it, so ops nest inside their stage span. ----
    for (const Span& s : prof_.spans()) {
      const double ms = b.elapsed_ms(s.ev_begin, s.ev_end);
      t.op_ms[int(s.stage)][int(s.op)] += ms;
      t.op_calls[int(s.stage)][int(s.op)] += 1;
      const auto a = anchors.find({s.stage, s.step});
      if (timeline && a != anchors.end()) {
        TraceEvent e;
        e.name = op_name(s.op);
        e.stage = stage_name(s.stage);
        e.layer = s.layer;
        e.step = s.step;
        e.start_us = (a->second.first - b.elapsed_ms(s.ev_begin, a->second.second)) * 1e3;
        e.dur_us = ms * 1e3;
        t.timeline.push_back(e);
      }
    }
    return t;
  }
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
  std::vector<std::string> prompts_;
  std::string response_;  // the serialized response (kept, so its serialization is real work)
};

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
  if (o.repeat < 0 || o.repeat > 1000)
    usage_error(
        "--repeat must be between 0 (auto: 3, or 1 for a request over 20 s) and 1000 (got " +
        std::to_string(o.repeat) + ")");
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

namespace {

// One prompt per sequence of the batch: the user's text for each, or a synthetic prompt of n_in
// tokens per sequence, each its own (seeded from seed + s).
std::vector<std::string> prompts_for(const RunOptions& o, const Tokenizer& tok, int64_t n_in,
                                     uint64_t seed) {
  std::vector<std::string> p;
  for (int64_t s = 0; s < o.batch; ++s)
    p.push_back(o.prompt.empty() ? tok.make_prompt(n_in, seed + uint64_t(s)) : o.prompt);
  return p;
}

}  // namespace

EngineShape engine_shape_for_run(const RunOptions& o, const ModelConfig& cfg, const Backend& b,
                                 int64_t n_in) {
  return engine_shape_for(o, cfg, b,
                          std::vector<RequestShape>(size_t(std::max<int64_t>(o.batch, 1)),
                                                    RequestShape{n_in, o.output}));
}

EngineShape engine_shape_for(const RunOptions& o, const ModelConfig& cfg, const Backend& b,
                             const std::vector<RequestShape>& reqs) {
  check_engine_flags(o.kv_block_size, o.max_batched_tokens, o.max_seqs, o.max_model_len,
                     cfg.max_seq_len);
  LATPROF_ASSERT(!reqs.empty(), "an engine shape for no requests");
  EngineShape e;
  e.block_size = o.kv_block_size;
  e.max_model_len = o.max_model_len > 0 ? o.max_model_len : cfg.max_seq_len;
  const int64_t budget =
      o.max_batched_tokens > 0 ? o.max_batched_tokens : default_max_batched_tokens(b);
  const int64_t seqs = o.max_seqs;
  const int64_t n = int64_t(reqs.size());
  // No step of this run holds more than every prompt token, or more sequences than requests.
  int64_t prompt_tokens = 0;
  for (const RequestShape& r : reqs)
    prompt_tokens = checked_add(prompt_tokens, r.prompt, "prompts");
  e.max_step_tokens = std::min(budget, std::max(prompt_tokens, n));
  e.max_seqs = std::min(seqs, n);
  // A request's last token is sampled, never written to the cache.
  auto blocks_of = [&](const RequestShape& r) {
    return (r.prompt + r.output - 1 + e.block_size - 1) / e.block_size;
  };
  std::vector<int64_t> need;
  for (const RequestShape& r : reqs) need.push_back(blocks_of(r));
  std::sort(need.begin(), need.end(), std::greater<>());
  const int64_t largest = need.front();
  const RequestShape& big = *std::max_element(
      reqs.begin(), reqs.end(),
      [&](const RequestShape& a, const RequestShape& c) { return blocks_of(a) < blocks_of(c); });
  if (o.kv_cache_memory.empty()) {
    // What the run needs: at most max_seqs requests run together, so the pool holds the largest
    // max_seqs of them at their full length (no request is ever preempted).
    e.kv_blocks = 0;
    for (int64_t i = 0; i < std::min(n, e.max_seqs); ++i)
      e.kv_blocks = checked_add(e.kv_blocks, need[size_t(i)], "KV blocks");
  } else {
    const Precision p = backend_precision(o.dtype, b);
    const double block_bytes = kv_bytes_per_token(cfg, p) * double(e.block_size);
    const double blocks =
        std::floor(parse_bytes(o.kv_cache_memory, "--kv-cache-memory") / block_bytes);
    e.kv_blocks = int64_t(std::min(blocks, double(std::numeric_limits<int32_t>::max())));
    if (e.kv_blocks < largest)
      usage_error("--kv-cache-memory " + o.kv_cache_memory + " holds " +
                  std::to_string(e.kv_blocks) + " KV blocks of " + std::to_string(e.block_size) +
                  " tokens (" + fmt_bytes(block_bytes) + " each), but one request of " +
                  std::to_string(big.prompt) + " + " + std::to_string(big.output) +
                  " tokens needs " + std::to_string(largest) + "; give it more memory");
  }
  // What the scheduler would refuse (longer than --max-model-len, more blocks than the pool):
  // refused now, before anything is allocated. A pool past int32 positions is left to the
  // memory check, which refuses it first (it never fits) with the bytes it needs.
  if (e.kv_blocks > std::numeric_limits<int32_t>::max() / e.block_size) return e;
  engine::BlockPool pool(e.kv_blocks, e.block_size);
  engine::Scheduler probe({budget, seqs, e.max_model_len}, pool);
  for (const RequestShape& r : reqs) probe.check_admissible(r.prompt, r.output);
  return e;
}

RunReport run_benchmark(const RunOptions& o) {
  RunSetup s;
  RunReport& r = s.r;
  // ---- flags that need no model first, then the model, tokenizer and prompt ----
  open_run_model(o, s);
  const ModelConfig& cfg = s.om.config;
  validate_run_options(o, cfg.max_seq_len);
  const OpenedModel& om = s.om;
  std::string prompt = o.prompt.empty() ? om.tokenizer->make_prompt(o.input, o.seed) : o.prompt;
  const int64_t n_in = int64_t(om.tokenizer->encode(prompt, true).size());
  if (!o.prompt.empty() && n_in + o.output > cfg.max_seq_len)
    usage_error("the prompt (" + std::to_string(n_in) + " tokens) + --output " +
                std::to_string(o.output) + " exceeds the model's context of " +
                std::to_string(cfg.max_seq_len));
  if (o.prompt.empty() && n_in != o.input)
    throw std::logic_error("prompt builder gave " + std::to_string(n_in) + " tokens, asked " +
                           std::to_string(o.input));

  // ---- backend and its ceilings ----
  open_run_backend(o, s);
  Backend& b = *s.backend;
  const DeviceInfo& dev = s.dev;
  const Precision& p = s.p;

  // ---- the engine's shape: KV pool, step budget (checked before anything is allocated) ----
  const EngineShape es = engine_shape_for_run(o, cfg, b, n_in);

  // ---- weights and KV cache ----
  load_run_weights(o, s, es);
  LoadedModel& m = *s.model;

  // ---- warm-up at the timed shape ----
  // Every page of the KV cache is written once, then each warm-up request runs the timed prompt
  // length (its own synthetic prompt, or the user's text) and a few decode steps, so the timed
  // requests meet no cold code path, kernel variant or page at their shape.
  Profiler prof(b);
  const auto twu = Clock::now();
  const double kv_touched = touch_kv_cache(m);
  const int64_t warmup_out = std::min<int64_t>(o.output, kWarmupDecodeTokens);
  {
    Request wreq(m, *om.tokenizer, prof, o, prompts_for(o, *om.tokenizer, n_in, o.seed + 1000));
    for (int i = 0; i < o.warmup; ++i) wreq.run(warmup_out, false, false);
  }
  const double warmup_ms = ms_since(twu);

  // ---- timed requests ----
  // --repeat 0 (the default): three, unless one request takes longer than kLongRequestMs, then
  // one (a 7B model on a few CPU cores), so the default command stays a few minutes.
  std::vector<RequestTimes> reps;
  Request req(m, *om.tokenizer, prof, o, prompts_for(o, *om.tokenizer, n_in, o.seed));
  int repeat = o.repeat > 0 ? o.repeat : kDefaultRepeat;
  for (int i = 0; i < repeat; ++i) {
    reps.push_back(req.run(o.output, o.keep_timeline, !o.quiet));
    if (o.repeat == 0 && i == 0 && reps[0].e2e_ms > kLongRequestMs) {
      repeat = 1;
      r.notes.push_back("one timed request: it took " + fmt_ms(reps[0].e2e_ms) + " (over " +
                        fmt_ms(kLongRequestMs) + "), so the default of " +
                        std::to_string(kDefaultRepeat) +
                        " repeats was cut to 1; pass --repeat N for a spread");
    }
    if (!o.quiet && Progress::terminal() && repeat > 1)
      std::fprintf(stderr, "repeat %d/%d: %s\n", i + 1, repeat, fmt_ms(reps.back().e2e_ms).c_str());
  }
  // Profiler overhead: the same request with no NVTX ranges or op events.
  nlohmann::json overhead_json;
  if (o.overhead) {
    prof.set_instrumented(false);
    const RequestTimes bare = req.run(o.output, false, false);
    prof.set_instrumented(true);
    std::vector<double> e;
    for (const auto& rep : reps) e.push_back(rep.e2e_ms);
    const double with = lower_median(e);
    overhead_json = {
        {"instrumented_e2e_ms", with},
        {"bare_e2e_ms", bare.e2e_ms},
        {"overhead_fraction", bare.e2e_ms > 0 ? (with - bare.e2e_ms) / bare.e2e_ms : 0.0},
        {"instrumented", "NVTX ranges, per-op events"},
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
        "graph), with shares of that request's decode time");
  }

  // ---- profile passes of their own (never mixed into the latency figures) ----
  {
    std::string why;
    if (b.enable_tracing(true, &why)) {
      req.run(o.output, false, false);
      b.enable_tracing(false, nullptr);
      const std::string pj = b.take_profile_json();
      if (!pj.empty()) r.profile["trace"] = nlohmann::json::parse(pj);
      r.notes.push_back("activity trace collected in a separate request; its times are not used");
    } else if (dev.backend != "cpu") {
      r.profile["trace"] = {{"available", false}, {"reason", why}};
      r.notes.push_back("activity tracing unavailable: " + why);
    }
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

  // ---- the median repeat: the one with the median E2E (the lower median for an even count).
  // Tables, per-token series and headline metrics all come from it, so its rows add up. ----
  std::vector<size_t> order(reps.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t c) { return reps[a].e2e_ms < reps[c].e2e_ms; });
  const RequestTimes& med = reps[order[(order.size() - 1) / 2]];

  // ---- run info ----
  fill_run_identity(o, s, es);
  RunInfo& ri = r.run;
  ri.input_tokens = n_in;
  ri.output_tokens = o.output;
  ri.repeat = int(reps.size());
  ri.prompt_token_ids = med.prompt_ids;
  ri.output_token_ids = med.output_ids;
  ri.output_text = med.output_text;

  settle_read_bandwidth(r);  // the memory roof: read bandwidth before and after the timed part

  // ---- cost model ----
  // Each stage's work is that of the engine steps it holds (a chunked prefill of later sequences
  // that shares steps with sequence 0's decode counts as decode work).
  OpCosts prefill_ops{}, decode_ops{};
  for (const StepTimes& st : med.steps) {
    const OpCosts c = step_cost(cfg, p, st.seqs);
    OpCosts& into = st.prefill ? prefill_ops : decode_ops;
    for (int i = 0; i < kNumOps; ++i) into[i] += c[i];
  }
  const Cost sample_one = sample_cost(cfg, p, o.batch);
  OpCosts sample_ops{};
  sample_ops[int(Op::sample)] = sample_one * double(o.output);

  // ---- stage rows: the median repeat, with the spread over all repeats ----
  std::vector<double> e2es;
  for (const auto& rep : reps) e2es.push_back(rep.e2e_ms);
  const double e2e = med.e2e_ms;
  auto spread = [&](Row& row, auto&& value) {
    row.time_min_ms = row.time_max_ms = value(med);
    for (const auto& rep : reps) {
      row.time_min_ms = std::min(row.time_min_ms, value(rep));
      row.time_max_ms = std::max(row.time_max_ms, value(rep));
    }
  };
  const Stage order_stages[] = {Stage::tokenize, Stage::prefill,    Stage::decode,
                                Stage::sample,   Stage::detokenize, Stage::serialize};
  for (Stage s : order_stages) {
    Row row;
    row.name = stage_name(s);
    row.time_ms = med.stage_ms[int(s)];
    spread(row, [&](const RequestTimes& rt) { return rt.stage_ms[int(s)]; });
    row.share = e2e > 0 ? row.time_ms / e2e : 0;
    const OpCosts* ops = s == Stage::prefill  ? &prefill_ops
                         : s == Stage::decode ? &decode_ops
                         : s == Stage::sample ? &sample_ops
                                              : nullptr;
    row.calls = s == Stage::decode                             ? o.output - 1
                : s == Stage::sample || s == Stage::detokenize ? o.output
                                                               : 1;
    if (s == Stage::tokenize) row.calls = o.batch;
    if (ops) {
      row.cost = total(*ops);
      derive_stage(row, *ops, r.ceilings, p);
    }
    r.stages.push_back(row);
  }

  // ---- op rows: the same repeat (or, for decode under CUDA graphs, the eager request); each
  // op's share is of its stage's time in the request it was measured in ----
  for (Stage s : {Stage::prefill, Stage::decode, Stage::sample}) {
    const OpCosts& ops = s == Stage::prefill  ? prefill_ops
                         : s == Stage::decode ? decode_ops
                                              : sample_ops;
    const RequestTimes& src = s == Stage::decode && graph ? attribution : med;
    const double stage_ms = src.stage_ms[int(s)];
    for (int i = 0; i < kNumOps; ++i) {
      const int64_t calls = src.op_calls[int(s)][i];
      if (calls == 0) continue;
      Row row;
      row.stage = stage_name(s);
      row.name = op_name(static_cast<Op>(i));
      row.time_ms = src.op_ms[int(s)][i];
      if (&src == &med)
        spread(row, [&](const RequestTimes& rt) { return rt.op_ms[int(s)][i]; });
      else
        row.time_min_ms = row.time_max_ms = row.time_ms;
      row.share = stage_ms > 0 ? row.time_ms / stage_ms : 0;
      row.calls = calls;
      row.cost = ops[i];
      derive(row, r.ceilings, p, static_cast<Op>(i), true);
      r.ops.push_back(row);
    }
  }

  // ---- metrics: TTFT, TPOT, E2E of the median repeat; ITL over every repeat's tokens ----
  Metrics& mt = r.metrics;
  std::vector<double> all_itl;
  for (const auto& rep : reps) {
    const std::vector<double> g = rep.itl_ms();
    all_itl.insert(all_itl.end(), g.begin(), g.end());
  }
  mt.ttft_ms = med.ttft_ms();
  mt.tpot_ms = med.tpot_ms();
  mt.e2e_ms = e2e;
  mt.itl_ms = percentiles(all_itl);
  mt.e2e_repeats_ms = percentiles(e2es);
  const Row& prefill_row = r.stages[1];
  const Row& decode_row = r.stages[2];
  mt.prefill_tokens_per_s =
      prefill_row.time_ms > 0 ? double(o.batch * n_in) / (prefill_row.time_ms / 1e3) : 0;
  // Tokens after the first over the time from the first token to the last: batch / TPOT.
  mt.decode_tokens_per_s = mt.tpot_ms > 0 ? double(o.batch) / (mt.tpot_ms / 1e3) : 0;
  const double compute_ms = prefill_row.time_ms + decode_row.time_ms;
  const double model_flops = prefill_row.cost.model_flops + decode_row.cost.model_flops;
  const double peak = r.ceilings.matmul_peak(p);
  mt.mfu = compute_ms > 0 && peak > 0 ? model_flops / (compute_ms / 1e3) / peak : 0;
  mt.mbu = decode_row.mbu;
  r.decode_step_ms = med.step_forward_ms;
  r.token_times_ms = med.token_ms;
  // Forward time of each decode step against its context: the slope is the cost of one more
  // cached token (KV reads), the intercept what every step pays (weight streaming + fixed
  // overhead).
  if (const LinearFit fit = fit_decode_steps(med.step_forward_ms, n_in); fit.ok) {
    mt.decode_step_intercept_ms = fit.intercept;
    mt.decode_step_slope_us_per_token = fit.slope * 1e3;
    mt.decode_step_r2 = fit.r2;
    mt.decode_kv_bytes_per_s =
        kv_bandwidth_from_slope(fit.slope, kv_bytes_per_token(cfg, p) * double(o.batch));
  }
  r.repeat_e2e_ms = e2es;
  r.timeline = med.timeline;
  // ---- the engine's steps of the median repeat, with their cost-model work ----
  for (const StepTimes& st : med.steps) {
    r.steps.push_back(step_row(st.rec, st.begin_ms, st.forward_ms, st.sample_ms, st.sync,
                               total(step_cost(cfg, p, st.seqs)), r.ceilings, p));
  }
  fill_sync_metrics(r);

  // ---- setup ----
  mt.setup_ms = ms_since(s.start) - [&] {
    double sum = 0;
    for (const auto& rep : reps) sum += rep.e2e_ms;
    return sum;
  }();
  r.setup["warmup_ms"] = warmup_ms;
  r.setup["warmup_requests"] = o.warmup;
  r.setup["warmup"] = {{"requests", o.warmup},
                       {"prompt_tokens", n_in},
                       {"output_tokens", o.warmup > 0 ? warmup_out : 0},
                       {"kv_cache_bytes_touched", kv_touched},
                       {"time_ms", warmup_ms}};
  r.setup["engine"]["preemptions"] = med.preemptions;
  if (!overhead_json.is_null()) r.setup["profiler_overhead"] = overhead_json;
  finish_report(r, b, e2e);
  return r;
}

}  // namespace latprof
