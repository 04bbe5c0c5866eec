// Embedding lookup. CPU reference: cpu::embed (which widens to fp32; here rows stay fp16, so the
// copy is exact). One block row per token, 128-bit copies when dim is a multiple of 8.
#include "kernels/cuda/common.cuh"

namespace latprof::cuda {

namespace {

template <class Vec>
__global__ void embed_kernel(const Vec* table, int64_t vocab, const int32_t* tokens,
                             int64_t vecs_per_row, Vec* out) {
  const int64_t t = blockIdx.y;
  const int32_t tok = tokens[t];
  const bool valid = tok >= 0 && tok < vocab;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < vecs_per_row;
       i += int64_t(gridDim.x) * blockDim.x) {
    Vec v{};
    if (valid) v = table[tok * vecs_per_row + i];
    out[t * vecs_per_row + i] = v;
  }
}

}  // namespace

void embed(const __half* table, int64_t vocab, const int32_t* tokens, int64_t rows, int64_t dim,
           __half* out, cudaStream_t stream) {
  if (rows <= 0 || dim <= 0) return;
  if (dim % 8 == 0) {
    const int64_t vecs = dim / 8;
    dim3 grid(detail::blocks_for(vecs, 128, 64), unsigned(rows));
    embed_kernel<<<grid, 128, 0, stream>>>(reinterpret_cast<const uint4*>(table), vocab, tokens,
                                           vecs, reinterpret_cast<uint4*>(out));
  } else {
    dim3 grid(detail::blocks_for(dim, 128, 64), unsigned(rows));
    embed_kernel<<<grid, 128, 0, stream>>>(reinterpret_cast<const unsigned short*>(table), vocab,
                                           tokens, dim, reinterpret_cast<unsigned short*>(out));
  }
  LP_CHECK_LAUNCH();
}

}  // namespace latprof::cuda
