#pragma once
// Where weights come from. The runner allocates every tensor on the backend and asks a source to
// fill it: synthetic weights are generated in place from the seed; model files (GGUF,
// safetensors) are read and converted to the run's dtype (src/model/loaders.hpp).
//
// Canonical tensor names (Llama layout, Hugging Face orientation [n_out, n_in]):
//   tok_embeddings [vocab, dim]        fp16 table
//   layers.N.attn_norm [dim]           fp32
//   layers.N.wq [q_dim, dim], layers.N.wk [kv_dim, dim], layers.N.wv [kv_dim, dim]
//   layers.N.wo [dim, q_dim]
//   layers.N.ffn_norm [dim]            fp32
//   layers.N.w_gate [ffn, dim], layers.N.w_up [ffn, dim], layers.N.w_down [dim, ffn]
//   norm [dim]                         fp32
//   output [vocab, dim]                (absent with tied embeddings)
// Q and K rows are in the rotate_half (Hugging Face) order the kernels use.
#include <cstdint>
#include <memory>
#include <string>

#include "backend/backend.hpp"

namespace latprof {

class WeightSource {
 public:
  virtual ~WeightSource() = default;
  virtual std::string describe() const = 0;  // "synthetic (seed 42)", "/models/x.gguf (Q8_0)"
  // Linear weight `name` into w, whose type (f16 or i8) and shape are already set and allocated.
  virtual void load_linear(const std::string& name, DeviceWeight& w, Backend& b) = 0;
  // The fp16 embedding table (w.type == f16).
  virtual void load_embedding(const std::string& name, DeviceWeight& w, Backend& b) = 0;
  // An fp32 vector (norm weights) of n elements into device memory.
  virtual void load_vector(const std::string& name, float* dst, int64_t n, Backend& b) = 0;
  // Bytes read from files so far (0 for synthetic weights), for the setup report.
  virtual double bytes_read() const { return 0; }
};

// Deterministic synthetic weights: every tensor gets its own RNG stream keyed by (seed, name).
std::unique_ptr<WeightSource> make_synthetic_weights(uint64_t seed);

}  // namespace latprof
