// KV-cache store into the paged cache. CPU reference: cpu::kv_store_paged (there fp32 -> fp16;
// here the activations are already fp16, so it is a copy). Row r goes to cache row slots[r]
// (device int32); a negative slot (a padding row) is skipped.
#include "kernels/cuda/common.cuh"

namespace latprof::cuda {

namespace {

__global__ void kv_store_paged_kernel(const __half* k, const __half* v, const int32_t* slots,
                                      int64_t rows, int64_t kv_dim, __half* k_cache,
                                      __half* v_cache) {
  const int64_t n = rows * kv_dim;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / kv_dim, c = i % kv_dim;
    const int64_t slot = slots[r];
    if (slot < 0) continue;
    const int64_t dst = slot * kv_dim + c;
    k_cache[dst] = k[i];
    v_cache[dst] = v[i];
  }
}

}  // namespace

void kv_store_paged(const __half* k, const __half* v, const int32_t* slots, int64_t rows,
                    int64_t kv_dim, __half* k_cache, __half* v_cache, cudaStream_t stream) {
  if (rows <= 0 || kv_dim <= 0) return;
  kv_store_paged_kernel<<<detail::blocks_for(rows * kv_dim, 256), 256, 0, stream>>>(
      k, v, slots, rows, kv_dim, k_cache, v_cache);
  LP_CHECK_LAUNCH();
}

}  // namespace latprof::cuda
