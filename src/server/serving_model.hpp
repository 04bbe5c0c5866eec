#pragma once
// The model side of `latprof serve`: opens the model, places it on a backend with a KV pool sized
// for serving, and runs engine steps with each request's own sampling parameters.
//
// KV pool by default: what fits beside the weights and activations in kKvMemoryFraction of the
// memory the backend reports available, capped at what max_seqs requests of max_model_len
// positions can use (more would never be touched); --kv-cache-memory sets it instead.
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "backend/backend.hpp"
#include "engine/engine.hpp"
#include "model/open.hpp"
#include "runner/model.hpp"
#include "runner/model_runner.hpp"
#include "runner/profiler.hpp"

namespace latprof::server {

// Share of the available memory the weights, activations and KV pool may take together by
// default (vLLM's --gpu-memory-utilization is 0.9 as well); the rest is left to the process
// (HTTP threads, buffers) and the machine.
inline constexpr double kKvMemoryFraction = 0.9;

struct ServeModelOptions {
  std::string model = "tiny";
  std::string dtype = "fp16";
  std::string kv_dtype = "fp16";  // fp16 or bf16 (CPU backend)
  std::string backend = "auto";
  int threads = 0;
  uint64_t seed = 42;              // synthetic weights of built-in models
  int64_t kv_block_size = 16;      // positions per KV block
  std::string kv_cache_memory;     // "": the default above
  int64_t max_model_len = 0;       // positions of one request; 0: the model's context
  int64_t max_batched_tokens = 0;  // tokens per engine step; 0: the backend's default
  int64_t max_seqs = 256;          // sequences per engine step
  bool graphs = true;
  bool prefix_cache = true;  // reuse cached KV blocks of identical prompt prefixes
};

// Sampling parameters of one request (OpenAI / vLLM semantics): temperature 0 is greedy;
// top_k 0 and top_p 1 keep the whole vocabulary.
struct RequestSampling {
  double temperature = 1.0;
  int64_t top_k = 0;
  double top_p = 1.0;
  uint64_t seed = 0;
};

// Samples from one row of logits: temperature, then top-k, then top-p (nucleus) over the
// remaining probabilities, from a generator seeded by (seed, token index) so a request's output
// does not depend on what it shared its steps with.
int32_t sample_logits(const float* logits, int64_t vocab, const RequestSampling& s,
                      int64_t token_index);

class ServingModel {
 public:
  // Opens, checks (flags, memory) and loads everything; throws UsageError naming the problem.
  explicit ServingModel(const ServeModelOptions& o);

  const ModelConfig& config() const { return om_.config; }
  const Tokenizer& tokenizer() const { return *om_.tokenizer; }
  const OpenedModel& opened() const { return om_; }
  Backend& backend() { return *backend_; }
  LoadedModel& model() { return *model_; }
  const EngineShape& shape() const { return shape_; }
  const std::string& why_not_cuda() const { return why_not_cuda_; }
  double kv_bytes() const { return kv_bytes_; }
  int threads() const { return threads_; }  // CPU threads (OpenMP) of each step
  bool prefix_cache() const { return prefix_cache_; }
  double load_ms() const { return load_ms_; }

 private:
  OpenedModel om_;
  std::unique_ptr<Backend> backend_;
  std::string why_not_cuda_;
  EngineShape shape_;
  std::unique_ptr<LoadedModel> model_;
  double kv_bytes_ = 0;
  double load_ms_ = 0;
  bool prefix_cache_ = true;
  int threads_ = 1;
};

// The engine's executor for a server: the model runner samples greedily on the backend; rows of
// requests that asked for sampling (temperature > 0) are sampled again on the host from their
// logits with their own parameters. Thread-safe set/erase of those parameters.
class ServingExecutor : public engine::Executor {
 public:
  explicit ServingExecutor(ServingModel& m);
  std::vector<int32_t> execute(const engine::StepBatch& b) override;

  void set_sampling(int64_t id, const RequestSampling& s);
  void erase_sampling(int64_t id);
  // Backend-clock forward and sampling time of the last step.
  double last_forward_ms() const { return last_forward_ms_; }
  // The last step's thread pool: its time off the CPUs and the run-queue part of it (ms,
  // wall-equivalent; -1: not measured: Backend::SyncTime).
  double last_offcpu_ms() const { return last_offcpu_ms_; }
  double last_runq_ms() const { return last_runq_ms_; }

 private:
  ServingModel& m_;
  Profiler prof_;
  std::unique_ptr<ModelRunner> runner_;
  std::mutex mu_;
  std::map<int64_t, RequestSampling> sampling_;  // only requests with temperature > 0
  std::vector<float> row_;
  double last_forward_ms_ = 0;
  double last_offcpu_ms_ = -1, last_runq_ms_ = -1;
};

}  // namespace latprof::server
