#pragma once
// Test-only writers for GGUF and safetensors files, and a tiny random Llama with a small
// SentencePiece-style vocabulary written in both formats. Not part of the product.
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

namespace latprof::testing {

// ---- GGUF ------------------------------------------------------------------------------------
class GgufWriter {
 public:
  void kv_u32(const std::string& k, uint32_t v);
  void kv_i32(const std::string& k, int32_t v);
  void kv_u64(const std::string& k, uint64_t v);
  void kv_f32(const std::string& k, float v);
  void kv_bool(const std::string& k, bool v);
  void kv_str(const std::string& k, const std::string& v);
  void kv_str_array(const std::string& k, const std::vector<std::string>& v);
  void kv_f32_array(const std::string& k, const std::vector<float>& v);
  void kv_i32_array(const std::string& k, const std::vector<int32_t>& v);
  // A raw key/value: type id and the value's encoded bytes.
  void kv_raw(const std::string& k, uint32_t type, const std::string& bytes);
  // dims: ne[0] (contiguous) first, as GGUF stores them; data: the tensor's bytes.
  void tensor(const std::string& name, std::vector<uint64_t> dims, uint32_t type, std::string data);
  void erase_kv(const std::string& k);
  struct Tensor {
    std::string name;
    std::vector<uint64_t> dims;
    uint32_t type;
    std::string data;
  };
  Tensor* find_tensor(const std::string& name);
  void erase_tensor(const std::string& name);
  // The whole file. version and alignment can be overridden to write bad files.
  std::string bytes(uint32_t version = 3, uint64_t alignment = 32) const;

  static std::string str(const std::string& s);  // uint64 length + bytes
  template <typename T>
  static std::string pod(T v) {
    return std::string(reinterpret_cast<const char*>(&v), sizeof(T));
  }

 private:
  std::vector<std::pair<std::string, std::string>> kv_;  // key, type+value bytes
  std::vector<Tensor> tensors_;
};

// ---- safetensors -------------------------------------------------------------------------------
struct StEntry {
  std::string name;
  std::string dtype;  // F32, F16, BF16
  std::vector<int64_t> shape;
  std::string data;
};
std::string safetensors_bytes(const std::vector<StEntry>& tensors);

// ---- encodings -------------------------------------------------------------------------------
std::string encode_f32(const std::vector<float>& v);
std::string encode_f16(const std::vector<float>& v);
std::string encode_bf16(const std::vector<float>& v);
std::string encode_q8_0(const std::vector<float>& v);  // size a multiple of 32
// What Q8_0 storage gives back for v.
std::vector<float> q8_0_roundtrip(const std::vector<float>& v);

// ---- the tiny model --------------------------------------------------------------------------
struct TinyLlama {
  int64_t dim = 64, n_layers = 2, n_heads = 4, n_kv_heads = 2, ffn = 128, max_seq = 256;
  float rope_theta = 10000.f, eps = 1e-5f;
  bool tied = false;
  // Hugging Face "rope_scaling" (null: none). GGUF gets llama.cpp's form: linear as
  // llama.rope.scaling.type/factor, llama3 as the tensor rope_freqs.weight.
  nlohmann::json rope_scaling = nullptr;
  // Sliding window (0: none); written as model_type "mistral" with "sliding_window", and the GGUF
  // key llama.attention.sliding_window.
  int64_t sliding_window = 0;
  // Canonical name (src/model/weights.hpp) -> values in HF orientation, row-major. Every value
  // is k/1024 for an integer |k| <= 127 (norms: 1 + j/128, |j| <= 31), exact in FP16, BF16 and
  // FP32.
  std::map<std::string, std::vector<float>> weights;
  std::map<std::string, std::vector<int64_t>> shapes;
  // Vocabulary: <unk> <s> </s>, 256 byte tokens, characters, then merged pieces in merge order.
  std::vector<std::string> tokens;
  std::vector<float> scores;
  std::vector<int32_t> types;
  std::vector<std::pair<std::string, std::string>> merges;
  int64_t vocab() const { return int64_t(tokens.size()); }
  int32_t id(const std::string& piece) const;  // -1 when absent
};

TinyLlama make_tiny_llama(uint64_t seed, bool tied = false);
// HF name <-> canonical name.
std::string hf_name(const std::string& canonical);
std::string gguf_name(const std::string& canonical);

// type: 0 F32, 1 F16, 8 Q8_0, 30 BF16 for the matrices (norms are always F32, as converters do).
std::string tiny_gguf_bytes(const TinyLlama& m, uint32_t type);
GgufWriter tiny_gguf(const TinyLlama& m, uint32_t type);  // to alter before bytes()
void write_file(const std::string& path, const std::string& bytes);
// A Hugging Face directory: config.json, model.safetensors (or `shards` files and the index),
// tokenizer.json and tokenizer_config.json.
void write_tiny_hf(const TinyLlama& m, const std::string& dir, const std::string& dtype,
                   int shards = 1);
nlohmann::json tiny_tokenizer_json(const TinyLlama& m);
nlohmann::json tiny_config_json(const TinyLlama& m);

// A fresh, empty directory <temp>/latprof-test-<pid>-<name>, removed when the test process exits
// (temp_dirs.hpp).
std::string temp_dir(const std::string& name);

}  // namespace latprof::testing
