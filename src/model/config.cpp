#include "model/config.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
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

namespace {
std::string num_str(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "infinity" : "-infinity";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}
}  // namespace

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
  auto finite_positive = [&](double v, const std::string& field) {
    if (!std::isfinite(v) || v <= 0)
      usage_error("model '" + name + "': field '" + field + "' is " + num_str(v) +
                  "; it must be a finite number > 0");
  };
  finite_positive(rope_theta, "rope_theta");
  finite_positive(norm_eps, "norm_eps");
  const RopeScaling& r = rope_scaling;
  if (r.type != "none" && r.type != "linear" && r.type != "llama3")
    usage_error("model '" + name + "': rope_scaling type '" + r.type +
                "' is not supported; supported: linear, llama3");
  if (r.type != "none") finite_positive(r.factor, "rope_scaling.factor");
  if (r.type == "llama3") {
    finite_positive(r.low_freq_factor, "rope_scaling.low_freq_factor");
    finite_positive(r.high_freq_factor, "rope_scaling.high_freq_factor");
    if (r.high_freq_factor <= r.low_freq_factor)
      usage_error("model '" + name +
                  "': field 'rope_scaling.high_freq_factor' must be greater than "
                  "'rope_scaling.low_freq_factor'");
    if (r.original_max_pos <= 0 || r.original_max_pos > (1 << 22))
      usage_error("model '" + name +
                  "': field 'rope_scaling.original_max_position_embeddings' is " +
                  std::to_string(r.original_max_pos) + "; it must be between 1 and 4194304");
  }
  if (!r.freq_factors.empty()) {
    if (int64_t(r.freq_factors.size()) != head_dim() / 2)
      usage_error("model '" + name + "': " + std::to_string(r.freq_factors.size()) +
                  " rope frequency factors for head_dim " + std::to_string(head_dim()) +
                  "; expected " + std::to_string(head_dim() / 2));
    for (double f : r.freq_factors) finite_positive(f, "rope_freqs");
  }
  if (sliding_window < 0 || sliding_window > (1 << 22))
    usage_error("model '" + name + "': field 'sliding_window' is " +
                std::to_string(sliding_window) + "; it must be between 1 and 4194304 (0: none)");
}

std::vector<double> ModelConfig::rope_inv_freq() const {
  const int64_t half = head_dim() / 2;
  std::vector<double> f(static_cast<size_t>(half));
  const RopeScaling& r = rope_scaling;
  for (int64_t i = 0; i < half; ++i) {
    double x = std::pow(rope_theta, -2.0 * double(i) / double(head_dim()));
    if (r.type == "linear") {
      x /= r.factor;
    } else if (r.type == "llama3") {
      const double old_ctx = double(r.original_max_pos);
      const double low_wavelen = old_ctx / r.low_freq_factor;
      const double high_wavelen = old_ctx / r.high_freq_factor;
      const double wavelen = 2 * M_PI / x;
      if (wavelen > low_wavelen) {
        x /= r.factor;                       // low frequencies: interpolated
      } else if (wavelen >= high_wavelen) {  // between: a smooth blend of the two
        const double smooth =
            (old_ctx / wavelen - r.low_freq_factor) / (r.high_freq_factor - r.low_freq_factor);
        x = (1 - smooth) * x / r.factor + smooth * x;
      }  // high frequencies: unchanged
    }
    if (!r.freq_factors.empty()) x /= r.freq_factors[size_t(i)];
    f[size_t(i)] = x;
  }
  return f;
}

RopeScaling rope_scaling_from_json(const nlohmann::json& j, const std::string& where) {
  RopeScaling r;
  if (j.is_null()) return r;
  if (!j.is_object()) usage_error(where + ": field 'rope_scaling' must be an object or null");
  auto num = [&](const char* key) -> double {
    const auto& v = j.at(key);
    if (!v.is_number())
      usage_error(where + ": field 'rope_scaling." + std::string(key) + "' is not a number");
    return v.get<double>();
  };
  std::string type;
  for (const char* key : {"rope_type", "type"})
    if (j.contains(key) && !j[key].is_null()) {
      if (!j[key].is_string())
        usage_error(where + ": field 'rope_scaling." + key + "' is not a string");
      if (!type.empty() && type != j[key].get<std::string>())
        usage_error(where + ": fields 'rope_scaling.rope_type' and 'rope_scaling.type' differ");
      type = j[key].get<std::string>();
    }
  if (type.empty()) usage_error(where + ": field 'rope_scaling' has no 'rope_type'");
  if (type == "default" || type == "none") type = "none";
  if (type != "none" && type != "linear" && type != "llama3")
    usage_error(where + ": rope_scaling type '" + type +
                "' is not supported; supported: linear, llama3 (or default)");
  r.type = type;
  // Every other field must be one this type uses: any other would change the frequencies.
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& k = it.key();
    const bool ok = k == "rope_type" || k == "type" || k == "freq_factors" ||
                    (type != "none" && k == "factor") ||
                    (type == "llama3" && (k == "low_freq_factor" || k == "high_freq_factor" ||
                                          k == "original_max_position_embeddings"));
    if (!ok)
      usage_error(where + ": field 'rope_scaling." + k + "' is not supported with rope type '" +
                  (type == "none" ? "default" : type) + "'");
  }
  auto need = [&](const char* key) {
    if (!j.contains(key))
      usage_error(where + ": rope type '" + type + "' needs field 'rope_scaling." + key + "'");
  };
  if (type != "none") {
    need("factor");
    r.factor = num("factor");
  }
  if (type == "llama3") {
    for (const char* k :
         {"low_freq_factor", "high_freq_factor", "original_max_position_embeddings"})
      need(k);
    r.low_freq_factor = num("low_freq_factor");
    r.high_freq_factor = num("high_freq_factor");
    const auto& o = j["original_max_position_embeddings"];
    if (!o.is_number_integer())
      usage_error(where +
                  ": field 'rope_scaling.original_max_position_embeddings' is not an integer");
    r.original_max_pos = o.get<int64_t>();
  }
  if (j.contains("freq_factors")) {  // latprof's own: GGUF rope_freqs.weight, kept in reports
    const auto& f = j["freq_factors"];
    if (!f.is_array())
      usage_error(where + ": field 'rope_scaling.freq_factors' is not an array of numbers");
    for (const auto& x : f) {
      if (!x.is_number())
        usage_error(where + ": field 'rope_scaling.freq_factors' is not an array of numbers");
      r.freq_factors.push_back(x.get<double>());
    }
  }
  return r;
}

nlohmann::json rope_scaling_to_json(const RopeScaling& r) {
  if (!r.active()) return nullptr;
  nlohmann::json j = {{"rope_type", r.type == "none" ? "default" : r.type}};
  if (r.type != "none") j["factor"] = r.factor;
  if (r.type == "llama3") {
    j["low_freq_factor"] = r.low_freq_factor;
    j["high_freq_factor"] = r.high_freq_factor;
    j["original_max_position_embeddings"] = r.original_max_pos;
  }
  if (!r.freq_factors.empty()) j["freq_factors"] = r.freq_factors;
  return j;
}

ModelConfig model_from_json(const nlohmann::json& j, const std::string& origin) {
  ModelConfig m;
  auto need = [&](const char* key) -> const nlohmann::json& {
    if (!j.contains(key)) usage_error(origin + ": model config has no field '" + key + "'");
    return j.at(key);
  };
  if (!j.is_object()) usage_error(origin + ": a model config must be a JSON object");
  // Every field must be one latprof honours: a field it ignored would make the numbers wrong.
  static const char* const kKnown[] = {
      "name",           "description", "source",       "architecture",   "dim",
      "n_layers",       "n_heads",     "n_kv_heads",   "ffn_dim",        "vocab_size",
      "max_seq_len",    "rope_theta",  "rope_scaling", "sliding_window", "norm_eps",
      "tie_embeddings", "params",      "weight_bytes"};  // derived numbers that reports add; not
                                                         // read
  for (auto it = j.begin(); it != j.end(); ++it)
    if (std::find(std::begin(kKnown), std::end(kKnown), it.key()) == std::end(kKnown)) {
      std::string names;
      for (const char* k : kKnown) names += (names.empty() ? "" : ", ") + std::string(k);
      usage_error(origin + ": model config field '" + it.key() + "' is not one latprof knows (" +
                  names + ")");
    }
  try {
    // Names and paths go into JSON reports, which must be valid UTF-8.
    m.name = utf8_sanitize(j.value("name", std::filesystem::path(origin).stem().string()));
    m.description = j.value("description", "");
    m.source = utf8_sanitize(j.value("source", origin));
    // Integer fields: a whole number in int64's range, never a float cut to one (a float past
    // int64's range would be undefined behaviour to convert).
    auto integer = [&](const char* key) -> int64_t {
      const auto& v = need(key);
      if (!v.is_number_integer() ||
          (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(INT64_MAX)))
        usage_error(origin + ": field '" + key + "' is " + v.dump() +
                    "; it must be a whole number");
      return v.get<int64_t>();
    };
    m.dim = integer("dim");
    m.n_layers = integer("n_layers");
    m.n_heads = integer("n_heads");
    m.n_kv_heads = j.contains("n_kv_heads") ? integer("n_kv_heads") : m.n_heads;
    m.ffn_dim = integer("ffn_dim");
    m.vocab_size = integer("vocab_size");
    m.max_seq_len = integer("max_seq_len");
    if (j.contains("architecture") && j["architecture"] != "llama")
      usage_error(origin + ": field 'architecture' is " + j["architecture"].dump() +
                  "; supported: llama");
    m.rope_theta = j.value("rope_theta", 10000.0);
    if (j.contains("rope_scaling"))
      m.rope_scaling = rope_scaling_from_json(j["rope_scaling"], origin);
    if (j.contains("sliding_window") && !j["sliding_window"].is_null())
      m.sliding_window = integer("sliding_window");
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
          {"rope_scaling", rope_scaling_to_json(m.rope_scaling)},
          {"sliding_window", m.sliding_window},
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
