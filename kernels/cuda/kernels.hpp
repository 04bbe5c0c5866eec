#pragma once
// CUDA kernels of the CUDA backend, one op per file in kernels/cuda/. Each launcher enqueues its
// kernel on `stream`, checks the launch and names its CPU reference in kernels/cpu/kernels.hpp,
// which is the specification it is tested against (tests/gpu/, and under the CPU emulation
// tests/cuemu/).
//
// Types: activations are fp16 (__half) with fp32 arithmetic inside every kernel; linear weights
// fp16 or int8 with one fp32 scale per output row; the KV cache is fp16; norm weights fp32.
// Nothing here allocates or synchronizes, so every launcher is CUDA-graph capturable.
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

namespace latprof::cuda {

// ---- synthetic weights (cpu::fill_f16 / fill_i8 / fill_f32; bit-identical) ----------------------
void fill_f16(__half* dst, int64_t n, uint64_t key, float amplitude, cudaStream_t stream);
void fill_i8(int8_t* dst, float* scales, int64_t n_out, int64_t n_in, uint64_t key, float amplitude,
             cudaStream_t stream);
void fill_f32(float* dst, int64_t n, uint64_t key, float center, float amplitude,
              cudaStream_t stream);

// ---- embedding (cpu::embed): out[t, :] = table[tokens[t], :]; tokens outside [0, vocab) give 0 --
void embed(const __half* table, int64_t vocab, const int32_t* tokens, int64_t rows, int64_t dim,
           __half* out, cudaStream_t stream);

// ---- RMSNorm (cpu::rmsnorm): x, out [rows, dim]; w [dim] fp32; out may alias x ------------------
void rmsnorm(const __half* x, const float* w, int64_t rows, int64_t dim, float eps, __half* out,
             cudaStream_t stream);

// ---- decode GEMV (cpu::gemv): y[m, n_out] = x[m, n_in] · Wᵀ for m <= kGemvMaxRows ---------------
// Streams every weight byte once with 128-bit loads when n_in is a multiple of 16 (scalar path
// otherwise); fp32 accumulation; the int8 per-row scale is applied after the dot
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

// ---- rotary embedding (cpu::rope, rotate_half): q [rows, n_heads*hd], k [rows, n_kv*hd] -------
// Row r is rotated at positions[r] (device int32 [rows]). In place. inv_freq: host [hd/2] radians
// per position, rope scaling applied (passed by value to the kernel, so a captured graph keeps it).
void rope(__half* q, __half* k, const int32_t* positions, int64_t rows, int n_heads, int n_kv_heads,
          int hd, const double* inv_freq, cudaStream_t stream);

// ---- the paged KV cache and attention (cpu::kv_store_paged + cpu::attention_paged) ----------
// Cache of one layer: rows [num_blocks * block_size, kv_dim] for K and for V; position p of
// sequence s lives in row block_tables[s * max_blocks + p / block_size] * block_size
// + p % block_size.
// Writes k, v [rows, kv_dim] to the cache rows slots[r] (device int32 [rows]; negative: skipped).
void kv_store_paged(const __half* k, const __half* v, const int32_t* slots, int64_t rows,
                    int64_t kv_dim, __half* k_cache, __half* v_cache, cudaStream_t stream);
// A ragged batch of query rows over the paged cache (the engine's step, StepDesc). Launches are
// sized from n_tokens, n_seqs, max_blocks and block_size only; per-step lengths come from the
// device arrays, so a launch captured in a graph replays with new contents.
struct AttnArgs {
  const __half* q = nullptr;        // [n_tokens, n_heads*hd]
  const __half* k_cache = nullptr;  // [num_blocks * block_size, n_kv*hd]
  const __half* v_cache = nullptr;
  __half* out = nullptr;                  // [n_tokens, n_heads*hd]
  const int32_t* query_start = nullptr;   // [n_seqs + 1]: rows of sequence s
  const int32_t* positions = nullptr;     // [n_tokens]: ascending within a sequence
  const int32_t* block_tables = nullptr;  // [n_seqs, max_blocks]
  int64_t n_tokens = 0, n_seqs = 0, max_blocks = 0, block_size = 0;
  int n_heads = 0, n_kv_heads = 0, hd = 0;
  // Sliding window: a query at position p sees keys [p - window + 1, p]; 0: all of [0, p].
  int64_t window = 0;
  __host__ __device__ int64_t max_context() const { return max_blocks * block_size; }
};
inline constexpr int kAttnMaxHeadDim = 256;
// Tiled online-softmax attention for any number of query rows per sequence (prefill chunks,
// mixed steps): grid (tiles of 32 queries of one sequence, heads); never materialises the score
// matrix.
void attention_prefill(const AttnArgs& a, cudaStream_t stream);
// Split-context decode attention: at most one query row per sequence (a sequence with none is
// skipped); the context is cut into kDecodeSplit-key chunks processed by separate blocks (grid
// fixed by max_context(), so it is graph capturable), then reduced. GQA groups up to 8.
inline constexpr int kDecodeSplit = 128;
inline constexpr int kDecodeMaxGroup = 8;
// Floats of scratch the decode kernel needs: partial outputs and (max, sum) per split.
int64_t attention_decode_scratch_floats(int64_t n_seqs, int n_heads, int hd, int64_t max_context);
void attention_decode(const AttnArgs& a, float* scratch, cudaStream_t stream);

// ---- elementwise (cpu::swiglu, cpu::add) --------------------------------------------------------
void swiglu(const __half* gate, const __half* up, int64_t n, __half* out, cudaStream_t stream);
void add(__half* x, const __half* y, int64_t n, cudaStream_t stream);
// out[i, :] = x[rows[i], :] for i < n (rows: device int32 [n]); out must not alias x. CPU
// reference: the CPU backend's gather_rows (a row copy).
void gather_rows(const __half* x, const int32_t* rows, int64_t n, int64_t dim, __half* out,
                 cudaStream_t stream);

// ---- sampling (cpu::argmax): tokens[s] = first index of the largest logit of row s --------------
void argmax(const __half* logits, int64_t n_seq, int64_t vocab, int32_t* tokens,
            cudaStream_t stream);

}  // namespace latprof::cuda
