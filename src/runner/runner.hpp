#pragma once
// The benchmark runner: opens the model, places it on a backend, measures the ceilings, runs
// warm-up and timed requests (tokenize -> prefill -> sample -> decode steps -> detokenize ->
// serialize), and builds the run report.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "report/report.hpp"
#include "runner/model.hpp"

namespace latprof {

struct RunOptions {
  std::string model = "llama-2-7b";
  std::string dtype = "fp16";
  bool dtype_implied = false;     // --dtype not given: taken from the model file (implied_dtype)
  std::string kv_dtype = "fp16";  // the KV cache's element type: fp16, bf16 or int8 (CPU backend)
  std::string backend = "auto";
  int64_t input = 500;   // prompt tokens per sequence (with BOS); ignored when prompt is set
  int64_t output = 200;  // generated tokens per sequence
  int64_t batch = 1;
  int threads = 0;  // 0: all cores
  int repeat = 0;   // 0: three, or one when a request takes over 20 s
  int warmup = 1;
  uint64_t seed = 42;
  float temperature = 0.f;
  int top_k = 0;
  bool graphs = true;
  bool counters = false;
  bool reprobe = false;
  bool overhead = false;       // one more request without instrumentation, to measure its cost
  bool quiet = false;          // no progress bars
  bool keep_timeline = false;  // fill RunReport::timeline (traces)
  std::string prompt;          // real text (from --prompt or --prompt-file)
  // The continuous-batching engine (see README).
  int64_t kv_block_size = 16;      // positions per KV block
  std::string kv_cache_memory;     // KV pool size ("8GiB"); "": what the run's requests need
  int64_t max_model_len = 0;       // positions of one request; 0: the model's context
  int64_t max_batched_tokens = 0;  // tokens per step, prefill and decodes; 0: the backend's
  int64_t max_seqs = 256;          // sequences per step
  // Latency under load (see README, "Latency under load"): requests > 0 sends that many requests
  // into the engine at their arrival times instead of repeating one request.
  int64_t requests = 0;
  double rate = 0;  // requests per second; infinity: all at once (parsed from --rate)
  std::string rate_text = "inf";
  std::string arrival = "poisson";
  double burstiness = 1.0;
  std::string input_dist;   // --input as a distribution ("uniform:100:500"); "": the number
  std::string output_dist;  // --output likewise
  std::string dataset;      // JSON Lines with input_tokens/prompt and output_tokens per line
  std::string slo;          // "ttft:500ms,tpot:50ms"
  bool prefix_cache = false;
  std::vector<std::string> argv;
};

// The most prompt text `run` takes (--prompt or --prompt-file): 1 MiB, far more tokens than the
// context of any model latprof runs; a larger file is refused before it is tokenized.
inline constexpr size_t kMaxPromptBytes = size_t(1) << 20;

// Validates the options against the model (context length, sizes); throws UsageError.
void validate_run_options(const RunOptions& o, int64_t max_seq_len);

// The engine's shape for `run`: o.batch requests of n_in + o.output tokens arriving together.
// Throws UsageError when the engine flags are out of range or the run's requests cannot fit.
EngineShape engine_shape_for_run(const RunOptions& o, const ModelConfig& cfg, const Backend& b,
                                 int64_t n_in);
// The engine's shape for a set of requests (prompt and output tokens each) of which at most
// --max-seqs run together; the default KV pool holds the largest --max-seqs of them whole.
struct RequestShape {
  int64_t prompt = 0, output = 0;
};
EngineShape engine_shape_for(const RunOptions& o, const ModelConfig& cfg, const Backend& b,
                             const std::vector<RequestShape>& reqs);

RunReport run_benchmark(const RunOptions& o);
// `run --requests N`: N requests arriving by the load shape into the engine; one timed run.
RunReport run_load(const RunOptions& o);

}  // namespace latprof
