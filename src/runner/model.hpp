#pragma once
// A model resident on a backend: every weight tensor, the KV cache and the scratch activations,
// allocated once (after checking that they fit) and filled from a WeightSource.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "model/config.hpp"
#include "model/cost_model.hpp"
#include "model/weights.hpp"

namespace latprof {

struct LayerWeights {
  float* attn_norm = nullptr;  // [dim] fp32
  DeviceWeight wq, wk, wv, wo;
  float* ffn_norm = nullptr;  // [dim] fp32
  DeviceWeight w_gate, w_up, w_down;
};

// Bytes the model needs on the device, by part, before anything is allocated.
struct Footprint {
  double weights = 0;
  double kv_cache = 0;
  double activations = 0;
  double total() const { return weights + kv_cache + activations; }
};

// What a model resident on a backend must hold for the engine: the KV block pool and the
// largest step.
struct EngineShape {
  int64_t kv_blocks = 0;        // blocks in the KV pool
  int64_t block_size = 16;      // positions per block
  int64_t max_step_tokens = 0;  // rows of the largest step (the token budget)
  int64_t max_seqs = 0;         // sequences in one step
  int64_t max_model_len = 0;    // positions of one request
  int64_t max_blocks() const { return (max_model_len + block_size - 1) / block_size; }
};

// The token budget of an engine step when --max-batched-tokens is 0 (the default), per backend,
// from measurements (README, "The engine"; reports/engine-cpu.md): on the CPU 512, which cuts the
// decode stall of a long prompt arriving by 2.6x against a one-step prefill at no cost in its
// TTFT; on CUDA vLLM's 8192 (not measured here).
inline constexpr int64_t kDefaultBatchedTokensCpu = 512;
inline constexpr int64_t kDefaultBatchedTokensCuda = 8192;
int64_t default_max_batched_tokens(const Backend& b);
// The weight type that runs a precision's weights: fp16, int8 (W8A16) or int8-w8a8.
WeightType weight_type_for(WeightFormat f);
// Throws UsageError (naming the backend's reason and what to do) when b cannot run weight type t.
void check_backend_runs(const Backend& b, WeightType t);
// The --dtype a model file's type implies when none is given: "int8" for Q8_0 (the file's own
// precision, as llama.cpp runs it), else "fp16".
std::string implied_dtype(const std::string& file_dtype);
// What a report says of a model file's stored precision against the run's weight type t (""
// when there is nothing to say): Q8_0 matrices dequantised to FP16, or INT8 chosen because the
// file is Q8_0 (`implied`: --dtype was not given).
std::string file_dtype_note(const std::string& file_dtype, WeightType t, bool implied);
// --kv-dtype: "fp16", "bf16" or "int8" (UsageError otherwise); and whether backend b keeps it.
KvType kv_type_for(const std::string& flag);
// The cost model's precision of dtype's weights on backend b, with b's activation and KV-cache
// types (an int8 cache's scales included).
Precision backend_precision(const std::string& dtype, const Backend& b);
void check_backend_kv(const Backend& b, KvType t);
// Throws UsageError naming the flag when an engine flag is out of range: --kv-block-size a power
// of two 1..4096, --max-batched-tokens 0 (the backend's default) or 1..2^20, --max-seqs 1..4096,
// --max-model-len 0 (the model's context) or 2..context.
void check_engine_flags(int64_t kv_block_size, int64_t max_batched_tokens, int64_t max_seqs,
                        int64_t max_model_len, int64_t context);

class LoadedModel {
 public:
  LoadedModel(const ModelConfig& cfg, WeightType wtype, Backend& backend, const EngineShape& shape);
  ~LoadedModel();
  LoadedModel(const LoadedModel&) = delete;
  LoadedModel& operator=(const LoadedModel&) = delete;

  static Footprint footprint(const ModelConfig& cfg, WeightType wtype, const Backend& backend,
                             const EngineShape& shape);
  // Throws UsageError with needed and available bytes when the footprint does not fit.
  static void check_fits(const Footprint& f, const Backend& backend, const std::string& what);

  // Fills every tensor; progress is called with (done, total) tensor counts.
  void load(WeightSource& src, const std::function<void(int64_t, int64_t)>& progress);

  const ModelConfig& config() const { return cfg_; }
  Backend& backend() { return backend_; }
  WeightType weight_type() const { return wtype_; }
  const EngineShape& shape() const { return shape_; }

  DeviceWeight tok_embeddings;
  std::vector<LayerWeights> layers;
  float* final_norm = nullptr;
  DeviceWeight output;  // LM head (shares tok_embeddings' data when tied)
  std::vector<KvLayer> kv;
  // Heads, rotary frequencies (rope scaling applied) and sliding window, from the config.
  AttentionShape attention_shape;

  // Scratch activations, sized for the largest step (max_step_tokens rows): x (residual
  // stream), xb (normed), q, k, v, att (attention output), proj (o_proj / down output), gate, up;
  // last (the rows the LM head sees) and logits [max_seqs, vocab]; sampled: device int32
  // [max_seqs].
  void *x = nullptr, *xb = nullptr, *q = nullptr, *k = nullptr, *v = nullptr, *att = nullptr,
       *proj = nullptr, *gate = nullptr, *up = nullptr, *last = nullptr, *logits = nullptr;
  int32_t* sampled = nullptr;
  // The step's int32 arrays (StepDesc) in one device buffer at fixed addresses: tokens,
  // positions, slots, seq_of_token [max_step_tokens]; query_start [max_seqs + 1]; context_lens,
  // logits_rows [max_seqs]; block_tables [max_seqs, max_blocks].
  int32_t* step_buf = nullptr;
  int64_t step_buf_ints = 0;

 private:
  void* alloc(size_t bytes, const char* what);
  DeviceWeight make_weight(WeightType t, int64_t n_out, int64_t n_in, const char* what);

  ModelConfig cfg_;
  WeightType wtype_;
  Backend& backend_;
  EngineShape shape_;
  std::vector<void*> allocations_;
};

}  // namespace latprof
