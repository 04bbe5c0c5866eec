// The cost model against hand-computed values for llama-2-7b.
#include <gtest/gtest.h>

#include "model/config.hpp"
#include "model/cost_model.hpp"

namespace {

using namespace latprof;

TEST(CostModel, Llama2_7bParameters) {
  const ModelConfig m = find_model("llama-2-7b");
  // embeddings 32000*4096 = 131,072,000; per layer 4*4096^2 + 3*4096*11008 + 2*4096 norms
  // = 202,383,360; final norm 4096; LM head 131,072,000.
  EXPECT_EQ(m.params_total(), 6738415616);
  EXPECT_EQ(m.params_per_layer_linear(), 202375168);
  EXPECT_EQ(m.params_matmul(), 32 * 202375168LL + 131072000LL);
}

TEST(CostModel, DecodeStepFlopsAndBytes) {
  const ModelConfig m = find_model("llama-2-7b");
  const Precision p = precision_for("fp16", 2, 2);
  const int64_t ctx = 700;
  const OpCosts ops = forward_cost(m, p, 1, 1, ctx);
  // Linear layers: 2 FLOPs per matmul parameter per token.
  const double linear = ops[int(Op::qkv_proj)].flops + ops[int(Op::o_proj)].flops +
                        ops[int(Op::mlp_gate_up)].flops + ops[int(Op::mlp_down)].flops +
                        ops[int(Op::lm_head)].flops;
  EXPECT_DOUBLE_EQ(linear, 2.0 * double(m.params_matmul()));
  // Model FLOPs of attention: 4 * layers * q_dim * context (context includes the new token).
  EXPECT_DOUBLE_EQ(ops[int(Op::attention)].model_flops, 4.0 * 32 * 4096 * (ctx + 1));
  // Weight bytes per step: every linear weight once, fp16.
  const double wbytes = ops[int(Op::qkv_proj)].weight_bytes + ops[int(Op::o_proj)].weight_bytes +
                        ops[int(Op::mlp_gate_up)].weight_bytes +
                        ops[int(Op::mlp_down)].weight_bytes + ops[int(Op::lm_head)].weight_bytes;
  EXPECT_DOUBLE_EQ(wbytes, 2.0 * double(m.params_matmul()));
  // KV read: 2 (K, V) * layers * kv_dim * 2 bytes * (ctx + 1), plus the new row written.
  EXPECT_DOUBLE_EQ(ops[int(Op::attention)].kv_bytes, 2.0 * 32 * 4096 * 2 * (ctx + 1 + 1));
}

TEST(CostModel, Int8HalvesWeightBytesAndCountsScales) {
  const ModelConfig m = find_model("llama-2-7b");
  const Precision f = precision_for("fp16", 2, 2), q = precision_for("int8", 2, 2);
  const Cost a = forward_cost(m, f, 1, 1, 10)[int(Op::mlp_down)];
  const Cost b = forward_cost(m, q, 1, 1, 10)[int(Op::mlp_down)];
  EXPECT_DOUBLE_EQ(a.weight_bytes, 32.0 * 4096 * 11008 * 2);
  EXPECT_DOUBLE_EQ(b.weight_bytes, 32.0 * (4096.0 * 11008 + 4096 * 4));
  EXPECT_DOUBLE_EQ(a.flops, b.flops);
}

TEST(CostModel, PrefillWeightsReadOnceAndCausalAttention) {
  const ModelConfig m = find_model("llama-2-7b");
  const Precision p = precision_for("fp16", 4, 2);
  const OpCosts one = forward_cost(m, p, 1, 1, 0), many = forward_cost(m, p, 1, 500, 0);
  EXPECT_DOUBLE_EQ(one[int(Op::o_proj)].weight_bytes, many[int(Op::o_proj)].weight_bytes);
  EXPECT_DOUBLE_EQ(many[int(Op::o_proj)].flops, 500 * one[int(Op::o_proj)].flops);
  // Executed attention is causal (about half of the square), model FLOPs count the full square.
  const Cost& at = many[int(Op::attention)];
  EXPECT_NEAR(at.model_flops / (4.0 * 32 * 4096 * 500 * 500), 1.0, 1e-12);
  EXPECT_GT(at.flops, 0.5 * at.model_flops);
  EXPECT_LT(at.flops, 0.6 * at.model_flops);
  // Only the last token reaches the LM head.
  EXPECT_DOUBLE_EQ(many[int(Op::lm_head)].flops, one[int(Op::lm_head)].flops);
}

TEST(CostModel, PromptChunksBeforeTheLastReadNoLmHead) {
  // A chunked prefill: only the chunk that ends the prompt samples, so only its step reads the
  // LM head and the final norm's weights.
  const ModelConfig m = find_model("tinyllama-1.1b");
  const Precision p = precision_for("int8", 4, 2);
  const OpCosts early = step_cost(m, p, {{512, 0, false}});
  const OpCosts last = step_cost(m, p, {{512, 512, true}});
  EXPECT_EQ(early[int(Op::lm_head)].weight_bytes, 0);
  EXPECT_EQ(early[int(Op::lm_head)].flops, 0);
  EXPECT_DOUBLE_EQ(last[int(Op::lm_head)].weight_bytes, 32000.0 * 2048 + 32000 * 4);
  EXPECT_DOUBLE_EQ(last[int(Op::norm)].weight_bytes - early[int(Op::norm)].weight_bytes,
                   2048.0 * p.norm_weight_bytes);
  // One sequence that samples in a step with one that does not: the head is read once.
  const OpCosts both = step_cost(m, p, {{512, 0, false}, {1, 700, true}});
  EXPECT_DOUBLE_EQ(both[int(Op::lm_head)].weight_bytes, last[int(Op::lm_head)].weight_bytes);
  EXPECT_DOUBLE_EQ(both[int(Op::lm_head)].flops, 2.0 * 32000 * 2048);
}

TEST(CostModel, DecodeSumsStepsWithGrowingContext) {
  const ModelConfig m = find_model("tiny");
  const Precision p = precision_for("fp16", 4, 2);
  const OpCosts sum = decode_cost(m, p, 2, 10, 3);
  double kv = 0;
  for (int k = 0; k < 3; ++k) kv += forward_cost(m, p, 2, 1, 10 + k)[int(Op::attention)].kv_bytes;
  EXPECT_DOUBLE_EQ(sum[int(Op::attention)].kv_bytes, kv);
}

TEST(CostModel, SlidingWindowBoundsAttention) {
  // mistral-7b: 32 layers, q_dim 4096, kv_dim 1024, window 4096.
  const ModelConfig m = find_model("mistral-7b");
  ModelConfig full = m;
  full.sliding_window = 0;
  const Precision p = precision_for("fp16", 2, 2);
  // Decode inside the window: identical to full attention.
  const Cost in = forward_cost(m, p, 1, 1, 1000)[int(Op::attention)];
  const Cost in_full = forward_cost(full, p, 1, 1, 1000)[int(Op::attention)];
  EXPECT_DOUBLE_EQ(in.flops, in_full.flops);
  EXPECT_DOUBLE_EQ(in.kv_bytes, in_full.kv_bytes);
  // Decode past the window: 4096 keys whatever the context.
  const Cost far = forward_cost(m, p, 1, 1, 20000)[int(Op::attention)];
  EXPECT_DOUBLE_EQ(far.kv_bytes, 2.0 * 32 * 1024 * 2 * (4096 + 1));
  EXPECT_DOUBLE_EQ(far.model_flops, 4.0 * 32 * 4096 * 4096);
  EXPECT_DOUBLE_EQ(far.flops, forward_cost(m, p, 1, 1, 9000)[int(Op::attention)].flops);
  // Prefill of 6000 tokens: query t sees min(t + 1, 4096) keys.
  const Cost pre = forward_cost(m, p, 1, 6000, 0)[int(Op::attention)];
  const double keys = 4096.0 * 4097 / 2 + 4096.0 * (6000 - 4096);
  const Cost pre_full = forward_cost(full, p, 1, 6000, 0)[int(Op::attention)];
  EXPECT_NEAR(pre.flops / pre_full.flops, keys / (6000.0 * 6001 / 2), 1e-12);
  EXPECT_DOUBLE_EQ(pre.model_flops, 4.0 * 32 * 4096 * 6000 * 4096);
  // Two new tokens at positions 5000 and 5001: together they see keys 905 .. 5001 (4097 rows),
  // read once; 2 rows written.
  const Cost two = forward_cost(m, p, 1, 2, 5000)[int(Op::attention)];
  EXPECT_DOUBLE_EQ(two.kv_bytes, 2.0 * 32 * 1024 * 2 * (2 + 4097));
}

TEST(CostModel, FootprintOfLlama2_7b) {
  const ModelConfig m = find_model("llama-2-7b");
  const Precision p = precision_for("fp16", 2, 2);
  // fp16 everywhere but the fp32 norm weights (65 vectors of 4096).
  EXPECT_DOUBLE_EQ(weight_bytes(m, p), 2.0 * (6738415616.0 - 65 * 4096) + 4.0 * 65 * 4096);
  // KV cache: 2 * 32 layers * 4096 * 2 bytes = 512 KiB per token.
  EXPECT_DOUBLE_EQ(kv_bytes_per_token(m, p), 524288.0);
}

}  // namespace
