#pragma once
// The cost model, written once: FLOPs and bytes moved by every operation of a Llama forward pass.
// The runner attaches these to measured times, the roofline analyzer divides them by ceilings,
// and the reporters only print them.
//
// Bytes are the fewest a perfect implementation must move through main memory: each weight read
// once per forward pass (whatever the number of tokens), activations read and written once per
// op, the KV cache read once per sequence and KV head. FLOPs are counted two ways:
//  - executed: what the kernels do (causal attention touches only the lower triangle);
//  - model: the MFU convention (2 x matmul parameters per token plus the full, non-causal
//    attention term 4 * n_layers * q_dim * context per token).
// With a sliding window W, each query counts at most W keys, and the cache is read only as far
// back as the new tokens see.
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "model/config.hpp"

namespace latprof {

// Storage of linear-layer weights, activations and the KV cache.
enum class WeightFormat { f16, int8_w8a16, int8_w8a8 };

struct Precision {
  WeightFormat weights = WeightFormat::f16;
  int weight_bytes = 2;       // per linear-layer weight element
  int scale_bytes = 0;        // per output channel (fp32 scale for int8)
  int act_bytes = 4;          // per activation element (CPU backend: fp32)
  int kv_bytes = 2;           // per KV-cache element
  int kv_scale_bytes = 0;     // per position and kv head, K and V each (int8 cache: fp32 scale)
  bool kv_bf16 = false;       // the KV cache is bf16 (its attention's roof: Ceilings::peak_for)
  int embed_bytes = 2;        // per embedding-table element (always fp16 in latprof)
  int norm_weight_bytes = 4;  // norm weights are kept in fp32
  std::string name() const;   // "fp16", "int8" (W8A16), "int8-w8a8"
};
// dtype as the CLI spells it ("fp16", "int8", "int8-w8a8"), activations and KV as given.
Precision precision_for(const std::string& dtype, int act_bytes, int kv_bytes);

enum class Op : int {
  embed = 0,
  norm,
  qkv_proj,
  rope,
  attention,  // KV-cache write + scores + softmax + weighted sum
  o_proj,
  residual,
  mlp_gate_up,
  swiglu,
  mlp_down,
  lm_head,
  sample,
  count
};
inline constexpr int kNumOps = static_cast<int>(Op::count);
const char* op_name(Op op);
Op op_from_name(const std::string& name);  // throws UsageError
// Ops whose FLOPs run on the matrix units (the INT8 peak applies to these in W8A8).
bool op_is_matmul(Op op);

struct Cost {
  double flops = 0;        // executed FLOPs
  double model_flops = 0;  // MFU-convention FLOPs
  double weight_bytes = 0;
  double act_bytes = 0;  // activations read + written
  double kv_bytes = 0;   // KV cache read + written
  double bytes() const { return weight_bytes + act_bytes + kv_bytes; }
  double intensity() const { return bytes() > 0 ? flops / bytes() : 0; }
  Cost& operator+=(const Cost& o);
};
Cost operator+(Cost a, const Cost& b);
Cost operator*(Cost a, double k);

using OpCosts = std::array<Cost, kNumOps>;
Cost total(const OpCosts& ops);

// One engine step: sequences that each append n_new tokens after `past` cached ones, in one
// forward pass (each weight read once for the whole step; per-token and per-sequence terms add).
struct StepSeq {
  int64_t n_new = 0;
  int64_t past = 0;
  bool logits = true;  // its last token goes through the final norm and LM head (false: a chunk
                       // of a prompt before its last, which samples nothing)
};
OpCosts step_cost(const ModelConfig& m, const Precision& p, const std::vector<StepSeq>& seqs);

// One forward pass over n_seq sequences that each append n_new tokens after `ctx0` cached ones.
// Prefill: n_new = prompt length, ctx0 = 0. Decode step: n_new = 1, ctx0 = tokens so far.
// logits_rows_per_seq: how many positions per sequence go through the final norm and LM head
// (1: only the last, as serving engines do; 0: none, and then the LM head's and the final norm's
// weights are not read).
OpCosts forward_cost(const ModelConfig& m, const Precision& p, int64_t n_seq, int64_t n_new,
                     int64_t ctx0, int64_t logits_rows_per_seq = 1);
// Sampling n_seq tokens from [n_seq, vocab] logits.
Cost sample_cost(const ModelConfig& m, const Precision& p, int64_t n_seq);
// All decode steps after prefill: steps k = 0..n_steps-1 run at ctx0 = prompt + k.
OpCosts decode_cost(const ModelConfig& m, const Precision& p, int64_t n_seq, int64_t prompt,
                    int64_t n_steps);

// Memory footprint.
double weight_bytes(const ModelConfig& m, const Precision& p);  // all weights, as stored
double kv_cache_bytes(const ModelConfig& m, const Precision& p, int64_t n_seq, int64_t ctx);
// KV bytes one token adds (all layers, K and V).
double kv_bytes_per_token(const ModelConfig& m, const Precision& p);
// Bytes of one position's K (or V) in one layer: kv_dim elements and the scales.
double kv_row_bytes(const ModelConfig& m, const Precision& p);

}  // namespace latprof
