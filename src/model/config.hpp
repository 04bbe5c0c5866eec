#pragma once
// A Llama-style decoder's shape. Built-in configs live in models/*.json (embedded in the binary).
#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

namespace latprof {

// Scaling of the rotary frequencies, as Hugging Face transformers computes inv_freq
// (modeling_rope_utils.py):
//   none:   inv_freq[i] = theta^(-2i/head_dim)
//   linear: inv_freq[i] / factor (position interpolation)
//   llama3: frequencies whose wavelength 2π/inv_freq exceeds original_max_pos / low_freq_factor
//           are divided by factor, those below original_max_pos / high_freq_factor are kept, and
//           those between are interpolated smoothly (Llama 3.1 and later)
// and then, when freq_factors is given (GGUF tensor rope_freqs.weight, llama.cpp's form of the
// llama3 rule), each inv_freq[i] is divided by freq_factors[i].
struct RopeScaling {
  std::string type = "none";                         // none | linear | llama3
  double factor = 1;                                 // linear, llama3
  double low_freq_factor = 1, high_freq_factor = 4;  // llama3
  int64_t original_max_pos = 0;                      // llama3: original_max_position_embeddings
  std::vector<double> freq_factors;                  // [head_dim/2] or empty
  bool active() const { return type != "none" || !freq_factors.empty(); }
};

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
  RopeScaling rope_scaling;
  // Sliding-window attention (Mistral): a query at position p attends to keys p - W + 1 .. p
  // (W keys, as Hugging Face transformers masks them); 0: full causal attention.
  int64_t sliding_window = 0;
  double norm_eps = 1e-5;
  bool tie_embeddings = false;

  // Rotary frequencies in radians per position, [head_dim/2], rope scaling applied.
  std::vector<double> rope_inv_freq() const;
  // Keys a query at position pos (0-based) attends to: pos + 1, or the window when smaller.
  int64_t attended_keys(int64_t pos) const {
    return sliding_window > 0 && sliding_window < pos + 1 ? sliding_window : pos + 1;
  }

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

// latprof's model config format (models/*.json, and the "model" object of reports). A field it
// does not know, or a value it cannot honour, is a UsageError naming the field.
ModelConfig model_from_json(const nlohmann::json& j, const std::string& origin);
// Hugging Face's "rope_scaling" object (also used by latprof's format); null or absent: none.
// Throws UsageError naming `where` and the field for types and values latprof cannot honour.
RopeScaling rope_scaling_from_json(const nlohmann::json& j, const std::string& where);
nlohmann::json rope_scaling_to_json(const RopeScaling& r);
nlohmann::json model_to_json(const ModelConfig& m);

// Built-in configs, in file-name order.
std::vector<ModelConfig> builtin_models();
// A built-in name or a path to a JSON config; throws UsageError listing the built-ins.
ModelConfig find_model(const std::string& name_or_path);
inline constexpr const char* kDefaultModel = "llama-2-7b";

}  // namespace latprof
