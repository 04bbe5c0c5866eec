#include "support/model_writer.hpp"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <stdexcept>

#include "core/half.hpp"
#include "core/rng.hpp"
#include "support/temp_dirs.hpp"

namespace latprof::testing {

namespace fs = std::filesystem;

// ---- GGUF ------------------------------------------------------------------------------------

std::string GgufWriter::str(const std::string& s) {
  return pod<uint64_t>(s.size()) + s;
}

void GgufWriter::kv_raw(const std::string& k, uint32_t type, const std::string& bytes) {
  for (auto& [key, v] : kv_)
    if (key == k) {
      v = pod<uint32_t>(type) + bytes;
      return;
    }
  kv_.emplace_back(k, pod<uint32_t>(type) + bytes);
}
void GgufWriter::erase_kv(const std::string& k) {
  std::erase_if(kv_, [&](const auto& p) { return p.first == k; });
}
GgufWriter::Tensor* GgufWriter::find_tensor(const std::string& name) {
  for (auto& t : tensors_)
    if (t.name == name) return &t;
  return nullptr;
}
void GgufWriter::erase_tensor(const std::string& name) {
  std::erase_if(tensors_, [&](const Tensor& t) { return t.name == name; });
}
void GgufWriter::kv_u32(const std::string& k, uint32_t v) {
  kv_raw(k, 4, pod(v));
}
void GgufWriter::kv_i32(const std::string& k, int32_t v) {
  kv_raw(k, 5, pod(v));
}
void GgufWriter::kv_u64(const std::string& k, uint64_t v) {
  kv_raw(k, 10, pod(v));
}
void GgufWriter::kv_f32(const std::string& k, float v) {
  kv_raw(k, 6, pod(v));
}
void GgufWriter::kv_bool(const std::string& k, bool v) {
  kv_raw(k, 7, pod<uint8_t>(v ? 1 : 0));
}
void GgufWriter::kv_str(const std::string& k, const std::string& v) {
  kv_raw(k, 8, str(v));
}
void GgufWriter::kv_str_array(const std::string& k, const std::vector<std::string>& v) {
  std::string b = pod<uint32_t>(8) + pod<uint64_t>(v.size());
  for (const auto& s : v) b += str(s);
  kv_raw(k, 9, b);
}
void GgufWriter::kv_f32_array(const std::string& k, const std::vector<float>& v) {
  std::string b = pod<uint32_t>(6) + pod<uint64_t>(v.size());
  for (float x : v) b += pod(x);
  kv_raw(k, 9, b);
}
void GgufWriter::kv_i32_array(const std::string& k, const std::vector<int32_t>& v) {
  std::string b = pod<uint32_t>(5) + pod<uint64_t>(v.size());
  for (int32_t x : v) b += pod(x);
  kv_raw(k, 9, b);
}

void GgufWriter::tensor(const std::string& name, std::vector<uint64_t> dims, uint32_t type,
                        std::string data) {
  tensors_.push_back({name, std::move(dims), type, std::move(data)});
}

std::string GgufWriter::bytes(uint32_t version, uint64_t alignment) const {
  std::string out = "GGUF";
  out += pod(version);
  out += pod<uint64_t>(tensors_.size());
  out += pod<uint64_t>(kv_.size());
  for (const auto& [k, v] : kv_) out += str(k) + v;
  uint64_t offset = 0;
  std::vector<uint64_t> offsets;
  for (const auto& t : tensors_) {
    out += str(t.name);
    out += pod<uint32_t>(uint32_t(t.dims.size()));
    for (uint64_t d : t.dims) out += pod(d);
    out += pod(t.type);
    out += pod(offset);
    offsets.push_back(offset);
    offset = (offset + t.data.size() + alignment - 1) / alignment * alignment;
  }
  out.resize((out.size() + alignment - 1) / alignment * alignment, '\0');
  const size_t base = out.size();
  for (size_t i = 0; i < tensors_.size(); ++i) {
    out.resize(base + offsets[i], '\0');
    out += tensors_[i].data;
  }
  return out;
}

// ---- safetensors -------------------------------------------------------------------------------

std::string safetensors_bytes(const std::vector<StEntry>& tensors) {
  nlohmann::json h = nlohmann::json::object();
  h["__metadata__"] = {{"format", "pt"}};
  std::string data;
  for (const auto& t : tensors) {
    h[t.name] = {{"dtype", t.dtype},
                 {"shape", t.shape},
                 {"data_offsets", {data.size(), data.size() + t.data.size()}}};
    data += t.data;
  }
  std::string hs = h.dump();
  while (hs.size() % 8) hs += ' ';
  return GgufWriter::pod<uint64_t>(hs.size()) + hs + data;
}

// ---- encodings -------------------------------------------------------------------------------

std::string encode_f32(const std::vector<float>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * 4);
}
std::string encode_f16(const std::vector<float>& v) {
  std::string out;
  for (float x : v) out += GgufWriter::pod(float_to_half(x));
  return out;
}
std::string encode_bf16(const std::vector<float>& v) {
  std::string out;
  for (float x : v) {
    uint32_t b;
    std::memcpy(&b, &x, 4);
    b += 0x7fff + ((b >> 16) & 1);  // round to nearest even
    out += GgufWriter::pod(uint16_t(b >> 16));
  }
  return out;
}
std::string encode_q8_0(const std::vector<float>& v) {
  std::string out;
  for (size_t b = 0; b < v.size() / 32; ++b) {
    float amax = 0;
    for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(v[b * 32 + i]));
    const float d = amax / 127.f;
    const uint16_t dh = float_to_half(d);
    out += GgufWriter::pod(dh);
    const float inv = d > 0 ? 1.f / d : 0.f;
    for (int i = 0; i < 32; ++i)
      out += char(int8_t(std::clamp(std::nearbyint(v[b * 32 + i] * inv), -127.f, 127.f)));
  }
  return out;
}
std::vector<float> q8_0_roundtrip(const std::vector<float>& v) {
  const std::string q = encode_q8_0(v);
  std::vector<float> out(v.size());
  for (size_t b = 0; b < v.size() / 32; ++b) {
    uint16_t dh;
    std::memcpy(&dh, q.data() + 34 * b, 2);
    const float d = half_to_float(dh);
    for (int i = 0; i < 32; ++i) out[b * 32 + i] = d * float(int8_t(q[34 * b + 2 + i]));
  }
  return out;
}

// ---- the tiny model --------------------------------------------------------------------------

namespace {

const char* const kSpace = "\xe2\x96\x81";

// (left, right) in merge order; every merged piece is in the vocabulary.
std::vector<std::pair<std::string, std::string>> tiny_merges() {
  const std::string s = kSpace;
  return {
      {s, "t"},         {"h", "e"},          {s + "t", "he"},  {"l", "l"},     {s, "he"},
      {s + "he", "ll"}, {s + "hell", "o"},   {"o", "r"},       {s, "w"},       {s + "w", "or"},
      {"l", "d"},       {s + "wor", "ld"},   {s, "a"},         {"i", "s"},     {s, "is"},
      {"e", "s"},       {s + "t", "es"},     {s + "tes", "t"}, {s + "a", "n"}, {s + "an", "d"},
      {s, "m"},         {"o", "d"},          {s + "m", "od"},  {"e", "l"},     {s + "mod", "el"},
      {s, "l"},         {s + "l", "a"},      {"t", "e"},       {"n", "c"},     {s + "la", "te"},
      {"nc", "y"},      {s + "late", "ncy"}, {s, "o"},         {s + "o", "f"}, {s, "c"},
      {"a", "t"},       {s + "c", "at"}};
}

}  // namespace

int32_t TinyLlama::id(const std::string& piece) const {
  for (size_t i = 0; i < tokens.size(); ++i)
    if (tokens[i] == piece) return int32_t(i);
  return -1;
}

std::string hf_name(const std::string& c) {
  if (c == "tok_embeddings") return "model.embed_tokens.weight";
  if (c == "norm") return "model.norm.weight";
  if (c == "output") return "lm_head.weight";
  const size_t dot = c.find('.', 7);
  const std::string l = c.substr(7, dot - 7), t = c.substr(dot + 1);
  static const std::map<std::string, std::string> m = {
      {"attn_norm", "input_layernorm"}, {"wq", "self_attn.q_proj"},
      {"wk", "self_attn.k_proj"},       {"wv", "self_attn.v_proj"},
      {"wo", "self_attn.o_proj"},       {"ffn_norm", "post_attention_layernorm"},
      {"w_gate", "mlp.gate_proj"},      {"w_up", "mlp.up_proj"},
      {"w_down", "mlp.down_proj"}};
  return "model.layers." + l + "." + m.at(t) + ".weight";
}

std::string gguf_name(const std::string& c) {
  if (c == "tok_embeddings") return "token_embd.weight";
  if (c == "norm") return "output_norm.weight";
  if (c == "output") return "output.weight";
  const size_t dot = c.find('.', 7);
  const std::string l = c.substr(7, dot - 7), t = c.substr(dot + 1);
  static const std::map<std::string, std::string> m = {
      {"attn_norm", "attn_norm"}, {"wq", "attn_q"},      {"wk", "attn_k"},
      {"wv", "attn_v"},           {"wo", "attn_output"}, {"ffn_norm", "ffn_norm"},
      {"w_gate", "ffn_gate"},     {"w_up", "ffn_up"},    {"w_down", "ffn_down"}};
  return "blk." + l + "." + m.at(t) + ".weight";
}

TinyLlama make_tiny_llama(uint64_t seed, bool tied) {
  TinyLlama m;
  m.tied = tied;
  m.tokens = {"<unk>", "<s>", "</s>"};
  m.scores = {0, 0, 0};
  m.types = {2, 3, 3};
  for (int b = 0; b < 256; ++b) {
    char buf[8];
    std::snprintf(buf, sizeof buf, "<0x%02X>", b);
    m.tokens.push_back(buf);
    m.scores.push_back(0);
    m.types.push_back(6);
  }
  const std::vector<std::string> chars = {kSpace, "a", "c", "d", "e", "f", "h", "i", "l",
                                          "m",    "n", "o", "r", "s", "t", "w", "y", "\xc3\xa9"};
  for (size_t i = 0; i < chars.size(); ++i) {
    m.tokens.push_back(chars[i]);
    m.scores.push_back(-1000.f - float(i));
    m.types.push_back(1);
  }
  m.merges = tiny_merges();
  for (size_t r = 0; r < m.merges.size(); ++r) {
    m.tokens.push_back(m.merges[r].first + m.merges[r].second);
    m.scores.push_back(-float(r + 1));
    m.types.push_back(1);
  }
  const int64_t V = m.vocab(), D = m.dim, hd = m.dim / m.n_heads;
  const int64_t kv = m.n_kv_heads * hd;
  uint64_t tid = 0;
  auto add = [&](const std::string& name, std::vector<int64_t> shape, bool norm) {
    int64_t n = 1;
    for (auto s : shape) n *= s;
    std::vector<float> v(static_cast<size_t>(n));
    const uint64_t key = rng::tensor_key(seed, ++tid);
    for (int64_t i = 0; i < n; ++i) {
      const float k = float(rng::uniform_i8(key, uint64_t(i)));
      v[size_t(i)] = norm ? 1.f + float(int(k) / 4) / 128.f : k / 1024.f;
    }
    m.weights[name] = std::move(v);
    m.shapes[name] = std::move(shape);
  };
  add("tok_embeddings", {V, D}, false);
  for (int64_t l = 0; l < m.n_layers; ++l) {
    const std::string L = "layers." + std::to_string(l) + ".";
    add(L + "attn_norm", {D}, true);
    add(L + "wq", {D, D}, false);
    add(L + "wk", {kv, D}, false);
    add(L + "wv", {kv, D}, false);
    add(L + "wo", {D, D}, false);
    add(L + "ffn_norm", {D}, true);
    add(L + "w_gate", {m.ffn, D}, false);
    add(L + "w_up", {m.ffn, D}, false);
    add(L + "w_down", {D, m.ffn}, false);
  }
  add("norm", {D}, true);
  if (!tied) add("output", {V, D}, false);
  return m;
}

namespace {
// GGUF stores Q and K with each head's rows interleaved: row 2i+j <- HF row j*hd/2+i.
std::vector<float> permute_rows(const std::vector<float>& w, int64_t rows, int64_t cols,
                                int64_t heads) {
  std::vector<float> out(w.size());
  const int64_t hd = rows / heads, half = hd / 2;
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t j = 0; j < 2; ++j)
      for (int64_t i = 0; i < half; ++i)
        std::copy_n(&w[size_t((h * hd + j * half + i) * cols)], cols,
                    &out[size_t((h * hd + 2 * i + j) * cols)]);
  return out;
}
}  // namespace

std::string tiny_gguf_bytes(const TinyLlama& m, uint32_t type) {
  return tiny_gguf(m, type).bytes();
}

GgufWriter tiny_gguf(const TinyLlama& m, uint32_t type) {
  GgufWriter g;
  g.kv_str("general.architecture", "llama");
  g.kv_str("general.name", "tiny-llama-test");
  g.kv_u32("general.alignment", 32);
  g.kv_u32("llama.context_length", uint32_t(m.max_seq));
  g.kv_u32("llama.embedding_length", uint32_t(m.dim));
  g.kv_u32("llama.block_count", uint32_t(m.n_layers));
  g.kv_u32("llama.feed_forward_length", uint32_t(m.ffn));
  g.kv_u32("llama.attention.head_count", uint32_t(m.n_heads));
  g.kv_u32("llama.attention.head_count_kv", uint32_t(m.n_kv_heads));
  g.kv_u32("llama.rope.dimension_count", uint32_t(m.dim / m.n_heads));
  g.kv_f32("llama.rope.freq_base", m.rope_theta);
  g.kv_f32("llama.attention.layer_norm_rms_epsilon", m.eps);
  g.kv_str("tokenizer.ggml.model", "llama");
  g.kv_str_array("tokenizer.ggml.tokens", m.tokens);
  g.kv_f32_array("tokenizer.ggml.scores", m.scores);
  g.kv_i32_array("tokenizer.ggml.token_type", m.types);
  g.kv_u32("tokenizer.ggml.bos_token_id", 1);
  g.kv_u32("tokenizer.ggml.eos_token_id", 2);
  g.kv_u32("tokenizer.ggml.unknown_token_id", 0);
  if (m.sliding_window > 0) g.kv_u32("llama.attention.sliding_window", uint32_t(m.sliding_window));
  if (m.rope_scaling.is_object()) {
    const std::string type = m.rope_scaling.value("rope_type", m.rope_scaling.value("type", ""));
    const double factor = m.rope_scaling.value("factor", 1.0);
    if (type == "linear") {
      g.kv_str("llama.rope.scaling.type", "linear");
      g.kv_f32("llama.rope.scaling.factor", float(factor));
    } else if (type == "llama3") {
      // As llama.cpp's convert_hf_to_gguf.py writes Llama 3.1: one divisor per frequency.
      const double low = m.rope_scaling.at("low_freq_factor").get<double>();
      const double high = m.rope_scaling.at("high_freq_factor").get<double>();
      const double old_ctx = m.rope_scaling.at("original_max_position_embeddings").get<double>();
      const int hd = int(m.dim / m.n_heads);
      std::vector<float> factors;
      for (int i = 0; i < hd; i += 2) {
        const double freq = 1.0 / std::pow(double(m.rope_theta), double(i) / hd);
        const double wavelen = 2 * M_PI / freq;
        if (wavelen < old_ctx / high) {
          factors.push_back(1.f);
        } else if (wavelen > old_ctx / low) {
          factors.push_back(float(factor));
        } else {
          const double smooth = (old_ctx / wavelen - low) / (high - low);
          factors.push_back(float(1 / ((1 - smooth) / factor + smooth)));
        }
      }
      g.tensor("rope_freqs.weight", {uint64_t(factors.size())}, 0, encode_f32(factors));
    }
  }
  for (const auto& [name, v] : m.weights) {
    const auto& shape = m.shapes.at(name);
    std::vector<uint64_t> dims(shape.rbegin(), shape.rend());
    std::vector<float> w = v;
    if (name.ends_with(".wq") || name.ends_with(".wk"))
      w = permute_rows(v, shape[0], shape[1], name.ends_with(".wq") ? m.n_heads : m.n_kv_heads);
    const uint32_t t = shape.size() == 1 ? 0 : type;
    const std::string data = t == 0   ? encode_f32(w)
                             : t == 1 ? encode_f16(w)
                             : t == 8 ? encode_q8_0(w)
                                      : encode_bf16(w);
    g.tensor(gguf_name(name), dims, t, data);
  }
  return g;
}

void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), std::streamsize(bytes.size()));
  if (!out) throw std::runtime_error("cannot write " + path);
}

nlohmann::json tiny_config_json(const TinyLlama& m) {
  nlohmann::json j = {
      {"architectures", {m.sliding_window > 0 ? "MistralForCausalLM" : "LlamaForCausalLM"}},
      {"model_type", m.sliding_window > 0 ? "mistral" : "llama"},
      {"hidden_act", "silu"},
      {"hidden_size", m.dim},
      {"num_hidden_layers", m.n_layers},
      {"num_attention_heads", m.n_heads},
      {"num_key_value_heads", m.n_kv_heads},
      {"intermediate_size", m.ffn},
      {"vocab_size", m.vocab()},
      {"max_position_embeddings", m.max_seq},
      {"rope_theta", m.rope_theta},
      {"rms_norm_eps", m.eps},
      {"tie_word_embeddings", m.tied},
      {"bos_token_id", 1},
      {"eos_token_id", 2}};
  if (!m.rope_scaling.is_null()) j["rope_scaling"] = m.rope_scaling;
  if (m.sliding_window > 0) j["sliding_window"] = m.sliding_window;
  return j;
}

nlohmann::json tiny_tokenizer_json(const TinyLlama& m) {
  nlohmann::json vocab = nlohmann::json::object();
  for (size_t i = 0; i < m.tokens.size(); ++i) vocab[m.tokens[i]] = i;
  nlohmann::json merges = nlohmann::json::array();
  for (const auto& [l, r] : m.merges) merges.push_back(l + " " + r);
  nlohmann::json added = nlohmann::json::array();
  for (int i = 0; i < 3; ++i)
    added.push_back({{"id", i}, {"content", m.tokens[size_t(i)]}, {"special", true}});
  return {{"version", "1.0"},
          {"added_tokens", added},
          {"normalizer",
           {{"type", "Sequence"},
            {"normalizers",
             {{{"type", "Prepend"}, {"prepend", kSpace}},
              {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", kSpace}}}}}},
          {"pre_tokenizer", nullptr},
          {"post_processor",
           {{"type", "TemplateProcessing"},
            {"single",
             {{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}},
              {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}}}},
          {"decoder", {{"type", "Sequence"}, {"decoders", nlohmann::json::array()}}},
          {"model",
           {{"type", "BPE"},
            {"unk_token", "<unk>"},
            {"byte_fallback", true},
            {"fuse_unk", true},
            {"vocab", vocab},
            {"merges", merges}}}};
}

void write_tiny_hf(const TinyLlama& m, const std::string& dir, const std::string& dtype,
                   int shards) {
  fs::create_directories(dir);
  std::vector<std::vector<StEntry>> files(size_t(std::max(1, shards)));
  size_t k = 0;
  for (const auto& [name, v] : m.weights) {
    const std::string data = dtype == "F32"   ? encode_f32(v)
                             : dtype == "F16" ? encode_f16(v)
                                              : encode_bf16(v);
    files[k++ % files.size()].push_back({hf_name(name), dtype, m.shapes.at(name), data});
  }
  nlohmann::json index = {{"metadata", {{"total_size", 0}}},
                          {"weight_map", nlohmann::json::object()}};
  for (size_t f = 0; f < files.size(); ++f) {
    char fname[64];
    if (files.size() == 1)
      std::snprintf(fname, sizeof fname, "model.safetensors");
    else
      std::snprintf(fname, sizeof fname, "model-%05zu-of-%05zu.safetensors", f + 1, files.size());
    write_file(dir + "/" + fname, safetensors_bytes(files[f]));
    for (const auto& e : files[f]) index["weight_map"][e.name] = fname;
  }
  if (files.size() > 1) write_file(dir + "/model.safetensors.index.json", index.dump(2));
  write_file(dir + "/config.json", tiny_config_json(m).dump(2));
  write_file(dir + "/tokenizer.json", tiny_tokenizer_json(m).dump());
  write_file(
      dir + "/tokenizer_config.json",
      nlohmann::json{{"bos_token", "<s>"}, {"eos_token", "</s>"}, {"add_bos_token", true}}.dump());
}

std::string temp_dir(const std::string& name) {
  return scratch_dir(std::to_string(::getpid()) + "-" + name, /*fresh=*/true).string();
}

}  // namespace latprof::testing
