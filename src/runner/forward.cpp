#include "runner/forward.hpp"

namespace latprof {

void forward(LoadedModel& m, Profiler& prof, int64_t n_seq, int64_t n_new,
             const std::function<void(int)>& on_layer) {
  Backend& b = m.backend();
  const ModelConfig& c = m.config();
  const int64_t rows = n_seq * n_new;
  const float eps = float(c.norm_eps);
  const AttentionShape& shape = m.attention_shape;

  {
    auto s = prof.op(Op::embed);
    b.embed(m.tok_embeddings, m.tokens, rows, m.x);  // x: [rows, dim]
  }
  for (int l = 0; l < int(c.n_layers); ++l) {
    LayerWeights& w = m.layers[size_t(l)];
    {
      auto s = prof.op(Op::norm, l);
      b.rmsnorm(m.x, w.attn_norm, rows, c.dim, eps, m.xb);  // xb: [rows, dim]
    }
    {
      auto s = prof.op(Op::qkv_proj, l);
      b.matmul(w.wq, m.xb, rows, m.q);  // q: [rows, q_dim]
      b.matmul(w.wk, m.xb, rows, m.k);  // k: [rows, kv_dim]
      b.matmul(w.wv, m.xb, rows, m.v);  // v: [rows, kv_dim]
    }
    {
      auto s = prof.op(Op::rope, l);
      b.rope(m.q, m.k, n_seq, n_new, m.pos, shape);
    }
    {
      auto s = prof.op(Op::attention, l);
      b.attention(m.q, m.k, m.v, m.kv[size_t(l)], n_seq, n_new, m.pos, shape, m.att);
    }
    {
      auto s = prof.op(Op::o_proj, l);
      b.matmul(w.wo, m.att, rows, m.proj);  // proj: [rows, dim]
    }
    {
      auto s = prof.op(Op::residual, l);
      b.add(m.x, m.proj, rows * c.dim);
    }
    {
      auto s = prof.op(Op::norm, l);
      b.rmsnorm(m.x, w.ffn_norm, rows, c.dim, eps, m.xb);
    }
    {
      auto s = prof.op(Op::mlp_gate_up, l);
      b.matmul(w.w_gate, m.xb, rows, m.gate);  // gate: [rows, ffn]
      b.matmul(w.w_up, m.xb, rows, m.up);      // up: [rows, ffn]
    }
    {
      auto s = prof.op(Op::swiglu, l);
      b.swiglu(m.gate, m.up, rows * c.ffn_dim, m.gate);
    }
    {
      auto s = prof.op(Op::mlp_down, l);
      b.matmul(w.w_down, m.gate, rows, m.proj);  // proj: [rows, dim]
    }
    {
      auto s = prof.op(Op::residual, l);
      b.add(m.x, m.proj, rows * c.dim);
    }
    if (on_layer) on_layer(l);
  }
  {
    // Only each sequence's last position goes through the final norm and the LM head.
    auto s = prof.op(Op::norm);
    b.gather_last(m.x, n_seq, n_new, c.dim, m.last);  // last: [n_seq, dim]
    b.rmsnorm(m.last, m.final_norm, n_seq, c.dim, eps, m.last);
  }
  {
    auto s = prof.op(Op::lm_head);
    b.matmul(m.output, m.last, n_seq, m.logits);  // logits: [n_seq, vocab]
  }
}

}  // namespace latprof
