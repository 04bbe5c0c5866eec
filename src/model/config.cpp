#include "model/config.hpp"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/embedded.hpp"
#include "core/error.hpp"
#include "core/utf8.hpp"

namespace latprof {

int64_t ModelConfig::params_per_layer_linear() const {
  return dim * q_dim()         // q
         + 2 * dim * kv_dim()  // k, v
         + q_dim() * dim       // o
         + 3 * dim * ffn_dim;  // gate, up, down
}

int64_t ModelConfig::params_total() const {
  const int64_t per_layer = params_per_layer_linear() + 2 * dim;  // + attention and ffn norms
  return params_embedding() + n_layers * per_layer + dim /* final norm */ + params_lm_head();
}

void ModelConfig::validate() const {
  auto positive = [&](int64_t v, const char* field, int64_t max) {
    if (v <= 0 || v > max)
      usage_error("model '" + name + "': field '" + field + "' is " + std::to_string(v) +
                  "; it must be between 1 and " + std::to_string(max));
  };
  positive(dim, "dim", 1 << 16);
  positive(n_layers, "n_layers", 1024);
  positive(n_heads, "n_heads", 1024);
  positive(n_kv_heads, "n_kv_heads", 1024);
  positive(ffn_dim, "ffn_dim", 1 << 18);
  positive(vocab_size, "vocab_size", 1 << 22);
  positive(max_seq_len, "max_seq_len", 1 << 22);
  if (dim % n_heads != 0)
    usage_error("model '" + name + "': dim " + std::to_string(dim) +
                " is not a multiple of n_heads " + std::to_string(n_heads));
  if (head_dim() % 2 != 0)
    usage_error("model '" + name + "': head_dim " + std::to_string(head_dim()) +
                " must be even for rotary embeddings");
  if (n_heads % n_kv_heads != 0)
    usage_error("model '" + name + "': n_heads " + std::to_string(n_heads) +
                " is not a multiple of n_kv_heads " + std::to_string(n_kv_heads));
  if (!(rope_theta > 0)) usage_error("model '" + name + "': field 'rope_theta' must be positive");
  if (!(norm_eps > 0)) usage_error("model '" + name + "': field 'norm_eps' must be positive");
}

ModelConfig model_from_json(const nlohmann::json& j, const std::string& origin) {
  ModelConfig m;
  auto need = [&](const char* key) -> const nlohmann::json& {
    if (!j.contains(key)) usage_error(origin + ": model config has no field '" + key + "'");
    return j.at(key);
  };
  try {
    // Names and paths go into JSON reports, which must be valid UTF-8.
    m.name = utf8_sanitize(j.value("name", std::filesystem::path(origin).stem().string()));
    m.description = j.value("description", "");
    m.source = utf8_sanitize(j.value("source", origin));
    m.dim = need("dim").get<int64_t>();
    m.n_layers = need("n_layers").get<int64_t>();
    m.n_heads = need("n_heads").get<int64_t>();
    m.n_kv_heads = j.value("n_kv_heads", m.n_heads);
    m.ffn_dim = need("ffn_dim").get<int64_t>();
    m.vocab_size = need("vocab_size").get<int64_t>();
    m.max_seq_len = need("max_seq_len").get<int64_t>();
    m.rope_theta = j.value("rope_theta", 10000.0);
    m.norm_eps = j.value("norm_eps", 1e-5);
    m.tie_embeddings = j.value("tie_embeddings", false);
  } catch (const nlohmann::json::exception& e) {
    usage_error(origin + ": bad model config: " + e.what());
  }
  m.validate();
  return m;
}

nlohmann::json model_to_json(const ModelConfig& m) {
  return {{"name", m.name},
          {"dim", m.dim},
          {"n_layers", m.n_layers},
          {"n_heads", m.n_heads},
          {"n_kv_heads", m.n_kv_heads},
          {"ffn_dim", m.ffn_dim},
          {"vocab_size", m.vocab_size},
          {"max_seq_len", m.max_seq_len},
          {"rope_theta", m.rope_theta},
          {"norm_eps", m.norm_eps},
          {"tie_embeddings", m.tie_embeddings},
          {"params", m.params_total()}};
}

std::vector<ModelConfig> builtin_models() {
  std::vector<ModelConfig> out;
  for (const auto& f : embedded::models()) {
    out.push_back(model_from_json(nlohmann::json::parse(f.text), "models/" + f.name + ".json"));
  }
  return out;
}

ModelConfig find_model(const std::string& name_or_path) {
  for (auto& m : builtin_models())
    if (m.name == name_or_path) return m;
  namespace fs = std::filesystem;
  if (name_or_path.ends_with(".json") && fs::is_regular_file(name_or_path)) {
    std::ifstream in(name_or_path);
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(in);
    } catch (const nlohmann::json::exception& e) {
      usage_error(name_or_path + ": not valid JSON: " + e.what());
    }
    return model_from_json(j, name_or_path);
  }
  std::ostringstream names;
  for (auto& m : builtin_models()) names << (names.tellp() ? ", " : "") << m.name;
  usage_error("unknown model '" + name_or_path + "'; built-in models: " + names.str() +
              " (or a path to a model config .json); see 'latprof models'");
}

}  // namespace latprof
