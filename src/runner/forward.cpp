#include "runner/forward.hpp"

namespace latprof {

void forward(LoadedModel& m, Profiler& prof, const StepDesc& st,
             const std::function<void(int)>& on_layer) {
  Backend& b = m.backend();
  const ModelConfig& c = m.config();
  const int64_t rows = st.n_tokens;
  const float eps = float(c.norm_eps);
  const AttentionShape& shape = m.attention_shape;

  {
    auto s = prof.op(Op::embed);
    b.embed(m.tok_embeddings, st.tokens, rows, m.x);  // x: [rows, dim]
  }
  for (int l = 0; l < int(c.n_layers); ++l) {
    LayerWeights& w = m.layers[size_t(l)];
    {
      auto s = prof.op(Op::norm, l);
      b.rmsnorm(m.x, w.attn_norm, rows, c.dim, eps, m.xb);  // xb: [rows, dim]
    }
    {
      auto s = prof.op(Op::qkv_proj, l);
      // q: [rows, q_dim], k and v: [rows, kv_dim]
      const DeviceWeight* ws[] = {&w.wq, &w.wk, &w.wv};
      void* ys[] = {m.q, m.k, m.v};
      b.matmul_group(ws, m.xb, rows, ys);
    }
    {
      auto s = prof.op(Op::rope, l);
      b.rope(m.q, m.k, st, shape);
    }
    {
      auto s = prof.op(Op::attention, l);
      b.attention(m.q, m.k, m.v, m.kv[size_t(l)], st, shape, m.att);
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
      const DeviceWeight* ws[] = {&w.w_gate, &w.w_up};  // gate, up: [rows, ffn]
      void* ys[] = {m.gate, m.up};
      b.matmul_group(ws, m.xb, rows, ys);
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
  // Only the rows that are sampled go through the final norm and the LM head (none in a step
  // that only holds chunks of prompts before their last).
  if (st.n_logits <= 0) return;
  {
    auto s = prof.op(Op::norm);
    b.gather_rows(m.x, st.logits_rows, st.n_logits, c.dim, m.last);  // last: [n_logits, dim]
    b.rmsnorm(m.last, m.final_norm, st.n_logits, c.dim, eps, m.last);
  }
  {
    auto s = prof.op(Op::lm_head);
    b.matmul(m.output, m.last, st.n_logits, m.logits);  // logits: [n_logits, vocab]
  }
}

}  // namespace latprof
