#include "runner/model.hpp"

#include "core/checked.hpp"
#include "core/error.hpp"
#include "core/format.hpp"

namespace latprof {

Footprint LoadedModel::footprint(const ModelConfig& c, WeightType wtype, const Backend& b,
                                 int64_t n_seq, int64_t max_rows_per_seq, int64_t ctx_cap) {
  Precision p =
      precision_for(wtype == WeightType::f16 ? "fp16" : "int8", b.act_bytes(), b.kv_bytes());
  Footprint f;
  f.weights = weight_bytes(c, p);
  f.kv_cache = kv_cache_bytes(c, p, n_seq, ctx_cap);
  const double rows = double(n_seq) * double(max_rows_per_seq);
  const double per_row = 2.0 * c.dim + 2.0 * c.q_dim() + 2.0 * c.kv_dim() + c.dim + 2.0 * c.ffn_dim;
  f.activations =
      (rows * per_row + double(n_seq) * (c.dim + c.vocab_size)) * b.act_bytes() + rows * 4.0 + 4.0;
  return f;
}

void LoadedModel::check_fits(const Footprint& f, const Backend& b, const std::string& what) {
  const DeviceInfo d = b.device();
  if (d.memory_available_bytes > 0 && f.total() > d.memory_available_bytes)
    usage_error("not enough " + std::string(d.backend == "cpu" ? "memory" : "device memory") +
                " for " + what + ": need " + fmt_bytes(f.total()) + " (weights " +
                fmt_bytes(f.weights) + ", KV cache " + fmt_bytes(f.kv_cache) + ", activations " +
                fmt_bytes(f.activations) + "), available " + fmt_bytes(d.memory_available_bytes) +
                "; use --dtype int8, a smaller model, a smaller --batch or fewer tokens");
}

LoadedModel::LoadedModel(const ModelConfig& cfg, WeightType wtype, Backend& backend, int64_t n_seq,
                         int64_t max_rows_per_seq, int64_t ctx_cap)
    : cfg_(cfg),
      wtype_(wtype),
      backend_(backend),
      n_seq_(n_seq),
      max_rows_(n_seq * max_rows_per_seq),
      ctx_cap_(ctx_cap) {
  // Sizes arrive validated (validate_run_options); a wrapped or inconsistent one here would index
  // past the KV cache, so it is an internal error before anything is allocated.
  LATPROF_ASSERT(n_seq > 0 && max_rows_per_seq > 0 && ctx_cap >= max_rows_per_seq,
                 "n_seq " + std::to_string(n_seq) + ", rows " + std::to_string(max_rows_per_seq) +
                     ", ctx_cap " + std::to_string(ctx_cap));
  checked_mul(checked_mul(n_seq, ctx_cap, "the KV cache"), cfg.kv_dim(), "the KV cache");
  check_fits(footprint(cfg, wtype, backend, n_seq, max_rows_per_seq, ctx_cap), backend, cfg.name);
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
    const size_t kv_elems = size_t(n_seq) * size_t(ctx_cap) * size_t(kvd);
    kv.resize(size_t(cfg.n_layers));
    for (auto& l : kv) {
      l.k = alloc(kv_elems * size_t(backend.kv_bytes()), "KV cache");
      l.v = alloc(kv_elems * size_t(backend.kv_bytes()), "KV cache");
      l.ctx_cap = ctx_cap;
      l.kv_dim = kvd;
    }
    const size_t A = size_t(backend.act_bytes()), R = size_t(max_rows_);
    x = alloc(R * size_t(d) * A, "activations");
    xb = alloc(R * size_t(d) * A, "activations");
    q = alloc(R * size_t(qd) * A, "activations");
    k = alloc(R * size_t(kvd) * A, "activations");
    v = alloc(R * size_t(kvd) * A, "activations");
    att = alloc(R * size_t(qd) * A, "activations");
    proj = alloc(R * size_t(d) * A, "activations");
    gate = alloc(R * size_t(ffn) * A, "activations");
    up = alloc(R * size_t(ffn) * A, "activations");
    last = alloc(size_t(n_seq) * size_t(d) * A, "activations");
    logits = alloc(size_t(n_seq) * size_t(cfg.vocab_size) * A, "logits");
    tokens = static_cast<int32_t*>(alloc(R * 4, "token ids"));
    pos = static_cast<int32_t*>(alloc(4, "position"));
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
  if (t == WeightType::i8) w.scales = static_cast<float*>(alloc(size_t(n_out) * 4, what));
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
