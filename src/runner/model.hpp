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

class LoadedModel {
 public:
  // max_rows: the most tokens one forward pass processes (batch * prompt); ctx_cap: positions
  // per sequence in the KV cache.
  LoadedModel(const ModelConfig& cfg, WeightType wtype, Backend& backend, int64_t n_seq,
              int64_t max_rows_per_seq, int64_t ctx_cap);
  ~LoadedModel();
  LoadedModel(const LoadedModel&) = delete;
  LoadedModel& operator=(const LoadedModel&) = delete;

  static Footprint footprint(const ModelConfig& cfg, WeightType wtype, const Backend& backend,
                             int64_t n_seq, int64_t max_rows_per_seq, int64_t ctx_cap);
  // Throws UsageError with needed and available bytes when the footprint does not fit.
  static void check_fits(const Footprint& f, const Backend& backend, const std::string& what);

  // Fills every tensor; progress is called with (done, total) tensor counts.
  void load(WeightSource& src, const std::function<void(int64_t, int64_t)>& progress);

  const ModelConfig& config() const { return cfg_; }
  Backend& backend() { return backend_; }
  WeightType weight_type() const { return wtype_; }
  int64_t n_seq() const { return n_seq_; }
  int64_t ctx_cap() const { return ctx_cap_; }
  int64_t max_rows() const { return max_rows_; }

  DeviceWeight tok_embeddings;
  std::vector<LayerWeights> layers;
  float* final_norm = nullptr;
  DeviceWeight output;  // LM head (shares tok_embeddings' data when tied)
  std::vector<KvLayer> kv;
  // Heads, rotary frequencies (rope scaling applied) and sliding window, from the config.
  AttentionShape attention_shape;

  // Scratch activations, sized for max_rows rows: x (residual stream), xb (normed), q, k, v,
  // att (attention output), proj (o_proj / down output), gate, up, last (rows for the LM head),
  // logits [n_seq, vocab]; tokens [max_rows] and pos [1] are device int32.
  void *x = nullptr, *xb = nullptr, *q = nullptr, *k = nullptr, *v = nullptr, *att = nullptr,
       *proj = nullptr, *gate = nullptr, *up = nullptr, *last = nullptr, *logits = nullptr;
  int32_t* tokens = nullptr;
  int32_t* pos = nullptr;

 private:
  void* alloc(size_t bytes, const char* what);
  DeviceWeight make_weight(WeightType t, int64_t n_out, int64_t n_in, const char* what);

  ModelConfig cfg_;
  WeightType wtype_;
  Backend& backend_;
  int64_t n_seq_, max_rows_, ctx_cap_;
  std::vector<void*> allocations_;
};

}  // namespace latprof
