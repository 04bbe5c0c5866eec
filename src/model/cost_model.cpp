#include "model/cost_model.hpp"

#include <algorithm>

#include "core/error.hpp"

namespace latprof {

namespace {
constexpr const char* kOpNames[kNumOps] = {"embed",     "norm",     "qkv_proj", "rope",
                                           "attention", "o_proj",   "residual", "mlp_gate_up",
                                           "swiglu",    "mlp_down", "lm_head",  "sample"};
// FLOPs per element for the elementwise ops (a convention, stated so it can be checked):
constexpr double kNormFlopsPerElem = 4;      // square, accumulate, scale, multiply by weight
constexpr double kRopeFlopsPerElem = 3;      // a pair rotation is 4 mul + 2 add for 2 elements
constexpr double kSwigluFlopsPerElem = 6;    // silu(g) = g / (1 + exp(-g)) ~ 4, times up, +1
constexpr double kSoftmaxFlopsPerScore = 5;  // max, subtract, exp, sum, scale
}  // namespace

std::string Precision::name() const {
  switch (weights) {
    case WeightFormat::f16:
      return "fp16";
    case WeightFormat::int8_w8a16:
      return "int8";
    case WeightFormat::int8_w8a8:
      return "int8-w8a8";
  }
  return "?";
}

Precision precision_for(const std::string& dtype, int act_bytes, int kv_bytes) {
  Precision p;
  p.act_bytes = act_bytes;
  p.kv_bytes = kv_bytes;
  if (dtype == "fp16") {
    p.weights = WeightFormat::f16;
    p.weight_bytes = 2;
    p.scale_bytes = 0;
  } else if (dtype == "int8" || dtype == "int8-w8a16") {
    p.weights = WeightFormat::int8_w8a16;
    p.weight_bytes = 1;
    p.scale_bytes = 4;
  } else if (dtype == "int8-w8a8") {
    p.weights = WeightFormat::int8_w8a8;
    p.weight_bytes = 1;
    p.scale_bytes = 4;
  } else {
    usage_error("unknown dtype '" + dtype + "'; use fp16, int8 (weight-only, W8A16) or int8-w8a8");
  }
  return p;
}

const char* op_name(Op op) {
  return kOpNames[static_cast<int>(op)];
}

Op op_from_name(const std::string& name) {
  for (int i = 0; i < kNumOps; ++i)
    if (name == kOpNames[i]) return static_cast<Op>(i);
  usage_error("unknown operation '" + name + "'");
}

bool op_is_matmul(Op op) {
  return op == Op::qkv_proj || op == Op::o_proj || op == Op::mlp_gate_up || op == Op::mlp_down ||
         op == Op::lm_head || op == Op::attention;
}

Cost& Cost::operator+=(const Cost& o) {
  flops += o.flops;
  model_flops += o.model_flops;
  weight_bytes += o.weight_bytes;
  act_bytes += o.act_bytes;
  kv_bytes += o.kv_bytes;
  return *this;
}
Cost operator+(Cost a, const Cost& b) {
  return a += b;
}
Cost operator*(Cost a, double k) {
  a.flops *= k;
  a.model_flops *= k;
  a.weight_bytes *= k;
  a.act_bytes *= k;
  a.kv_bytes *= k;
  return a;
}

Cost total(const OpCosts& ops) {
  Cost t;
  for (const auto& c : ops) t += c;
  return t;
}

namespace {
// y[rows, n_out] = x[rows, n_in] · Wᵀ
Cost linear(const Precision& p, double rows, double n_out, double n_in) {
  Cost c;
  c.flops = 2 * rows * n_out * n_in;
  c.model_flops = c.flops;
  c.weight_bytes = n_out * n_in * p.weight_bytes + n_out * p.scale_bytes;
  c.act_bytes = rows * (n_in + n_out) * p.act_bytes;
  return c;
}
}  // namespace

OpCosts forward_cost(const ModelConfig& m, const Precision& p, int64_t n_seq, int64_t n_new,
                     int64_t ctx0, int64_t logits_rows_per_seq) {
  OpCosts ops{};
  const double L = double(m.n_layers);
  const double rows = double(n_seq) * double(n_new);  // tokens in this pass
  const double d = double(m.dim), qd = double(m.q_dim()), kvd = double(m.kv_dim());
  const double ffn = double(m.ffn_dim), V = double(m.vocab_size), A = p.act_bytes;
  const double logit_rows = double(n_seq) * double(std::min(logits_rows_per_seq, n_new));

  Cost& embed = ops[int(Op::embed)];
  embed.weight_bytes = rows * d * p.embed_bytes;  // rows of the table that are gathered
  embed.act_bytes = rows * d * A;

  Cost& norm = ops[int(Op::norm)];
  // two norms per layer over all rows, plus the final norm over the logit rows
  const double norm_rows = 2 * L * rows + logit_rows;
  norm.flops = norm_rows * d * kNormFlopsPerElem;
  norm.model_flops = 0;  // not part of the 2N convention
  norm.weight_bytes = (2 * L + (logit_rows > 0 ? 1 : 0)) * d * p.norm_weight_bytes;
  norm.act_bytes = norm_rows * 2 * d * A;

  ops[int(Op::qkv_proj)] = linear(p, rows, qd + 2 * kvd, d) * L;

  Cost& rope = ops[int(Op::rope)];
  rope.flops = L * rows * (qd + kvd) * kRopeFlopsPerElem;
  rope.act_bytes = L * rows * (qd + kvd) * 2 * A;

  Cost& attn = ops[int(Op::attention)];
  // Keys attended per sequence: sum over new tokens t of (ctx0 + t + 1) for causal execution
  // (at most the sliding window each); the MFU convention counts the full context (ctx0 + n_new,
  // or the window) for every new token.
  const double nn = double(n_new), c0 = double(ctx0);
  const double W = m.sliding_window > 0 ? double(m.sliding_window) : 0;
  // sum of min(x, W) for x = a .. b (W = 0: no window)
  auto sum_clipped = [&](double a, double b) {
    if (W == 0 || b <= W) return (a + b) * (b - a + 1) / 2;
    if (a > W) return W * (b - a + 1);
    return (a + W) * (W - a + 1) / 2 + W * (b - W);
  };
  const double causal_keys = sum_clipped(c0 + 1, c0 + nn);
  const double full_keys = nn * (W > 0 ? std::min(c0 + nn, W) : c0 + nn);
  // Keys read from the cache once per sequence: those any new token sees.
  const double keys_read = W > 0 ? std::min(c0 + nn, nn + W - 1) : c0 + nn;
  const double hd = double(m.head_dim()), H = double(m.n_heads);
  attn.flops = L * n_seq * (4 * qd * causal_keys + H * kSoftmaxFlopsPerScore * causal_keys);
  attn.model_flops = L * n_seq * 4 * qd * full_keys;
  (void)hd;
  // KV cache: new K and V written once; the context (ctx0 + n_new, or what the window lets the
  // new tokens see) read once per sequence.
  attn.kv_bytes = L * n_seq * 2 * kv_row_bytes(m, p) * (nn + keys_read);
  // q, new k and v read, output written
  attn.act_bytes = L * rows * (qd + 2 * kvd + qd) * A;

  ops[int(Op::o_proj)] = linear(p, rows, d, qd) * L;

  Cost& residual = ops[int(Op::residual)];
  residual.flops = 2 * L * rows * d;
  residual.act_bytes = 2 * L * rows * d * 3 * A;

  ops[int(Op::mlp_gate_up)] = linear(p, rows, 2 * ffn, d) * L;

  Cost& sw = ops[int(Op::swiglu)];
  sw.flops = L * rows * ffn * kSwigluFlopsPerElem;
  sw.act_bytes = L * rows * ffn * 3 * A;

  ops[int(Op::mlp_down)] = linear(p, rows, d, ffn) * L;
  if (logit_rows > 0) ops[int(Op::lm_head)] = linear(p, logit_rows, V, d);
  return ops;
}

Cost sample_cost(const ModelConfig& m, const Precision& p, int64_t n_seq) {
  Cost c;
  c.flops = double(n_seq) * double(m.vocab_size);  // one compare per logit (greedy)
  c.act_bytes = double(n_seq) * double(m.vocab_size) * p.act_bytes;
  return c;
}

OpCosts step_cost(const ModelConfig& m, const Precision& p, const std::vector<StepSeq>& seqs) {
  OpCosts sum{};
  for (const StepSeq& q : seqs) {
    const OpCosts one = forward_cost(m, p, 1, q.n_new, q.past, q.logits ? 1 : 0);
    for (int i = 0; i < kNumOps; ++i) {
      const double w = std::max(sum[i].weight_bytes, one[i].weight_bytes);
      sum[i] += one[i];
      sum[i].weight_bytes = w;  // read once per step, whatever the number of sequences
    }
  }
  return sum;
}

OpCosts decode_cost(const ModelConfig& m, const Precision& p, int64_t n_seq, int64_t prompt,
                    int64_t n_steps) {
  OpCosts sum{};
  for (int64_t k = 0; k < n_steps; ++k) {
    const OpCosts step = forward_cost(m, p, n_seq, 1, prompt + k);
    for (int i = 0; i < kNumOps; ++i) sum[i] += step[i];
  }
  return sum;
}

double weight_bytes(const ModelConfig& m, const Precision& p) {
  const double linear_params = double(m.n_layers) * m.params_per_layer_linear();
  const double linear_rows =
      double(m.n_layers) * (m.q_dim() + 2 * m.kv_dim() + m.dim + 2 * m.ffn_dim + m.dim);
  double b = linear_params * p.weight_bytes + linear_rows * p.scale_bytes;
  b += double(m.params_embedding()) * p.embed_bytes;
  if (!m.tie_embeddings)
    b += double(m.params_lm_head()) * p.weight_bytes + double(m.vocab_size) * p.scale_bytes;
  b += double(2 * m.n_layers + 1) * m.dim * p.norm_weight_bytes;
  return b;
}

double kv_row_bytes(const ModelConfig& m, const Precision& p) {
  return double(m.kv_dim()) * p.kv_bytes + double(m.n_kv_heads) * p.kv_scale_bytes;
}

double kv_bytes_per_token(const ModelConfig& m, const Precision& p) {
  return double(m.n_layers) * 2.0 * kv_row_bytes(m, p);
}

double kv_cache_bytes(const ModelConfig& m, const Precision& p, int64_t n_seq, int64_t ctx) {
  return kv_bytes_per_token(m, p) * double(n_seq) * double(ctx);
}

}  // namespace latprof
