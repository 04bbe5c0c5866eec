#include "runner/model.hpp"

#include "core/checked.hpp"
#include "core/error.hpp"
#include "core/format.hpp"

namespace latprof {

namespace {
// int32 entries of the step buffer (see LoadedModel::step_buf).
int64_t step_ints(const EngineShape& e) {
  return 4 * e.max_step_tokens + 3 * e.max_seqs + 1 + e.max_seqs * e.max_blocks();
}
}  // namespace

Footprint LoadedModel::footprint(const ModelConfig& c, WeightType wtype, const Backend& b,
                                 const EngineShape& e) {
  Precision p = backend_precision(dtype_name(wtype), b);
  Footprint f;
  f.weights = weight_bytes(c, p);
  f.kv_cache = kv_cache_bytes(c, p, 1, e.kv_blocks * e.block_size);
  const double rows = double(e.max_step_tokens);
  const double per_row = 2.0 * c.dim + 2.0 * c.q_dim() + 2.0 * c.kv_dim() + c.dim + 2.0 * c.ffn_dim;
  f.activations = (rows * per_row + double(e.max_seqs) * (c.dim + c.vocab_size)) * b.act_bytes() +
                  4.0 * double(e.max_seqs + step_ints(e));
  return f;
}

WeightType weight_type_for(WeightFormat f) {
  switch (f) {
    case WeightFormat::f16:
      return WeightType::f16;
    case WeightFormat::int8_w8a16:
      return WeightType::i8;
    case WeightFormat::int8_w8a8:
      return WeightType::i8a8;
  }
  return WeightType::f16;
}

void check_backend_runs(const Backend& b, WeightType t) {
  std::string why;
  if (!b.supports(t, &why)) usage_error("--dtype " + std::string(dtype_name(t)) + ": " + why);
}

std::string implied_dtype(const std::string& file_dtype) {
  return file_dtype == "Q8_0" ? "int8" : "fp16";
}

std::string file_dtype_note(const std::string& file_dtype, WeightType t, bool implied) {
  if (file_dtype != "Q8_0") return "";
  if (t == WeightType::f16)
    return "the model file's matrices are Q8_0, dequantised to FP16 at load (--dtype fp16): 1.9x "
           "the bytes the file stores (2 a weight against 34 per 32), and FP16's arithmetic; "
           "without --dtype a Q8_0 file runs as int8";
  if (implied)
    return std::string("--dtype ") + dtype_name(t) +
           " taken from the model file, whose matrices are Q8_0 (--dtype fp16 dequantises them "
           "instead); the Q8_0 blocks of 32 are requantised at load to one scale per row";
  return "";
}

KvType kv_type_for(const std::string& flag) {
  if (flag == "fp16") return KvType::f16;
  if (flag == "bf16") return KvType::bf16;
  if (flag == "int8") return KvType::i8;
  usage_error("--kv-dtype '" + flag + "' is not supported; use fp16, bf16 or int8");
}

Precision backend_precision(const std::string& dtype, const Backend& b) {
  Precision p = precision_for(dtype, b.act_bytes(), b.kv_bytes());
  p.kv_bf16 = b.kv_type() == KvType::bf16;
  p.kv_scale_bytes = b.kv_scale_bytes();
  return p;
}

void check_backend_kv(const Backend& b, KvType t) {
  std::string why;
  if (!b.supports_kv(t, &why))
    usage_error("--kv-dtype " + std::string(kv_dtype_name(t)) + ": " + why +
                "; use --backend cpu or --kv-dtype fp16");
}

int64_t default_max_batched_tokens(const Backend& b) {
  return b.device().backend == "cpu" ? kDefaultBatchedTokensCpu : kDefaultBatchedTokensCuda;
}

void check_engine_flags(int64_t kv_block_size, int64_t max_batched_tokens, int64_t max_seqs,
                        int64_t max_model_len, int64_t context) {
  if (kv_block_size < 1 || kv_block_size > 4096 || (kv_block_size & (kv_block_size - 1)) != 0)
    usage_error("--kv-block-size must be a power of two from 1 to 4096 tokens (got " +
                std::to_string(kv_block_size) + ")");
  if (max_batched_tokens < 0 || max_batched_tokens > (int64_t(1) << 20))
    usage_error(
        "--max-batched-tokens must be from 1 to 1048576 tokens, or 0 for the backend's "
        "default (got " +
        std::to_string(max_batched_tokens) + ")");
  if (max_seqs < 1 || max_seqs > 4096)
    usage_error("--max-seqs must be from 1 to 4096 (got " + std::to_string(max_seqs) + ")");
  if (max_model_len != 0 && (max_model_len < 2 || max_model_len > context))
    usage_error("--max-model-len must be from 2 to the model's context of " +
                std::to_string(context) + " tokens, or 0 for the whole context (got " +
                std::to_string(max_model_len) + ")");
}

void LoadedModel::check_fits(const Footprint& f, const Backend& b, const std::string& what) {
  const DeviceInfo d = b.device();
  if (d.memory_available_bytes > 0 && f.total() > d.memory_available_bytes)
    usage_error("not enough " + std::string(d.backend == "cpu" ? "memory" : "device memory") +
                " for " + what + ": need " + fmt_bytes(f.total()) + " (weights " +
                fmt_bytes(f.weights) + ", KV cache " + fmt_bytes(f.kv_cache) + ", activations " +
                fmt_bytes(f.activations) + "), available " + fmt_bytes(d.memory_available_bytes) +
                "; use --dtype int8, a smaller model, a smaller --batch, fewer tokens, a smaller "
                "--kv-cache-memory or --max-batched-tokens");
}

LoadedModel::LoadedModel(const ModelConfig& cfg, WeightType wtype, Backend& backend,
                         const EngineShape& shape)
    : cfg_(cfg), wtype_(wtype), backend_(backend), shape_(shape) {
  LATPROF_ASSERT(shape.kv_blocks > 0 && shape.block_size > 0 && shape.max_step_tokens > 0 &&
                     shape.max_seqs > 0 && shape.max_model_len > 0,
                 "empty engine shape");
  // The KV pool's size in bytes must not overflow before it is compared with memory.
  const int64_t row_bytes =
      int64_t(kv_row_bytes(cfg, backend_precision(dtype_name(wtype), backend)));
  checked_mul(checked_mul(shape.kv_blocks, shape.block_size, "the KV cache"), row_bytes,
              "the KV cache");
  check_fits(footprint(cfg, wtype, backend, shape), backend, cfg.name);
  attention_shape.n_heads = int(cfg.n_heads);
  attention_shape.n_kv_heads = int(cfg.n_kv_heads);
  attention_shape.head_dim = int(cfg.head_dim());
  attention_shape.rope_theta = float(cfg.rope_theta);
  attention_shape.rope_inv_freq = cfg.rope_inv_freq();
  attention_shape.sliding_window = cfg.sliding_window;
  const int64_t d = cfg.dim, qd = cfg.q_dim(), kvd = cfg.kv_dim(), ffn = cfg.ffn_dim;
  try {
    tok_embeddings = make_weight(WeightType::f16, cfg.vocab_size, d, "token embeddings");
    layers.resize(size_t(cfg.n_layers));
    for (auto& l : layers) {
      l.attn_norm = static_cast<float*>(alloc(size_t(d) * 4, "norm weights"));
      l.wq = make_weight(wtype, qd, d, "attention weights");
      l.wk = make_weight(wtype, kvd, d, "attention weights");
      l.wv = make_weight(wtype, kvd, d, "attention weights");
      l.wo = make_weight(wtype, d, qd, "attention weights");
      l.ffn_norm = static_cast<float*>(alloc(size_t(d) * 4, "norm weights"));
      l.w_gate = make_weight(wtype, ffn, d, "MLP weights");
      l.w_up = make_weight(wtype, ffn, d, "MLP weights");
      l.w_down = make_weight(wtype, d, ffn, "MLP weights");
    }
    final_norm = static_cast<float*>(alloc(size_t(d) * 4, "norm weights"));
    if (cfg.tie_embeddings)
      output = tok_embeddings;
    else
      output = make_weight(wtype, cfg.vocab_size, d, "LM head");
    const size_t kv_bytes = size_t(shape.kv_blocks) * size_t(shape.block_size) * size_t(row_bytes);
    kv.resize(size_t(cfg.n_layers));
    for (auto& l : kv) {
      l.k = alloc(kv_bytes, "KV cache");
      l.v = alloc(kv_bytes, "KV cache");
      l.num_blocks = shape.kv_blocks;
      l.block_size = shape.block_size;
      l.kv_dim = kvd;
      l.row_bytes = row_bytes;
    }
    const size_t A = size_t(backend.act_bytes()), R = size_t(shape.max_step_tokens);
    const size_t S = size_t(shape.max_seqs);
    x = alloc(R * size_t(d) * A, "activations");
    xb = alloc(R * size_t(d) * A, "activations");
    q = alloc(R * size_t(qd) * A, "activations");
    k = alloc(R * size_t(kvd) * A, "activations");
    v = alloc(R * size_t(kvd) * A, "activations");
    att = alloc(R * size_t(qd) * A, "activations");
    proj = alloc(R * size_t(d) * A, "activations");
    gate = alloc(R * size_t(ffn) * A, "activations");
    up = alloc(R * size_t(ffn) * A, "activations");
    last = alloc(S * size_t(d) * A, "activations");
    logits = alloc(S * size_t(cfg.vocab_size) * A, "logits");
    sampled = static_cast<int32_t*>(alloc(S * 4, "sampled tokens"));
    step_buf_ints = step_ints(shape);
    step_buf = static_cast<int32_t*>(alloc(size_t(step_buf_ints) * 4, "step description"));
  } catch (...) {
    for (void* p : allocations_) backend_.release(p);
    allocations_.clear();
    throw;
  }
}

LoadedModel::~LoadedModel() {
  for (void* p : allocations_) backend_.release(p);
}

void* LoadedModel::alloc(size_t bytes, const char* what) {
  void* p = backend_.alloc(bytes, what);
  allocations_.push_back(p);
  return p;
}

DeviceWeight LoadedModel::make_weight(WeightType t, int64_t n_out, int64_t n_in, const char* what) {
  DeviceWeight w;
  w.type = t;
  w.n_out = n_out;
  w.n_in = n_in;
  w.data = alloc(w.data_bytes(), what);
  if (int8_storage(t)) w.scales = static_cast<float*>(alloc(size_t(n_out) * 4, what));
  return w;
}

void LoadedModel::load(WeightSource& src, const std::function<void(int64_t, int64_t)>& progress) {
  const int64_t total = 3 + cfg_.n_layers * 9;
  int64_t done = 0;
  auto tick = [&] {
    ++done;
    if (progress) progress(done, total);
  };
  src.load_embedding("tok_embeddings", tok_embeddings, backend_);
  tick();
  for (size_t i = 0; i < layers.size(); ++i) {
    const std::string p = "layers." + std::to_string(i) + ".";
    LayerWeights& l = layers[i];
    src.load_vector(p + "attn_norm", l.attn_norm, cfg_.dim, backend_);
    tick();
    src.load_linear(p + "wq", l.wq, backend_);
    tick();
    src.load_linear(p + "wk", l.wk, backend_);
    tick();
    src.load_linear(p + "wv", l.wv, backend_);
    tick();
    src.load_linear(p + "wo", l.wo, backend_);
    tick();
    src.load_vector(p + "ffn_norm", l.ffn_norm, cfg_.dim, backend_);
    tick();
    src.load_linear(p + "w_gate", l.w_gate, backend_);
    tick();
    src.load_linear(p + "w_up", l.w_up, backend_);
    tick();
    src.load_linear(p + "w_down", l.w_down, backend_);
    tick();
  }
  src.load_vector("norm", final_norm, cfg_.dim, backend_);
  tick();
  if (!cfg_.tie_embeddings) src.load_linear("output", output, backend_);
  tick();
  backend_.synchronize();
}

}  // namespace latprof
