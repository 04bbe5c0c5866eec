// Model files: GGUF (llama architecture) and Hugging Face safetensors directories. Files are
// memory-mapped; each tensor is converted to the run's weight type when the runner asks for it,
// reading its bytes once.
#include "model/loaders.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <unordered_map>

#include "core/error.hpp"
#include "core/half.hpp"
#include "core/utf8.hpp"
#include "model/gguf.hpp"
#include "model/mmap_file.hpp"
#include "model/safetensors.hpp"
#include "model/tokenizer_vocab.hpp"

namespace latprof {

namespace fs = std::filesystem;

namespace {

// ---- conversion ------------------------------------------------------------------------------

float bf16_to_float(uint16_t h) {
  const uint32_t bits = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// The stored row that holds row r (Hugging Face order) of t.
int64_t source_row(const FileTensor& t, int64_t r) {
  if (t.permuted_heads == 0) return r;
  // GGUF: rows of each head interleaved (2i + j <- j*hd/2 + i)
  const int64_t hd = t.rows() / t.permuted_heads;
  const int64_t h = r / hd, within = r % hd, half = hd / 2;
  return h * hd + 2 * (within % half) + within / half;
}

// Row r (Hugging Face order) of t as fp32.
void row_to_float(const FileTensor& t, int64_t r, float* out) {
  const int64_t cols = t.cols();
  const uint8_t* p = t.data + size_t(source_row(t, r)) * file_dtype_row_bytes(t.dtype, cols);
  switch (t.dtype) {
    case FileDType::f32:
      std::memcpy(out, p, size_t(cols) * 4);
      break;
    case FileDType::f16:
      for (int64_t i = 0; i < cols; ++i) {
        uint16_t h;
        std::memcpy(&h, p + 2 * i, 2);
        out[i] = half_to_float(h);
      }
      break;
    case FileDType::bf16:
      for (int64_t i = 0; i < cols; ++i) {
        uint16_t h;
        std::memcpy(&h, p + 2 * i, 2);
        out[i] = bf16_to_float(h);
      }
      break;
    case FileDType::q8_0:
      for (int64_t b = 0; b < cols / 32; ++b) {
        uint16_t d;
        std::memcpy(&d, p + 34 * b, 2);
        const float scale = half_to_float(d);
        const auto* q = reinterpret_cast<const int8_t*>(p + 34 * b + 2);
        for (int i = 0; i < 32; ++i) out[b * 32 + i] = scale * float(q[i]);
      }
      break;
  }
}

// First i in [0, n) with bad(i), or -1: a block at a time without branches (the compiler
// vectorises it), then element by element in the block that has one.
template <class Bad>
int64_t first_bad(int64_t n, Bad bad) {
  constexpr int64_t kBlock = 256;
  for (int64_t b0 = 0; b0 < n; b0 += kBlock) {
    const int64_t b1 = std::min(n, b0 + kBlock);
    uint32_t any = 0;
    for (int64_t i = b0; i < b1; ++i) any |= uint32_t(bad(i));
    if (any)
      for (int64_t i = b0; i < b1; ++i)
        if (bad(i)) return i;
  }
  return -1;
}

// First element of x[0, n) that is NaN or infinite, or -1. Checked on the bits (exponent all
// ones) so that it holds under any floating-point flags.
int64_t first_non_finite(const float* x, int64_t n) {
  return first_bad(n, [x](int64_t i) {
    uint32_t b;
    std::memcpy(&b, &x[i], 4);
    return (b & 0x7f800000u) == 0x7f800000u;
  });
}

int64_t first_non_finite_f16(const uint16_t* x, int64_t n) {
  return first_bad(n, [x](int64_t i) { return (x[i] & 0x7c00u) == 0x7c00u; });
}

[[noreturn]] void non_finite_error(const FileTensor& t, int64_t row, int64_t col) {
  usage_error(t.file + ": tensor " + t.name + " holds NaN or infinity (row " + std::to_string(row) +
              ", column " + std::to_string(col) +
              "); the checkpoint is corrupt or was saved after a diverged step: re-download or "
              "re-convert it");
}

std::string shape_str(const std::vector<int64_t>& s) {
  std::string o = "[";
  for (size_t i = 0; i < s.size(); ++i) o += (i ? ", " : "") + std::to_string(s[i]);
  return o + "]";
}

class FileWeights final : public WeightSource {
 public:
  FileWeights(std::string desc, std::vector<std::shared_ptr<MappedFile>> files,
              std::unordered_map<std::string, FileTensor> tensors)
      : desc_(utf8_sanitize(desc)), files_(std::move(files)), tensors_(std::move(tensors)) {}

  std::string describe() const override {
    std::string d = desc_;
    if (q8_to_f16_) d += "; Q8_0 blocks dequantised to FP16 at load";
    if (q8_to_i8_) d += "; Q8_0 blocks requantised to per-row INT8 at load";
    if (quantised_) d += "; quantised to per-row INT8 at load";
    return d;
  }

  void load_linear(const std::string& name, DeviceWeight& w, Backend& b) override {
    const FileTensor& t = get(name);
    if (t.shape.size() != 2 || t.rows() != w.n_out || t.cols() != w.n_in)
      usage_error(t.file + ": tensor " + t.name + " has shape " + shape_str(t.shape) +
                  "; the model needs [" + std::to_string(w.n_out) + ", " + std::to_string(w.n_in) +
                  "]");
    convert(t, w);
    b.upload_weight(w, host_.data(), int8_storage(w.type) ? scales_.data() : nullptr);
    bytes_ += double(t.nbytes);
  }

  void load_embedding(const std::string& name, DeviceWeight& w, Backend& b) override {
    LATPROF_ASSERT(w.type == WeightType::f16, "the embedding table is fp16");
    load_linear(name, w, b);
  }

  void load_vector(const std::string& name, float* dst, int64_t n, Backend& b) override {
    const FileTensor& t = get(name);
    if (t.numel() != n || t.rows() != 1)
      usage_error(t.file + ": tensor " + t.name + " has shape " + shape_str(t.shape) +
                  "; the model needs [" + std::to_string(n) + "]");
    std::vector<float> v(static_cast<size_t>(n));
    row_to_float(t, 0, v.data());
    if (const int64_t bad = first_non_finite(v.data(), n); bad >= 0) non_finite_error(t, 0, bad);
    b.copy_to_device(dst, v.data(), size_t(n) * sizeof(float));
    bytes_ += double(t.nbytes);
  }

  double bytes_read() const override { return bytes_; }

 private:
  const FileTensor& get(const std::string& name) const {
    auto it = tensors_.find(name);
    if (it == tensors_.end() && name == "output") it = tensors_.find("tok_embeddings");  // tied
    if (it == tensors_.end()) usage_error(desc_ + ": has no tensor for '" + name + "'");
    return it->second;
  }

  // Converts t to w's type in host_ (and scales_), refusing NaN and infinity: every element is
  // looked at anyway, so the check costs one compare per element.
  void convert(const FileTensor& t, DeviceWeight& w) {
    const int64_t rows = w.n_out, cols = w.n_in;
    int64_t bad_row = rows, bad_col = 0;  // the first non-finite element (rows: none)
    auto note_bad = [&](int64_t r, int64_t c) {
      if (c < 0) return;
#pragma omp critical(latprof_bad_weight)
      if (r < bad_row) {
        bad_row = r;
        bad_col = c;
      }
    };
    if (w.type == WeightType::f16) {
      host_.resize(size_t(rows * cols) * 2);
      auto* dst = reinterpret_cast<uint16_t*>(host_.data());
      if (t.dtype == FileDType::f16) {  // as stored, rows put back in order where permuted
        if (t.permuted_heads == 0)
          std::memcpy(dst, t.data, size_t(rows * cols) * 2);
        else
          for (int64_t r = 0; r < rows; ++r)
            std::memcpy(dst + r * cols, t.data + size_t(source_row(t, r) * cols) * 2,
                        size_t(cols) * 2);
        const int64_t bad = first_non_finite_f16(dst, rows * cols);
        if (bad >= 0) non_finite_error(t, bad / cols, bad % cols);
        return;
      }
      if (t.dtype == FileDType::q8_0) q8_to_f16_ = true;
#pragma omp parallel if (rows * cols >= (int64_t(1) << 20))
      {
        std::vector<float> row(static_cast<size_t>(cols));
#pragma omp for schedule(static)
        for (int64_t r = 0; r < rows; ++r) {
          row_to_float(t, r, row.data());
          note_bad(r, first_non_finite(row.data(), cols));
          for (int64_t i = 0; i < cols; ++i)
            dst[r * cols + i] = float_to_half_branch_free(row[size_t(i)]);
        }
      }
      if (bad_row < rows) non_finite_error(t, bad_row, bad_col);
      // Finite values beyond FP16's range (|x| > 65504) became infinity.
      if (const int64_t big = first_non_finite_f16(dst, rows * cols); big >= 0)
        usage_error(t.file + ": tensor " + t.name + " holds a value beyond FP16's range (row " +
                    std::to_string(big / cols) + ", column " + std::to_string(big % cols) +
                    "); run it with --dtype int8");
      return;
    }
    // INT8, symmetric, one scale per output row.
    if (t.dtype == FileDType::q8_0)
      q8_to_i8_ = true;
    else
      quantised_ = true;
    host_.resize(size_t(rows * cols));
    scales_.resize(size_t(rows));
    auto* dst = reinterpret_cast<int8_t*>(host_.data());
#pragma omp parallel if (rows * cols >= (int64_t(1) << 20))
    {
      std::vector<float> row(static_cast<size_t>(cols));
#pragma omp for schedule(static)
      for (int64_t r = 0; r < rows; ++r) {
        row_to_float(t, r, row.data());
        note_bad(r, first_non_finite(row.data(), cols));
        // max |x| on the bits (for finite values the same order; a row with NaN or infinity
        // is refused below), then the products rounded to nearest even by adding and
        // subtracting 1.5 * 2^23 (exact for |x| < 2^22; the products are within +-127 and a
        // loop of their own, so no multiply-add fuses them): loops the compiler vectorises,
        // where max over floats and std::nearbyint (a call) were element by element.
        uint32_t amax_bits = 0;
        for (float x : row) {
          uint32_t b;
          std::memcpy(&b, &x, 4);
          amax_bits = std::max(amax_bits, b & 0x7fffffffu);
        }
        float amax;
        std::memcpy(&amax, &amax_bits, 4);
        const float scale = amax / 127.f;
        const float inv = scale > 0 ? 1.f / scale : 0.f;
        for (float& x : row) x *= inv;
        for (int64_t i = 0; i < cols; ++i) {
          const float q = (row[size_t(i)] + 0x1.8p23f) - 0x1.8p23f;
          dst[r * cols + i] = int8_t(std::clamp(q, -127.f, 127.f));
        }
        scales_[size_t(r)] = scale;
      }
    }
    if (bad_row < rows) non_finite_error(t, bad_row, bad_col);
  }

  std::string desc_;
  std::vector<std::shared_ptr<MappedFile>> files_;
  std::unordered_map<std::string, FileTensor> tensors_;
  std::vector<uint8_t> host_;
  std::vector<float> scales_;
  double bytes_ = 0;
  bool q8_to_f16_ = false, q8_to_i8_ = false, quantised_ = false;
};

// ---- tensor names and shapes -------------------------------------------------------------------

struct Expected {
  std::string canonical;
  std::string file_name;
  std::vector<int64_t> shape;
};

std::vector<Expected> expected_tensors(const ModelConfig& c, bool gguf) {
  std::vector<Expected> e;
  auto add = [&](const std::string& canon, const std::string& g, const std::string& hf,
                 std::vector<int64_t> shape) {
    e.push_back({canon, gguf ? g : hf, std::move(shape)});
  };
  add("tok_embeddings", "token_embd.weight", "model.embed_tokens.weight", {c.vocab_size, c.dim});
  for (int64_t l = 0; l < c.n_layers; ++l) {
    const std::string L = "layers." + std::to_string(l) + ".";
    const std::string G = "blk." + std::to_string(l) + ".";
    const std::string H = "model.layers." + std::to_string(l) + ".";
    add(L + "attn_norm", G + "attn_norm.weight", H + "input_layernorm.weight", {c.dim});
    add(L + "wq", G + "attn_q.weight", H + "self_attn.q_proj.weight", {c.q_dim(), c.dim});
    add(L + "wk", G + "attn_k.weight", H + "self_attn.k_proj.weight", {c.kv_dim(), c.dim});
    add(L + "wv", G + "attn_v.weight", H + "self_attn.v_proj.weight", {c.kv_dim(), c.dim});
    add(L + "wo", G + "attn_output.weight", H + "self_attn.o_proj.weight", {c.dim, c.q_dim()});
    add(L + "ffn_norm", G + "ffn_norm.weight", H + "post_attention_layernorm.weight", {c.dim});
    add(L + "w_gate", G + "ffn_gate.weight", H + "mlp.gate_proj.weight", {c.ffn_dim, c.dim});
    add(L + "w_up", G + "ffn_up.weight", H + "mlp.up_proj.weight", {c.ffn_dim, c.dim});
    add(L + "w_down", G + "ffn_down.weight", H + "mlp.down_proj.weight", {c.dim, c.ffn_dim});
  }
  add("norm", "output_norm.weight", "model.norm.weight", {c.dim});
  if (!c.tie_embeddings) add("output", "output.weight", "lm_head.weight", {c.vocab_size, c.dim});
  return e;
}

std::string config_summary(const ModelConfig& c) {
  return "dim " + std::to_string(c.dim) + ", " + std::to_string(c.n_layers) + " layers, " +
         std::to_string(c.n_heads) + "/" + std::to_string(c.n_kv_heads) + " heads, ffn " +
         std::to_string(c.ffn_dim) + ", vocab " + std::to_string(c.vocab_size);
}

// Finds every expected tensor (lookup: file name -> tensor) and checks its shape.
std::unordered_map<std::string, FileTensor> collect_tensors(
    const ModelConfig& c, bool gguf, const std::string& where,
    const std::function<const FileTensor*(const std::string&)>& lookup, std::string* dtype) {
  std::unordered_map<std::string, FileTensor> out;
  std::map<std::string, int> dtype_count;
  for (const auto& e : expected_tensors(c, gguf)) {
    const FileTensor* t = lookup(e.file_name);
    if (!t) usage_error(where + ": missing tensor " + e.file_name + " (" + e.canonical + ")");
    if (t->shape != e.shape)
      usage_error(where + ": tensor " + e.file_name + " has shape " + shape_str(t->shape) +
                  " (rows, cols) but the metadata (" + config_summary(c) + ") needs " +
                  shape_str(e.shape));
    if (t->dtype == FileDType::q8_0 && e.shape.size() == 1)
      usage_error(where + ": tensor " + e.file_name + " is a norm vector stored as Q8_0");
    FileTensor ft = *t;
    if (gguf && (e.canonical.ends_with(".wq") || e.canonical.ends_with(".wk")))
      ft.permuted_heads = e.canonical.ends_with(".wq") ? c.n_heads : c.n_kv_heads;
    if (e.shape.size() == 2 && e.canonical != "tok_embeddings")
      ++dtype_count[file_dtype_name(t->dtype)];
    out.emplace(e.canonical, std::move(ft));
  }
  int best = 0;
  for (auto& [k, n] : dtype_count)
    if (n > best) {
      best = n;
      *dtype = k;
    }
  return out;
}

void validate_config(ModelConfig& c, const std::string& where) {
  try {
    c.validate();
  } catch (const UsageError& e) {
    usage_error(where + ": " + e.what());
  }
}

void check_tokenizer(const Tokenizer& t, const ModelConfig& c, const std::string& where) {
  if (t.vocab_size() > c.vocab_size)
    usage_error(where + ": the tokenizer has " + std::to_string(t.vocab_size()) +
                " tokens but the embedding table only " + std::to_string(c.vocab_size) + " rows");
}

// ---- GGUF -------------------------------------------------------------------------------------

OpenedModel open_gguf(const std::string& path, std::shared_ptr<MappedFile> file) {
  auto g = std::make_shared<gguf::File>(gguf::parse(file->data(), file->size(), path));
  const std::string where = "GGUF file '" + path + "'";
  const std::string arch = g->get_string("general.architecture");
  if (arch != "llama")
    usage_error(where + ": general.architecture is '" + arch + "'; supported: llama");
  ModelConfig c;
  c.name = g->opt_string("general.name").value_or(fs::path(path).stem().string());
  c.description = "GGUF v" + std::to_string(g->version) + ", llama architecture";
  c.source = path;
  c.dim = g->get_int("llama.embedding_length");
  c.n_layers = g->get_int("llama.block_count");
  c.n_heads = g->get_int("llama.attention.head_count");
  c.n_kv_heads = g->opt_int("llama.attention.head_count_kv").value_or(c.n_heads);
  c.ffn_dim = g->get_int("llama.feed_forward_length");
  c.max_seq_len = g->get_int("llama.context_length");
  c.rope_theta = g->opt_float("llama.rope.freq_base").value_or(10000.0);
  c.norm_eps = g->opt_float("llama.attention.layer_norm_rms_epsilon").value_or(1e-5);
  // Rope scaling as llama.cpp reads it: a factor (llama.rope.scaling.factor, or the older
  // llama.rope.scale_linear) is linear interpolation unless the type says otherwise; Llama 3.1's
  // rule comes as per-frequency divisors in the tensor rope_freqs.weight.
  const std::string rs_type = g->opt_string("llama.rope.scaling.type").value_or("linear");
  if (rs_type != "linear" && rs_type != "none")
    usage_error(where + ": metadata key 'llama.rope.scaling.type' is '" + rs_type +
                "'; supported: none, linear");
  std::optional<double> rs_factor = g->opt_float("llama.rope.scaling.factor");
  if (!rs_factor || *rs_factor == 0) rs_factor = g->opt_float("llama.rope.scale_linear");
  if (rs_type == "linear" && rs_factor && *rs_factor != 0 && *rs_factor != 1) {
    c.rope_scaling.type = "linear";
    c.rope_scaling.factor = *rs_factor;
  }
  if (auto af = g->opt_float("llama.rope.scaling.attn_factor"); af && *af != 1)
    usage_error(where + ": metadata key 'llama.rope.scaling.attn_factor' is " +
                std::to_string(*af) + "; latprof supports only 1 (no YaRN attention scaling)");
  if (auto sw = g->opt_int("llama.attention.sliding_window"); sw && *sw > 0) c.sliding_window = *sw;
  if (auto e = g->opt_int("llama.expert_count"); e && *e > 0)
    usage_error(where + ": metadata key 'llama.expert_count' is " + std::to_string(*e) +
                "; mixture-of-experts models are not supported");
  for (const char* key : {"llama.attention.key_length", "llama.attention.value_length"})
    if (auto kl = g->opt_int(key);
        kl && c.n_heads > 0 && c.dim % c.n_heads == 0 && *kl != c.dim / c.n_heads)
      usage_error(where + ": metadata key '" + key + "' is " + std::to_string(*kl) +
                  "; latprof supports head dimensions of embedding_length / head_count (" +
                  std::to_string(c.dim / c.n_heads) + ")");
  const gguf::TensorInfo* emb = g->find_tensor("token_embd.weight");
  if (!emb) usage_error(where + ": missing tensor token_embd.weight (tok_embeddings)");
  if (emb->dims.size() != 2 || emb->dims[1] > (uint64_t(1) << 22))
    usage_error(where + ": tensor token_embd.weight has absurd dimensions");
  c.vocab_size = int64_t(emb->dims[1]);
  if (auto vs = g->opt_int("llama.vocab_size"); vs && *vs != c.vocab_size)
    usage_error(where + ": metadata key 'llama.vocab_size' is " + std::to_string(*vs) +
                " but tensor token_embd.weight has " + std::to_string(c.vocab_size) + " rows");
  c.tie_embeddings = g->find_tensor("output.weight") == nullptr;
  if (const gguf::TensorInfo* rf = g->find_tensor("rope_freqs.weight")) {
    const FileTensor t = gguf::to_file_tensor(*g, *rf);
    const int64_t half = c.n_heads > 0 ? c.dim / c.n_heads / 2 : 0;
    if (t.rows() != 1 || t.numel() != half || half <= 0)
      usage_error(where + ": tensor rope_freqs.weight has shape " + shape_str(t.shape) +
                  "; the model needs [" + std::to_string(half) + "] (head_dim / 2)");
    std::vector<float> f(static_cast<size_t>(half));
    row_to_float(t, 0, f.data());
    c.rope_scaling.freq_factors.assign(f.begin(), f.end());
  }
  validate_config(c, where);
  if (auto rd = g->opt_int("llama.rope.dimension_count"); rd && *rd != c.head_dim())
    usage_error(where + ": metadata key 'llama.rope.dimension_count' is " + std::to_string(*rd) +
                "; latprof supports rotary embeddings over the whole head (" +
                std::to_string(c.head_dim()) + ")");

  // A tensor latprof would not use (a bias, an extra projection) changes the model: refuse it.
  {
    std::unordered_map<std::string, int> used;
    for (const auto& e : expected_tensors(c, true)) used[e.file_name] = 1;
    used["rope_freqs.weight"] = 1;
    for (const auto& t : g->tensors)
      if (!used.count(t.name))
        usage_error(where + ": tensor " + t.name + " is not part of the Llama architecture " +
                    "latprof runs" +
                    (t.name.ends_with(".bias") ? " (biases are not supported)" : ""));
  }
  std::unordered_map<std::string, FileTensor> all;
  std::string dtype = "F32";
  auto tensors = collect_tensors(
      c, true, where,
      [&](const std::string& n) -> const FileTensor* {
        const gguf::TensorInfo* t = g->find_tensor(n);
        if (!t) return nullptr;
        return &(all[n] = gguf::to_file_tensor(*g, *t));
      },
      &dtype);

  OpenedModel m;
  m.tokenizer = tokenizer_from_gguf(*g);
  if (!m.tokenizer) m.tokenizer = make_synthetic_tokenizer(c.vocab_size);
  check_tokenizer(*m.tokenizer, c, where);
  m.config = c;
  m.weights = std::make_unique<FileWeights>(path + " (GGUF, " + dtype + ")",
                                            std::vector<std::shared_ptr<MappedFile>>{file},
                                            std::move(tensors));
  m.source = path;
  m.file_format = "gguf";
  m.file_dtype = dtype;
  return m;
}

// ---- Hugging Face directory --------------------------------------------------------------------

nlohmann::json read_json(const fs::path& p) {
  std::ifstream in(p);
  if (!in) usage_error("cannot read '" + p.string() + "'");
  nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
  if (j.is_discarded()) usage_error("'" + p.string() + "' is not valid JSON");
  return j;
}

int64_t json_int(const nlohmann::json& j, const char* key, const std::string& where,
                 std::optional<int64_t> def = std::nullopt) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) {
    if (def) return *def;
    usage_error(where + ": missing field '" + key + "'");
  }
  if (!it->is_number_integer()) usage_error(where + ": field '" + key + "' is not an integer");
  return it->get<int64_t>();
}

double json_num(const nlohmann::json& j, const char* key, const std::string& where, double def) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return def;
  if (!it->is_number()) usage_error(where + ": field '" + key + "' is not a number");
  return it->get<double>();
}

OpenedModel open_hf_dir(const fs::path& dir) {
  const std::string ds = dir.string();
  const fs::path cfg_path = dir / "config.json";
  if (!fs::exists(cfg_path))
    usage_error("model directory '" + ds +
                "' has no config.json (expected a Hugging Face "
                "checkpoint: config.json, *.safetensors, tokenizer.json)");
  const nlohmann::json cj = read_json(cfg_path);
  const std::string where = cfg_path.string();
  if (!cj.is_object()) usage_error(where + ": not a JSON object");
  const std::string mt = cj.value("model_type", "llama");
  if (mt != "llama" && mt != "mistral")
    usage_error(where + ": field 'model_type' is '" + mt + "'; supported: llama, mistral");
  if (cj.contains("hidden_act") && cj["hidden_act"] != "silu")
    usage_error(where + ": field 'hidden_act' must be 'silu'");
  ModelConfig c;
  c.name = dir.filename().empty() ? dir.parent_path().filename().string() : dir.filename().string();
  c.description = "Hugging Face safetensors checkpoint";
  c.source = ds;
  c.dim = json_int(cj, "hidden_size", where);
  c.n_layers = json_int(cj, "num_hidden_layers", where);
  c.n_heads = json_int(cj, "num_attention_heads", where);
  c.n_kv_heads = json_int(cj, "num_key_value_heads", where, c.n_heads);
  c.ffn_dim = json_int(cj, "intermediate_size", where);
  c.vocab_size = json_int(cj, "vocab_size", where);
  c.max_seq_len = json_int(cj, "max_position_embeddings", where, 2048);
  c.rope_theta = json_num(cj, "rope_theta", where, 10000.0);
  c.norm_eps = json_num(cj, "rms_norm_eps", where, 1e-6);
  c.tie_embeddings = cj.value("tie_word_embeddings", false);
  if (cj.contains("rope_scaling"))
    c.rope_scaling = rope_scaling_from_json(cj["rope_scaling"], where);
  if (cj.contains("rope_scaling") && cj["rope_scaling"].is_object() &&
      cj["rope_scaling"].contains("freq_factors"))
    usage_error(where + ": field 'rope_scaling.freq_factors' is not a Hugging Face field");
  if (cj.contains("sliding_window") && !cj["sliding_window"].is_null() &&
      !(cj.contains("use_sliding_window") && cj["use_sliding_window"] == false)) {
    if (mt != "mistral")
      usage_error(where + ": field 'sliding_window' is set but model_type '" + mt +
                  "' has no sliding window in Hugging Face transformers; remove it or use "
                  "model_type 'mistral'");
    c.sliding_window = json_int(cj, "sliding_window", where);
    if (c.sliding_window <= 0)
      usage_error(where + ": field 'sliding_window' is " + std::to_string(c.sliding_window) +
                  "; it must be positive (or null for none)");
  }
  // Fields that change the computation in ways latprof does not implement.
  for (const char* key : {"attention_bias", "mlp_bias"})
    if (cj.contains(key) && !cj[key].is_null() && cj[key] != false)
      usage_error(where + ": field '" + key + "' is " + cj[key].dump() +
                  "; latprof supports Llama layers without biases");
  if (cj.contains("partial_rotary_factor") && !cj["partial_rotary_factor"].is_null() &&
      json_num(cj, "partial_rotary_factor", where, 1.0) != 1.0)
    usage_error(where +
                ": field 'partial_rotary_factor' is not 1; latprof supports rotary "
                "embeddings over the whole head");
  if (cj.contains("quantization_config"))
    usage_error(where +
                ": field 'quantization_config' is set; quantised Hugging Face checkpoints "
                "(GPTQ, AWQ, bitsandbytes ...) are not supported: use an F16/BF16/F32 checkpoint "
                "or a GGUF file");
  validate_config(c, where);
  if (cj.contains("head_dim") && !cj["head_dim"].is_null() &&
      json_int(cj, "head_dim", where) != c.head_dim())
    usage_error(where + ": field 'head_dim' differs from hidden_size / num_attention_heads");

  // The shards: the index's weight map, else every *.safetensors file.
  std::vector<fs::path> shards;
  std::unordered_map<std::string, std::string> weight_map;
  const fs::path index_path = dir / "model.safetensors.index.json";
  if (fs::exists(index_path)) {
    const nlohmann::json ij = read_json(index_path);
    if (!ij.is_object() || !ij.contains("weight_map") || !ij["weight_map"].is_object())
      usage_error(index_path.string() + ": missing field 'weight_map'");
    std::map<std::string, int> files;
    for (auto it = ij["weight_map"].begin(); it != ij["weight_map"].end(); ++it) {
      if (!it.value().is_string())
        usage_error(index_path.string() + ": weight_map entry '" + it.key() +
                    "' is not a file name");
      const std::string f = it.value().get<std::string>();
      if (f.find('/') != std::string::npos || f == "..")
        usage_error(index_path.string() + ": weight_map entry '" + it.key() + "' names '" + f +
                    "' outside the directory");
      weight_map[it.key()] = f;
      files[f] = 1;
    }
    for (auto& [f, _] : files) shards.push_back(dir / f);
  } else {
    for (const auto& e : fs::directory_iterator(dir))
      if (e.path().extension() == ".safetensors") shards.push_back(e.path());
    std::sort(shards.begin(), shards.end());
  }
  if (shards.empty()) usage_error("model directory '" + ds + "' has no *.safetensors files");

  std::vector<std::shared_ptr<MappedFile>> files;
  std::unordered_map<std::string, FileTensor> all;
  std::unordered_map<std::string, std::string> unsupported;  // tensor -> dtype
  for (const auto& p : shards) {
    auto mf = std::make_shared<MappedFile>(p.string());
    const safetensors::File sf = safetensors::parse(mf->data(), mf->size(), p.string());
    for (const auto& t : sf.tensors) {
      if (all.count(t.name))
        usage_error("model directory '" + ds + "': tensor " + t.name + " appears in two files");
      if (!weight_map.empty()) {
        auto w = weight_map.find(t.name);
        if (w != weight_map.end() && w->second != p.filename().string())
          usage_error(p.string() + ": tensor " + t.name + " is mapped to " + w->second +
                      " by the index");
      }
      // dtype checks happen for the tensors the model uses only
      FileTensor ft;
      ft.name = t.name;
      ft.file = p.string();
      ft.shape = t.shape;
      ft.data = t.data;
      ft.nbytes = t.nbytes;
      if (t.dtype == "F32" || t.dtype == "F16" || t.dtype == "BF16")
        ft = safetensors::to_file_tensor(sf, t);
      else
        unsupported[t.name] = t.dtype;
      all.emplace(t.name, std::move(ft));
    }
    files.push_back(std::move(mf));
  }
  for (auto& [name, f] : weight_map)
    if (!all.count(name)) usage_error(index_path.string() + ": tensor " + name + " is not in " + f);
  for (auto& [name, t] : all)
    if (name.ends_with(".bias"))
      usage_error(t.file + ": tensor " + name +
                  " is a bias; latprof supports Llama layers without biases");

  std::string dtype = "F16";
  auto tensors = collect_tensors(
      c, false, "model directory '" + ds + "'",
      [&](const std::string& n) -> const FileTensor* {
        auto it = all.find(n);
        if (it == all.end()) return nullptr;
        if (auto u = unsupported.find(n); u != unsupported.end())
          usage_error(it->second.file + ": tensor " + n + " has dtype " + u->second +
                      "; supported: F16, BF16, F32");
        return &it->second;
      },
      &dtype);

  OpenedModel m;
  const fs::path tok_path = dir / "tokenizer.json";
  if (!fs::exists(tok_path))
    usage_error("model directory '" + ds +
                "' has no tokenizer.json (tokenizer.model alone is "
                "not supported)");
  const nlohmann::json tj = read_json(tok_path);
  nlohmann::json tcfg;
  const bool has_cfg = fs::exists(dir / "tokenizer_config.json");
  if (has_cfg) tcfg = read_json(dir / "tokenizer_config.json");
  m.tokenizer = tokenizer_from_json(tj, has_cfg ? &tcfg : nullptr, tok_path.string());
  check_tokenizer(*m.tokenizer, c, ds);
  m.config = c;
  m.weights = std::make_unique<FileWeights>(ds + " (safetensors, " + dtype + ", " +
                                                std::to_string(files.size()) + " file" +
                                                (files.size() == 1 ? "" : "s") + ")",
                                            std::move(files), std::move(tensors));
  m.source = ds;
  m.file_format = "safetensors";
  m.file_dtype = dtype;
  return m;
}

}  // namespace

bool is_model_file(const std::string& path) {
  if (path.empty()) return false;
  if (path.ends_with(".gguf") || path.ends_with(".safetensors")) return true;
  std::error_code ec;
  const auto st = fs::status(path, ec);
  if (!ec && fs::is_directory(st)) return true;
  if (!ec && fs::is_regular_file(st)) return !path.ends_with(".json");
  // A path that does not exist: a model file when it looks like a path, not a built-in name.
  return path.find('/') != std::string::npos && !path.ends_with(".json");
}

namespace {
OpenedModel open_any(const std::string& path) {
  std::error_code ec;
  const auto st = fs::status(path, ec);
  if (ec || !fs::exists(st)) usage_error("model path '" + path + "' does not exist");
  if (fs::is_directory(st)) return open_hf_dir(fs::path(path));
  auto file = std::make_shared<MappedFile>(path);
  if (file->size() >= 4 && std::memcmp(file->data(), "GGUF", 4) == 0)
    return open_gguf(path, std::move(file));
  uint64_t n = 0;
  if (file->size() >= 9) std::memcpy(&n, file->data(), 8);
  if (path.ends_with(".safetensors") || (n > 0 && n < file->size() && file->data()[8] == '{')) {
    const fs::path dir = fs::path(path).parent_path();
    return open_hf_dir(dir.empty() ? fs::path(".") : dir);
  }
  usage_error("'" + path +
              "' is not a model file: expected a GGUF file (magic 'GGUF') or a "
              "Hugging Face directory with config.json and *.safetensors");
}
}  // namespace

OpenedModel open_model_file(const std::string& path) {
  OpenedModel m = open_any(path);
  // Paths and metadata strings go into JSON reports, which must be valid UTF-8.
  m.config.name = utf8_sanitize(m.config.name);
  m.config.description = utf8_sanitize(m.config.description);
  m.config.source = utf8_sanitize(m.config.source);
  m.source = utf8_sanitize(m.source);
  return m;
}

}  // namespace latprof
