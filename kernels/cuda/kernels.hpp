#pragma once
// CUDA kernels of the CUDA backend, one op per file in kernels/cuda/. Each launcher enqueues its
// kernel on `stream`, checks the launch and names its CPU reference in kernels/cpu/kernels.hpp,
// which is the specification it is tested against (tests/gpu/).
//
// Types: activations are fp16 (__half) with fp32 arithmetic inside every kernel; linear weights
// fp16 or int8 with one fp32 scale per output row; the KV cache is fp16; norm weights fp32.
// Nothing here allocates or synchronizes, so every launcher is CUDA-graph capturable.
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

namespace latprof::cuda {

// ---- synthetic weights (cpu::fill_f16 / fill_i8 / fill_f32; bit-identical)
// -----------------------
void fill_f16(__half* dst, int64_t n, uint64_t key, float amplitude, cudaStream_t stream);
void fill_i8(int8_t* dst, float* scales, int64_t n_out, int64_t n_in, uint64_t key, float amplitude,
             cudaStream_t stream);
void fill_f32(float* dst, int64_t n, uint64_t key, float center, float amplitude,
              cudaStream_t stream);

// ---- embedding (cpu::embed): out[t, :] = table[tokens[t], :]; tokens outside [0, vocab) give 0 --
void embed(const __half* table, int64_t vocab, const int32_t* tokens, int64_t rows, int64_t dim,
           __half* out, cudaStream_t stream);

// ---- RMSNorm (cpu::rmsnorm): x, out [rows, dim]; w [dim] fp32; out may alias x
// ---------------------
void rmsnorm(const __half* x, const float* w, int64_t rows, int64_t dim, float eps, __half* out,
             cudaStream_t stream);

// ---- decode GEMV (cpu::gemv): y[m, n_out] = x[m, n_in] · Wᵀ for m <= kGemvMaxRows
// ------------------ Streams every weight byte once with 128-bit loads when n_in is a multiple of
// 16 (scalar path otherwise); fp32 accumulation; the int8 per-row scale is applied after the dot
// product.
inline constexpr int kGemvMaxRows = 8;
void gemv_f16(const __half* w, const __half* x, int64_t m, int64_t n_out, int64_t n_in, __half* y,
              cudaStream_t stream);
void gemv_i8(const int8_t* w, const float* scales, const __half* x, int64_t m, int64_t n_out,
             int64_t n_in, __half* y, cudaStream_t stream);
// out[r, i] = half(w[r, i] * scales[r]): INT8 prefill weights for the FP16 tensor-core GEMM.
void dequantize_i8(const int8_t* w, const float* scales, int64_t n_out, int64_t n_in, __half* out,
                   cudaStream_t stream);

// Portable CUDA-core GEMM (any shape, fp16 or int8 weights) for shapes cuBLASLt rejects.
void gemm_fallback(const void* w, const float* scales, bool int8, const __half* x, int64_t m,
                   int64_t n_out, int64_t n_in, __half* y, cudaStream_t stream);

// ---- rotary embedding (cpu::rope, rotate_half): q [rows, n_heads*hd], k [rows, n_kv*hd]
// ----------- Row r has position *pos + r % n_new (pos: device int32 scalar). In place.
// inv_freq: host [hd/2] radians per position, rope scaling applied (passed by value to the kernel,
// so a captured graph keeps it).
void rope(__half* q, __half* k, int64_t rows, int64_t n_new, const int32_t* pos, int n_heads,
          int n_kv_heads, int hd, const double* inv_freq, cudaStream_t stream);

// ---- attention (cpu::kv_store + cpu::attention) ------------------------------------------------
struct AttnArgs {
  const __half* q = nullptr;        // [n_seq*n_new, n_heads*hd]
  const __half* k_cache = nullptr;  // [n_seq, ctx_cap, n_kv*hd]
  const __half* v_cache = nullptr;
  __half* out = nullptr;         // [n_seq*n_new, n_heads*hd]
  const int32_t* pos = nullptr;  // device scalar: position of the first new token
  int64_t n_seq = 0, n_new = 0, ctx_cap = 0;
  int n_heads = 0, n_kv_heads = 0, hd = 0;
  int64_t window =
      0;  // sliding window: a query at position p sees keys [p - window + 1, p]; 0: none
};
// Writes k, v [n_seq*n_new, kv_dim] into the caches at positions *pos .. *pos + n_new - 1.
void kv_store(const __half* k, const __half* v, int64_t n_seq, int64_t n_new, const int32_t* pos,
              int64_t ctx_cap, int64_t kv_dim, __half* k_cache, __half* v_cache,
              cudaStream_t stream);
inline constexpr int kAttnMaxHeadDim = 256;
// Tiled online-softmax attention for any n_new (prefill): never materialises the score matrix.
void attention_prefill(const AttnArgs& a, cudaStream_t stream);
// Split-context decode attention (n_new == 1): the context is cut into kDecodeSplit-key chunks
// processed by separate blocks (grid fixed by ctx_cap, so it is graph capturable), then reduced.
inline constexpr int kDecodeSplit = 128;
// Floats of scratch the decode kernel needs: partial outputs and (max, sum) per split.
int64_t attention_decode_scratch_floats(int64_t n_seq, int n_heads, int hd, int64_t ctx_cap);
void attention_decode(const AttnArgs& a, float* scratch, cudaStream_t stream);

// ---- elementwise (cpu::swiglu, cpu::add)
// -----------------------------------------------------------
void swiglu(const __half* gate, const __half* up, int64_t n, __half* out, cudaStream_t stream);
void add(__half* x, const __half* y, int64_t n, cudaStream_t stream);
// out[s, :] = x[(s + 1) * n_new - 1, :]; out may alias x.
void gather_last(const __half* x, int64_t n_seq, int64_t n_new, int64_t dim, __half* out,
                 cudaStream_t stream);

// ---- sampling (cpu::argmax): tokens[s] = first index of the largest logit of row s
// ---------------
void argmax(const __half* logits, int64_t n_seq, int64_t vocab, int32_t* tokens,
            cudaStream_t stream);

}  // namespace latprof::cuda
