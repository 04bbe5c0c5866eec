// KV-cache append. CPU reference: cpu::kv_store (there fp32 -> fp16; here the activations are
// already fp16, so it is a copy). Positions come from the device scalar *pos.
#include "kernels/cuda/common.cuh"

namespace latprof::cuda {

namespace {

__global__ void kv_store_kernel(const __half* k, const __half* v, int64_t n_new, int64_t rows,
                                const int32_t* pos, int64_t ctx_cap, int64_t kv_dim,
                                __half* k_cache, __half* v_cache) {
  const int64_t n = rows * kv_dim;
  const int64_t pos0 = *pos;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / kv_dim, c = i % kv_dim;
    const int64_t s = r / n_new, t = r % n_new;
    const int64_t dst = (s * ctx_cap + pos0 + t) * kv_dim + c;
    k_cache[dst] = k[i];
    v_cache[dst] = v[i];
  }
}

}  // namespace

void kv_store(const __half* k, const __half* v, int64_t n_seq, int64_t n_new, const int32_t* pos,
              int64_t ctx_cap, int64_t kv_dim, __half* k_cache, __half* v_cache,
              cudaStream_t stream) {
  const int64_t rows = n_seq * n_new;
  if (rows <= 0 || kv_dim <= 0) return;
  kv_store_kernel<<<detail::blocks_for(rows * kv_dim, 256), 256, 0, stream>>>(
      k, v, n_new, rows, pos, ctx_cap, kv_dim, k_cache, v_cache);
  LP_CHECK_LAUNCH();
}

}  // namespace latprof::cuda
