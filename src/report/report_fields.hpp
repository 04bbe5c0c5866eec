#pragma once
// The run report's fields, each described once: its JSON name, the C++ member it holds, its unit
// and meaning, and the rules its value follows. Everything else is derived from these describe()
// functions by a visitor: the JSON writer and reader (report.cpp), the JSON Schema
// (reports/schema/run-report.schema.json = `latprof schema`), README's field table
// (`latprof schema --markdown`) and row_fields(), the column list of CSV, compare and HTML.
// Adding a field is one line in the describe() of the object it belongs to (and a minor bump of
// kSchemaVersion).
//
// A visitor V has:
//   v(name, member, spec)          a value held by a member: string, number, integer, boolean,
//                                  a vector of those, a record (Row, Percentiles, Check) or a
//                                  vector of records; nlohmann::json members are copied verbatim
//   v.object(name, spec, body)     a JSON object whose fields body(v') describes (members of any
//                                  struct, e.g. metrics.decode_step_fit of Metrics' flat fields)
//   v.opaque(name, json, spec, docs)  a JSON object built elsewhere (tool, machine, setup, ...),
//                                  copied verbatim; docs(d) documents its known fields for the
//                                  schema and README with d(name, Doc<T>{}, spec); with kArray an
//                                  array of such objects; with kOptional not written when null
//   v.derived(name, value, spec)   written, never read back (it follows from other fields)
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <type_traits>
#include <vector>

#include "report/report.hpp"

namespace latprof::fields {

enum Flag : unsigned {
  kOptional = 1u << 0,       // may be absent (not in the schema's "required"): fields that 1.0
                             // reports may lack, or that are written only in some runs
  kOmitEmpty = 1u << 1,      // a string not written when empty (implies kOptional)
  kNullWhenEmpty = 1u << 2,  // a string written as null when empty
  kMin0 = 1u << 3,           // >= 0
  kMin1 = 1u << 4,           // >= 1
  kPositive = 1u << 5,       // > 0
  kNullable = 1u << 6,       // an opaque object that may be null
  kArray = 1u << 7,          // an opaque array of objects; docs describe each item's fields
};

struct Spec {
  const char* unit = "";  // "ms", "us/token", "B", "B/s", "FLOP", "FLOP/s", "FLOP/B", "token/s",
                          // "token", "1" (a fraction), "count"; "" when none applies
  const char* meaning = "";
  unsigned flags = 0;
  const char* choices = nullptr;        // allowed string values, '|'-separated
  const char* pattern = nullptr;        // ECMAScript regex a string matches
  const char* item_requires = nullptr;  // vector of records: a field every item must have
};

// A documented field of an opaque object, by its C++ type (only the schema and README use it).
template <class T>
struct Doc {};
inline constexpr Doc<std::string> kString{};
inline constexpr Doc<double> kNumber{};
inline constexpr Doc<int64_t> kInteger{};
inline constexpr Doc<bool> kBoolean{};
inline constexpr Doc<std::vector<std::string>> kStrings{};
inline constexpr Doc<nlohmann::json> kAny{};  // any object, its fields not described here
inline constexpr Doc<std::vector<double>> kNumbers{};
// A value of more than one JSON type (a number or "inf"), its type not constrained.
struct Untyped {};
inline constexpr Doc<Untyped> kUntyped{};
inline constexpr Doc<Percentiles> kDistribution{};  // with kNullable: null when no samples

// Records: types described by their own describe(), named in the schema's $defs.
template <class T>
struct Record : std::false_type {};
template <>
struct Record<Percentiles> : std::true_type {
  static constexpr const char* name = "distribution";
  static constexpr const char* meaning =
      "a distribution of samples; percentiles interpolate linearly between closest ranks (as "
      "numpy.percentile and vLLM's benchmarks do); values in the unit of the field holding it";
};
template <>
struct Record<Row> : std::true_type {
  static constexpr const char* name = "row";
  static constexpr const char* meaning = "a row of the stage or op table";
};
template <>
struct Record<Check> : std::true_type {
  static constexpr const char* name = "check";
  static constexpr const char* meaning = "a physics check of the run";
};
template <>
struct Record<StepRow> : std::true_type {
  static constexpr const char* name = "step";
  static constexpr const char* meaning = "one step of the continuous-batching engine";
};
template <class T>
inline constexpr bool is_record_v = Record<std::remove_const_t<T>>::value;

template <class A, class B>
concept Same = std::is_same_v<std::remove_const_t<A>, B>;

// ---- the records ------------------------------------------------------------------------------

template <class V, Same<Percentiles> P>
void describe(V& v, P& p) {
  v("count", p.count, {"count", "number of samples", kMin0});
  v("mean", p.mean, {"", "arithmetic mean", kMin0});
  v("stddev", p.stddev,
    {"", "sample standard deviation (n - 1 in the denominator); 0 for one sample", kMin0});
  v("min", p.min, {"", "smallest sample", kMin0});
  v("p50", p.p50, {"", "median", kMin0});
  v("p90", p.p90, {"", "90th percentile", kMin0});
  v("p95", p.p95, {"", "95th percentile", kMin0});
  v("p99", p.p99, {"", "99th percentile", kMin0});
  v("max", p.max, {"", "largest sample", kMin0});
}

template <class V, Same<Row> R>
void describe(V& v, R& r) {
  v("name", r.name,
    {"",
     "stage (tokenize, prefill, sample, decode, detokenize, serialize; with --requests "
     "prefill, decode, sample, detokenize, idle) or op name"});
  v("stage", r.stage, {"", "ops only: the stage the op ran in", kOmitEmpty});
  v("time_ms", r.time_ms,
    {"ms", "measured time per request, in the repeat with the median end-to-end time", kMin0});
  v("time_min_ms", r.time_min_ms, {"ms", "fastest repeat", kMin0});
  v("time_max_ms", r.time_max_ms, {"ms", "slowest repeat", kMin0});
  v("share", r.share, {"1", "fraction of end-to-end (stages) or of the stage (ops)", kMin0});
  v("calls", r.calls, {"count", "calls per request", kMin0});
  v("flops", r.cost.flops, {"FLOP", "executed FLOPs (cost model)", kMin0});
  v("model_flops", r.cost.model_flops, {"FLOP", "MFU-convention FLOPs (cost model)", kMin0});
  v.derived("bytes", r.cost.bytes(),
            {"B", "bytes moved: weights + activations + KV cache (cost model)", kMin0});
  v("weight_bytes", r.cost.weight_bytes, {"B", "weight bytes read (cost model)", kMin0});
  v("activation_bytes", r.cost.act_bytes,
    {"B", "activation bytes read and written (cost model)", kMin0});
  v("kv_bytes", r.cost.kv_bytes, {"B", "KV-cache bytes read and written (cost model)", kMin0});
  v("arithmetic_intensity", r.arithmetic_intensity, {"FLOP/B", "flops / bytes", kMin0});
  v("achieved_flops_per_s", r.achieved_flops_per_s, {"FLOP/s", "flops / time", kMin0});
  v("achieved_bytes_per_s", r.achieved_bytes_per_s, {"B/s", "bytes / time", kMin0});
  v("floor_ms", r.floor_ms,
    {"ms", "roofline floor: max(flops / compute peak, bytes / bandwidth)", kMin0});
  v("bound", r.bound,
    {"", "the roof the floor comes from; null for stages without cost-model work", kNullWhenEmpty,
     "compute|memory"});
  v("roofline_fraction", r.roofline_fraction,
    {"1", "floor_ms / time_ms (1: at the roofline)", kMin0});
  v("mfu", r.mfu, {"1", "model FLOPs / time / compute peak", kMin0});
  v("mbu", r.mbu, {"1", "bytes / time / memory bandwidth", kMin0});
}

template <class V, Same<Check> C>
void describe(V& v, C& c) {
  v("level", c.level,
    {"", "error: physics violated (likely a timing bug); warning; info", 0, "error|warning|info"});
  v("subject", c.subject, {"", "what was checked, e.g. decode or metrics.mbu"});
  v("message", c.message, {"", "what was found"});
}

template <class V, Same<StepRow> S>
void describe(V& v, S& s) {
  v("index", s.index, {"count", "step number, from 0", kMin0});
  v("start_ms", s.start_ms, {"ms", "when it began: the previous step's end (host clock)", kMin0});
  v("time_ms", s.time_ms, {"ms", "to its end, tokens in host memory (host clock)", kMin0});
  v("schedule_ms", s.schedule_ms, {"ms", "scheduler and step building", kMin0});
  v("forward_ms", s.forward_ms, {"ms", "forward pass (backend clock)", kMin0});
  v("sample_ms", s.sample_ms, {"ms", "sampling (backend clock)", kMin0});
  v("prefill_tokens", s.prefill_tokens, {"token", "prompt (or recomputed) tokens", kMin0});
  v("decode_tokens", s.decode_tokens, {"token", "one per decoding sequence", kMin0});
  v("seqs", s.seqs, {"count", "sequences in the step", kMin0});
  v("kv_blocks_used", s.kv_blocks_used, {"count", "KV blocks in use after it", kMin0});
  v("kv_usage", s.kv_usage, {"1", "fraction of the KV blocks in use after it", kMin0});
  v("preempted", s.preempted, {"count", "requests preempted while planning it", kMin0});
  v("flops", s.flops, {"FLOP", "executed FLOPs (cost model)", kMin0});
  v("bytes", s.bytes, {"B", "bytes moved (cost model; weights once per step)", kMin0});
  v("mfu", s.mfu, {"1", "model FLOPs / time_ms / compute peak", kMin0});
  v("mbu", s.mbu, {"1", "bytes / time_ms / memory bandwidth", kMin0});
  v("sync_ms", s.sync_ms,
    {"ms",
     "CPU thread pool, inside forward_ms: parallel regions' late starts plus threads' idle time "
     "at their barriers, per thread (wall-equivalent); -1: no host thread pool (CUDA)",
     kOptional});
  v("sync_fork_ms", s.sync_fork_ms,
    {"ms",
     "the late starts alone (the rest of sync_ms is barrier waits): how long after a region "
     "began its threads started, per thread (wall-equivalent); -1: no host thread pool",
     kOptional});
  v("parallel_regions", s.parallel_regions,
    {"count", "parallel regions (fork/join) of the step's kernels; -1: no host thread pool",
     kOptional});
  v("offcpu_ms", s.offcpu_ms,
    {"ms",
     "CPU thread pool, over forward_ms and sample_ms: how long its threads were not running on a "
     "CPU, per thread (wall-equivalent): taken by the hypervisor (steal), by other processes, or "
     "asleep; their run time from /proc/self/task/*/schedstat, which excludes steal; -1: not "
     "measured (CUDA, or not Linux)",
     kOptional});
  v("runq_ms", s.runq_ms,
    {"ms",
     "the part of offcpu_ms its threads were runnable but waiting for a CPU behind other tasks "
     "of this machine's kernel (run delay), per thread (wall-equivalent); -1: not measured",
     kOptional});
}

// ---- the report -------------------------------------------------------------------------------

// "where each kind of figure comes from", derived from the ceilings' source.
inline nlohmann::json sources_json(const Ceilings& c) {
  return {{"time_ms", "measured"},
          {"flops", "cost model"},
          {"bytes", "cost model"},
          {"ceilings", c.source},
          {"floor_ms", "cost model / ceilings"},
          {"mfu", "measured time, cost-model model FLOPs"},
          {"mbu", "measured time, cost-model bytes"}};
}

template <class V, Same<RunReport> R>
void describe(V& v, R& r) {
  v.derived("schema_version", std::string(kSchemaVersion),
            {"", "major.minor of this schema", 0, nullptr, "^1\\.[0-9]+$"});
  v.opaque("tool", r.tool, {"", "the latprof that wrote the report"}, [](auto& d) {
    d("name", kString, {"", "the tool", 0, "latprof"});
    d("version", kString, {"", "latprof version"});
    d("git_commit", kString, {"", "commit latprof was built from"});
    d("git_dirty", kBoolean, {"", "uncommitted changes at build time"});
    d("build_type", kString, {"", "CMake build type"});
    d("compiler", kString, {"", "compiler and version", kOptional});
    d("nvtx", kBoolean, {"", "NVTX ranges compiled in", kOptional});
  });
  v("created_utc", r.created_utc,
    {"", "when the run started, UTC, ISO 8601", 0, nullptr,
     "^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z$"});
  v.opaque("machine", r.machine, {"", "the host and the device"}, [](auto& d) {
    d("hostname", kString, {"", "host name"});
    d("cpu", kString, {"", "CPU model"});
    d("cores", kInteger, {"count", "hardware threads", kMin0});
    d("memory_bytes", kNumber, {"B", "host memory", kOptional | kMin0});
    d("os", kString, {"", "kernel and architecture", kOptional});
    d.object("device", {"", "the device the run used", kOptional}, [](auto& e) {
      e("backend", kString, {"", "cpu or cuda", kOptional});
      e("name", kString, {"", "device name", kOptional});
      e("memory_bytes", kNumber, {"B", "device memory", kOptional | kMin0});
      e("details", kString, {"", "backend-specific details", kOptional});
    });
    d("backends", kStrings, {"", "backends compiled in, and why one is unavailable", kOptional});
    d("load_average_1min_before", kNumber,
      {"",
       "1-minute load average before the run (-1: unknown); above half the cores adds a "
       "warning to checks",
       kOptional});
  });
  v.object("run", {"", "what was run"}, [&](auto& w) {
    auto& ri = r.run;
    w("model", ri.model, {"", "model name"});
    w("model_source", ri.model_source, {"", "builtin, or the path it was loaded from", kOptional});
    w("weights", ri.weights, {"", "synthetic (seed N), or the file loaded", kOptional});
    w("dtype", ri.dtype, {"", "weight precision", 0, "fp16|int8|int8-w8a8"});
    w("kv_dtype", ri.kv_dtype,
      {"", "KV-cache element type (absent in reports before it was added: fp16)", kOmitEmpty,
       "fp16|bf16|int8"});
    w("backend", ri.backend, {"", "cpu or cuda"});
    w("device", ri.device, {"", "device name"});
    w("input_tokens", ri.input_tokens, {"token", "prompt tokens per sequence, with BOS", kMin1});
    w("output_tokens", ri.output_tokens, {"token", "generated tokens per sequence", kMin1});
    w("batch", ri.batch, {"count", "sequences run together", kMin1});
    w("threads", ri.threads, {"count", "CPU threads", kMin0});
    w("repeat", ri.repeat, {"count", "timed requests", kMin1});
    w("warmup", ri.warmup, {"count", "untimed warm-up requests", kMin0});
    w("seed", ri.seed, {"", "seed of the synthetic weights, prompt and sampler", kMin0});
    w("temperature", ri.temperature, {"", "sampling temperature; 0: greedy", kOptional | kMin0});
    w("top_k", ri.top_k,
      {"count", "sample among the k most likely tokens; 0: all", kOptional | kMin0});
    w("graphs", ri.graphs, {"", "decode steps replayed as CUDA graphs", kOptional});
    w("tokenizer", ri.tokenizer, {"", "tokenizer", kOptional});
    w("prompt_token_ids", ri.prompt_token_ids, {"", "prompt of sequence 0", kOptional});
    w("output_token_ids", ri.output_token_ids, {"", "generated tokens of sequence 0", kOptional});
    w("output_text", ri.output_text, {"", "generated text of sequence 0", kOptional});
    w("argv", ri.argv, {"", "the command line", kOptional});
  });
  v.opaque("model", r.model_config, {"", "the model's shape"}, [](auto& d) {
    d("name", kString, {"", "model name"});
    d("dim", kInteger, {"", "hidden size", kMin1});
    d("n_layers", kInteger, {"count", "transformer layers", kMin1});
    d("n_heads", kInteger, {"count", "attention (query) heads", kMin1});
    d("n_kv_heads", kInteger, {"count", "key/value heads (fewer than n_heads: GQA)", kMin1});
    d("ffn_dim", kInteger, {"", "MLP hidden size", kMin1});
    d("vocab_size", kInteger, {"token", "vocabulary size", kMin1});
    d("max_seq_len", kInteger, {"token", "context length", kMin1});
    d("rope_theta", kNumber, {"", "RoPE base", kOptional});
    d("rope_scaling", kAny,
      {"", "rotary frequency scaling (type linear or llama3 and its factors); null: none",
       kOptional | kNullable});
    d("sliding_window", kInteger,
      {"token", "keys a query attends to (Mistral); absent or 0: the whole context",
       kOptional | kMin0});
    d("norm_eps", kNumber, {"", "RMSNorm epsilon", kOptional});
    d("tie_embeddings", kBoolean, {"", "LM head shares the embedding", kOptional});
    d("params", kNumber, {"count", "parameters", kOptional | kMin0});
    d("weight_bytes", kNumber, {"B", "weights in memory at the run's dtype", kOptional | kMin0});
  });
  v.object("ceilings", {"", "the roofs: measured, or from a datasheet (see source)"}, [&](auto& w) {
    auto& c = r.ceilings;
    w("device", c.device, {"", "device"});
    w("source", c.source, {"", "where the figures come from"});
    w("mem_bw_bytes_per_s", c.mem_bw_bytes_per_s,
      {"B/s",
       "memory bandwidth (CPU runs: the mean of the read bandwidth measured just before and just "
       "after the timed part, info.read_bandwidth_before/after; the cached probe figure is "
       "info.read_bandwidth_cached)",
       kPositive});
    w("matmul_flops_per_s", c.matmul_flops_per_s,
      {"FLOP/s", "matmul peak (on a CPU: the FP32 FMA peak the kernels run on)", kPositive});
    w("vector_flops_per_s", c.vector_flops_per_s,
      {"FLOP/s", "elementwise peak", kOptional | kMin0});
    w("int8_ops_per_s", c.int8_ops_per_s,
      {"op/s",
       "INT8 peak (CPU: the int8 dot-product peak, or the AMX-INT8 tile peak where the GEMM uses "
       "the tiles); 0: none",
       kOptional | kMin0});
    w("bf16_flops_per_s", c.bf16_flops_per_s,
      {"FLOP/s",
       "CPU: the bf16 dot-product peak (vdpbf16ps), attention's roof on a bf16 KV cache where it "
       "exceeds matmul_flops_per_s; 0: none or not measured",
       kOptional | kMin0});
    w("int16_ops_per_s", c.int16_ops_per_s,
      {"op/s",
       "CPU: the int16 dot-product peak (vpdpwssd), or half the AMX-INT8 tile peak where the "
       "GEMM uses the tiles: the W8A16 (int8) matmuls' roof; 0: none or not measured",
       kOptional | kMin0});
    w("f16_tile_flops_per_s", c.f16_tile_flops_per_s,
      {"FLOP/s",
       "CPU: a quarter of the AMX-BF16 tile peak where the GEMM runs FP16 weights on the tiles "
       "(four bf16 products per fp16 one): the FP16 matmuls' roof where it exceeds "
       "matmul_flops_per_s; 0: none or not measured",
       kOptional | kMin0});
    w("memory_bytes", c.memory_bytes, {"B", "memory capacity", kOptional | kMin0});
    w("cache_bytes", c.cache_bytes, {"B", "last-level cache", kOptional | kMin0});
    w("info", r.ceilings_info,
      {"",
       "how the ceilings were obtained (probe details, cache file; CPU runs: "
       "read_bandwidth_before/after/cached in B/s, and core_to_core_ns_before/after, the one-way "
       "trip of a cache line between two of the thread pool's cores in ns)",
       kOptional});
  });
  v.object("metrics", {"", "request metrics"}, [&](auto& w) {
    auto& m = r.metrics;
    w("ttft_ms", m.ttft_ms,
      {"ms", "time to first token: request start (before tokenize) to the first token detokenized",
       kMin0});
    w("tpot_ms", m.tpot_ms,
      {"ms", "time per output token: (last token - first token) / (output tokens - 1)", kMin0});
    w("e2e_ms", m.e2e_ms,
      {"ms", "end-to-end latency: request start to the response serialized (median repeat)",
       kMin0});
    w("prefill_tokens_per_s", m.prefill_tokens_per_s,
      {"token/s", "batch x prompt tokens / prefill time", kMin0});
    w("decode_tokens_per_s", m.decode_tokens_per_s,
      {"token/s", "batch / TPOT: tokens after the first per second of decoding", kMin0});
    w("itl_ms", m.itl_ms,
      {"ms", "inter-token latency: the gaps between successive tokens, over all repeats"});
    w("e2e_repeats_ms", m.e2e_repeats_ms, {"ms", "end-to-end latency over the repeats"});
    w("mfu", m.mfu, {"1", "model FLOPs utilization (prefill + decode)", kMin0});
    w("mbu", m.mbu, {"1", "memory bandwidth utilization (decode)", kMin0});
    w("setup_ms", m.setup_ms,
      {"ms", "weights, KV cache, probe, warm-up: not part of request latency", kOptional});
    w.object(
        "decode_step_fit",
        {"", "least-squares line of decode step time against context", kOptional}, [&](auto& f) {
          f("intercept_ms", m.decode_step_intercept_ms,
            {"ms", "step time at zero context: weight streaming and fixed overhead"});
          f("slope_us_per_token", m.decode_step_slope_us_per_token,
            {"us/token", "added step time per cached token"});
          f("r2", m.decode_step_r2, {"1", "coefficient of determination of the fit", kOptional});
          f("kv_bytes_per_s", m.decode_kv_bytes_per_s,
            {"B/s", "effective KV-cache read bandwidth implied by the slope", kOptional});
        });
    w("decode_sync_ms", m.decode_sync_ms,
      {"ms",
       "median over the pure decode steps of steps[].sync_ms: what the CPU thread pool's "
       "synchronisation costs a decode step; -1: none measured (CUDA)",
       kOptional});
    w("decode_sync_fork_ms", m.decode_sync_fork_ms,
      {"ms",
       "median over the pure decode steps of steps[].sync_fork_ms: the late starts in "
       "decode_sync_ms; -1: none measured",
       kOptional});
    w("decode_parallel_regions", m.decode_parallel_regions,
      {"count", "median parallel regions per pure decode step; -1: none measured", kOptional});
    w("decode_sync_share", m.decode_sync_share,
      {"1", "median of sync_ms / forward_ms over the pure decode steps; -1: none measured",
       kOptional});
    w("decode_offcpu_ms", m.decode_offcpu_ms,
      {"ms",
       "mean over the pure decode steps of steps[].offcpu_ms: the time per decode step the "
       "machine took from the CPU thread pool (compare tpot_ms); -1: none measured",
       kOptional});
    w("decode_offcpu_max_ms", m.decode_offcpu_max_ms,
      {"ms", "the largest steps[].offcpu_ms of a pure decode step; -1: none measured", kOptional});
    w("decode_offcpu_share", m.decode_offcpu_share,
      {"1",
       "sum of steps[].offcpu_ms / sum of steps[].time_ms over the pure decode steps; -1: none "
       "measured",
       kOptional});
    w("decode_runq_ms", m.decode_runq_ms,
      {"ms",
       "mean over the pure decode steps of steps[].runq_ms: the part of decode_offcpu_ms spent "
       "waiting for a CPU behind other tasks; -1: none measured",
       kOptional});
  });
  v("stages", r.stages, {"", "the stage table, in request order"});
  v("ops", r.ops, {"", "the op table, per stage", 0, nullptr, nullptr, "stage"});
  v.opaque(
      "setup", r.setup, {"", "model setup, apart from request latency", kNullable}, [](auto& d) {
        d("ceilings_ms", kNumber, {"ms", "measuring or loading the ceilings", kOptional});
        d("allocate_ms", kNumber, {"ms", "allocating weights, KV cache, activations", kOptional});
        d("weights_ms", kNumber, {"ms", "generating or loading the weights", kOptional});
        d("weights_source", kString, {"", "where the weights came from", kOptional});
        d("weights_bytes", kNumber, {"B", "weights in memory", kOptional | kMin0});
        d("weights_bytes_read", kNumber,
          {"B", "bytes read from the weights file", kOptional | kMin0});
        d("weights_bytes_per_s", kNumber, {"B/s", "weights_bytes / weights_ms", kOptional | kMin0});
        d("kv_cache_bytes", kNumber, {"B", "KV cache allocated", kOptional | kMin0});
        d("activation_bytes", kNumber, {"B", "activation buffers", kOptional | kMin0});
        d("warmup_ms", kNumber, {"ms", "untimed warm-up requests", kOptional});
        d("warmup_requests", kInteger, {"count", "warm-up requests run", kOptional | kMin0});
        d.object("warmup", {"", "what the warm-up covered", kOptional}, [](auto& e) {
          e("requests", kInteger, {"count", "warm-up requests", kMin0});
          e("prompt_tokens", kInteger, {"token", "prompt length of each (the timed one)", kMin0});
          e("output_tokens", kInteger, {"token", "tokens each generated (0: none ran)", kMin0});
          e("kv_cache_bytes_touched", kNumber,
            {"B", "KV-cache bytes written once before any request", kMin0});
          e("time_ms", kNumber, {"ms", "the warm-up, KV-cache touch included", kMin0});
        });
        d.object("engine", {"", "the continuous-batching engine's settings", kOptional},
                 [](auto& e) {
                   e("kv_block_size", kInteger, {"token", "positions per KV block", kMin1});
                   e("kv_blocks", kInteger, {"count", "blocks in the KV pool", kMin1});
                   e("kv_cache_bytes", kNumber, {"B", "the KV pool", kMin0});
                   e("max_model_len", kInteger, {"token", "positions of one request", kMin1});
                   e("max_batched_tokens", kInteger,
                     {"token", "most tokens in one step (capped at what the run can hold)", kMin1});
                   e("max_seqs", kInteger, {"count", "most sequences in one step", kMin1});
                   e("preemptions", kInteger,
                     {"count", "requests preempted (recomputed) in the median repeat", kMin0});
                 });
        d("unattributed_ms", kNumber,
          {"ms", "e2e_ms minus the sum of the stages (they partition it: zero up to rounding)",
           kOptional});
        d.object(
            "profiler_overhead", {"", "with --overhead: one request without profiling", kOptional},
            [](auto& e) {
              e("instrumented_e2e_ms", kNumber, {"ms", "median instrumented request"});
              e("bare_e2e_ms", kNumber, {"ms", "the request without NVTX ranges or op events"});
              e("overhead_fraction", kNumber, {"1", "(instrumented - bare) / bare"});
              e("instrumented", kString, {"", "what instrumentation was on", kOptional});
              e("note", kString, {"", "how to read it", kOptional});
            });
      });
  v("decode_step_ms", r.decode_step_ms,
    {"ms",
     "median repeat: the forward pass of each decode step on the backend clock (step k, from 0, "
     "attends over input + 1 + k positions); the decode-step fit's samples",
     kMin0});
  v("token_times_ms", r.token_times_ms,
    {"ms",
     "median repeat: each output token of sequence 0 in host memory and detokenized, from the "
     "request start (host clock); TTFT, TPOT and the ITL gaps derive from it",
     kOptional | kMin0});
  v("repeat_e2e_ms", r.repeat_e2e_ms, {"ms", "end-to-end latency of every repeat", kMin0});
  v("steps", r.steps,
    {"", "the engine's steps in the median repeat (prefill and decode tokens, KV use, time)",
     kOptional});
  v.opaque(
      "load", r.load,
      {"", "run --requests: the load's settings (absent in the single-request mode)", kOptional},
      [](auto& d) {
        d("requests", kInteger, {"count", "requests sent", kMin1});
        d("rate", kUntyped, {"request/s", "requests per second, or \"inf\" (all at once)"});
        d("arrival", kString, {"", "arrival process", 0, "poisson|gamma|constant"});
        d("burstiness", kNumber, {"", "gamma shape (1: Poisson; below 1: burstier)"});
        d("input", kString, {"token", "prompt length: a number or a distribution"});
        d("output", kString, {"token", "output length: a number or a distribution"});
        d("dataset", kString, {"", "the JSON Lines dataset; null: synthetic", kNullWhenEmpty});
        d("slo", kString, {"", "per-request thresholds as given; null: none", kNullWhenEmpty});
        d("prefix_cache", kBoolean, {"", "automatic prefix caching on"});
        d("duration_ms", kNumber, {"ms", "the run: first arrival to last token", kMin0});
      });
  v.opaque(
      "requests", r.requests,
      {"", "run --requests: one object per request, by id (absent otherwise)", kOptional | kArray},
      [](auto& d) {
        d("id", kInteger, {"", "request number, from 0", kMin0});
        d("input_tokens", kInteger, {"token", "prompt tokens, with BOS", kMin1});
        d("output_tokens", kInteger, {"token", "tokens generated", kMin0});
        d("arrival_ms", kNumber,
          {"ms", "when it arrived, from the first arrival (host clock)", kMin0});
        d("queue_ms", kNumber,
          {"ms", "arrival to the start of its first engine step; null when not known", kMin0});
        d("ttft_ms", kNumber, {"ms", "arrival to its first token in host memory", kMin0});
        d("tpot_ms", kNumber,
          {"ms", "(last token - first token) / (tokens - 1); null with one token", kMin0});
        d("e2e_ms", kNumber, {"ms", "arrival to its last token", kMin0});
        d("itl_ms", kNumbers, {"ms", "the gaps between its successive tokens"});
        d("preemptions", kInteger, {"count", "times it was preempted and recomputed", kMin0});
        d("prefix_hit_tokens", kInteger,
          {"token", "prompt tokens found in the prefix cache", kMin0});
        d("slo_met", kBoolean, {"", "every --slo threshold held (true when none is set)"});
        d.object("classes_ms",
                 {"ms",
                  "the four latency classes (README, \"Latency classes\"); they add up to "
                  "e2e_ms; null where not known",
                  kNullable},
                 [](auto& e) {
                   e("compute", kNumber, {"ms", "own work bound by compute (and host work)"});
                   e("memory", kNumber, {"ms", "own work bound by memory bandwidth"});
                   e("communication", kNumber, {"ms", "between devices; 0 on one device"});
                   e("scheduling", kNumber,
                     {"ms", "the rest: queueing, sharing steps, waiting between steps"});
                 });
      });
  v.opaque(
      "summary", r.summary,
      {"", "run --requests: the load's figures over its requests (absent otherwise)", kOptional},
      [](auto& d) {
        d("requests", kInteger, {"count", "requests finished", kMin0});
        d("ttft_ms", kDistribution, {"ms", "distribution of ttft_ms over the requests", kNullable});
        d("tpot_ms", kDistribution,
          {"ms", "distribution of tpot_ms (requests with 2+ tokens)", kNullable});
        d("itl_ms", kDistribution,
          {"ms", "distribution of every request's token gaps, pooled", kNullable});
        d("e2e_ms", kDistribution, {"ms", "distribution of e2e_ms", kNullable});
        d("queue_ms", kDistribution, {"ms", "distribution of queue_ms", kNullable});
        d("duration_s", kNumber, {"s", "first arrival to last finish", kMin0});
        d("request_throughput", kNumber, {"request/s", "requests / duration_s", kMin0});
        d("output_tokens_per_s", kNumber, {"token/s", "output tokens / duration_s", kMin0});
        d("goodput", kNumber,
          {"request/s", "requests meeting every --slo threshold / duration_s", kMin0});
        d("slo_attainment", kNumber, {"1", "share of requests meeting every threshold", kMin0});
        d("slo", kString, {"", "the thresholds as given; null: none", kNullWhenEmpty});
        d("preemptions", kInteger, {"count", "preemptions over all requests", kMin0});
        d("prefix_hit_tokens", kInteger,
          {"token", "prompt tokens served from the prefix cache", kMin0});
        d.object("classes_ms",
                 {"ms",
                  "per latency class, its distribution over the requests; null where "
                  "not known",
                  kNullable},
                 [](auto& e) {
                   e("compute", kDistribution, {"ms", "compute", kNullable});
                   e("memory", kDistribution, {"ms", "memory", kNullable});
                   e("communication", kDistribution, {"ms", "communication", kNullable});
                   e("scheduling", kDistribution, {"ms", "scheduling", kNullable});
                 });
      });
  v("checks", r.checks, {"", "physics checks"});
  v("notes", r.notes, {"", "how figures were obtained (clock, graphs, counters, caveats)"});
  v.opaque("profile", r.profile,
           {"", "backend profile (CUDA kernel timeline, counters); null on the CPU", kNullable},
           [](auto&) {});
  v.derived("sources", sources_json(r.ceilings),
            {"", "where each kind of figure comes from (measured, cost model, ceilings)"});
}

}  // namespace latprof::fields
