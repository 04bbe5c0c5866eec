#pragma once
// A Llama-style decoder's shape. Built-in configs live in models/*.json (embedded in the binary).
#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

namespace latprof {

struct ModelConfig {
  std::string name;
  std::string description;
  std::string source;  // where the numbers come from
  int64_t dim = 0;     // d_model
  int64_t n_layers = 0;
  int64_t n_heads = 0;     // query heads
  int64_t n_kv_heads = 0;  // key/value heads (GQA when < n_heads)
  int64_t ffn_dim = 0;     // SwiGLU hidden size
  int64_t vocab_size = 0;
  int64_t max_seq_len = 0;  // context window
  double rope_theta = 10000.0;
  double norm_eps = 1e-5;
  bool tie_embeddings = false;

  int64_t head_dim() const { return dim / n_heads; }
  int64_t q_dim() const { return n_heads * head_dim(); }
  int64_t kv_dim() const { return n_kv_heads * head_dim(); }

  // Parameter counts (exact, every weight including norms).
  int64_t params_embedding() const { return vocab_size * dim; }
  int64_t params_per_layer_linear() const;  // q, k, v, o, gate, up, down
  int64_t params_lm_head() const { return tie_embeddings ? 0 : vocab_size * dim; }
  int64_t params_total() const;
  // Parameters that take part in matrix products for one token (MFU's 2·N convention):
  // every linear layer including the LM head, excluding the embedding lookup.
  int64_t params_matmul() const { return n_layers * params_per_layer_linear() + vocab_size * dim; }

  // Validates every field; throws UsageError naming the field.
  void validate() const;
};

ModelConfig model_from_json(const nlohmann::json& j, const std::string& origin);
nlohmann::json model_to_json(const ModelConfig& m);

// Built-in configs, in file-name order.
std::vector<ModelConfig> builtin_models();
// A built-in name or a path to a JSON config; throws UsageError listing the built-ins.
ModelConfig find_model(const std::string& name_or_path);
inline constexpr const char* kDefaultModel = "llama-2-7b";

}  // namespace latprof
