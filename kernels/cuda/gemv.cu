// Decode GEMV, W16A16 and W8A16: y[m, n_out] = x[m, n_in] · Wᵀ for m <= 8 tokens.
// CPU reference: cpu::gemv.
//
// Decode is memory bound: the whole cost is streaming W once. Each warp owns kRowsPerWarp output
// rows; its lanes walk the rows in 16-element chunks with 128-bit loads (two for fp16, one for
// int8), marked evict-first (__ldcs) because no weight byte is reused within a step, and unrolled
// so that several loads are in flight per lane. All m tokens are served from the same weight
// registers, so W is read exactly once for the m rows. Activations are converted to fp32 once per
// chunk and shared by the warp's rows. Products accumulate in fp32, the warp reduces with shuffles,
// and for int8 the per-row scale multiplies the finished dot product.
//
// int8 -> fp32 without I2F: byte b becomes (b ^ 0x80) in the low mantissa bits of 2^23 (one PRMT),
// and subtracting 2^23 + 128 gives b exactly (one FADD); the I2F pipe is too narrow for 4.8 TB/s.
#include "kernels/cuda/common.cuh"

namespace latprof::cuda {

namespace {

constexpr int kRowsPerWarp = 2;
constexpr int kWarpsPerBlock = 4;
constexpr int kChunk = 16;  // weight elements per lane per step

__device__ __forceinline__ void half8_to_float(const uint4& v, float* f) {
  const __half2* h = reinterpret_cast<const __half2*>(&v);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 p = __half22float2(h[i]);
    f[2 * i] = p.x;
    f[2 * i + 1] = p.y;
  }
}

__device__ __forceinline__ void i8x4_to_float(uint32_t v, float* f) {
  const uint32_t u = v ^ 0x80808080u;  // int8 -> uint8 + 128
#pragma unroll
  for (int k = 0; k < 4; ++k)
    f[k] = __uint_as_float(__byte_perm(u, 0x4B000000u, 0x7540u | unsigned(k))) - 8388736.0f;
}

// Weight chunk of 16 elements as fp32 (from 32 bytes fp16 or 16 bytes int8).
template <bool kInt8>
struct Chunk;
template <>
struct Chunk<false> {
  uint4 a, b;
  __device__ __forceinline__ void load(const void* row, int64_t c) {
    const uint4* p = reinterpret_cast<const uint4*>(row) + 2 * c;
    a = __ldcs(p);
    b = __ldcs(p + 1);
  }
  __device__ __forceinline__ void to_float(float* f) const {
    half8_to_float(a, f);
    half8_to_float(b, f + 8);
  }
};
template <>
struct Chunk<true> {
  uint4 a;
  __device__ __forceinline__ void load(const void* row, int64_t c) {
    a = __ldcs(reinterpret_cast<const uint4*>(row) + c);
  }
  __device__ __forceinline__ void to_float(float* f) const {
    i8x4_to_float(a.x, f);
    i8x4_to_float(a.y, f + 4);
    i8x4_to_float(a.z, f + 8);
    i8x4_to_float(a.w, f + 12);
  }
};

// Vector path: n_in % 16 == 0 (so every row and every x row is 16-byte aligned).
template <bool kInt8, int M>
__global__ void __launch_bounds__(kWarpsPerBlock * 32)
    gemv_vec_kernel(const void* __restrict__ w, const float* __restrict__ scales,
                    const __half* __restrict__ x, int64_t n_out, int64_t n_in,
                    __half* __restrict__ y) {
  constexpr int kUnroll = 2;
  const int lane = threadIdx.x & 31;
  const int64_t warp = blockIdx.x * int64_t(kWarpsPerBlock) + (threadIdx.x >> 5);
  const int64_t row0 = warp * kRowsPerWarp;
  if (row0 >= n_out) return;
  const int64_t elem_bytes = kInt8 ? 1 : 2;
  const char* rows[kRowsPerWarp];
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    const int64_t row = row0 + r < n_out ? row0 + r : n_out - 1;  // duplicate, never stored
    rows[r] = static_cast<const char*>(w) + row * n_in * elem_bytes;
  }
  float acc[M][kRowsPerWarp];
#pragma unroll
  for (int t = 0; t < M; ++t)
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) acc[t][r] = 0.f;

  const int64_t chunks = n_in / kChunk;
  for (int64_t c0 = lane; c0 < chunks; c0 += 32 * kUnroll) {
    Chunk<kInt8> wc[kUnroll][kRowsPerWarp];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)
#pragma unroll
      for (int r = 0; r < kRowsPerWarp; ++r)
        if (c0 + 32 * u < chunks) wc[u][r].load(rows[r], c0 + 32 * u);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t c = c0 + 32 * u;
      if (c >= chunks) break;
      float wf[kRowsPerWarp][kChunk];
#pragma unroll
      for (int r = 0; r < kRowsPerWarp; ++r) wc[u][r].to_float(wf[r]);
#pragma unroll
      for (int t = 0; t < M; ++t) {
        const uint4* xp = reinterpret_cast<const uint4*>(x + t * n_in) + 2 * c;
        float xf[kChunk];
        half8_to_float(xp[0], xf);
        half8_to_float(xp[1], xf + 8);
#pragma unroll
        for (int r = 0; r < kRowsPerWarp; ++r)
#pragma unroll
          for (int i = 0; i < kChunk; ++i) acc[t][r] = fmaf(wf[r][i], xf[i], acc[t][r]);
      }
    }
  }
#pragma unroll
  for (int t = 0; t < M; ++t)
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) {
      const float s = detail::warp_sum(acc[t][r]);
      const int64_t row = row0 + r;
      if (lane == 0 && row < n_out)
        y[t * n_out + row] = __float2half_rn(kInt8 ? s * scales[row] : s);
    }
}

// Scalar path for any n_in (odd sizes in tests, unusual models): one warp per output row.
template <bool kInt8>
__global__ void gemv_scalar_kernel(const void* __restrict__ w, const float* __restrict__ scales,
                                   const __half* __restrict__ x, int64_t m, int64_t n_out,
                                   int64_t n_in, __half* __restrict__ y) {
  const int lane = threadIdx.x & 31;
  const int64_t row = blockIdx.x * int64_t(kWarpsPerBlock) + (threadIdx.x >> 5);
  if (row >= n_out) return;
  float acc[kGemvMaxRows] = {};
  for (int64_t i = lane; i < n_in; i += 32) {
    const float wv = kInt8 ? float(static_cast<const int8_t*>(w)[row * n_in + i])
                           : __half2float(static_cast<const __half*>(w)[row * n_in + i]);
#pragma unroll
    for (int t = 0; t < kGemvMaxRows; ++t)
      if (t < m) acc[t] = fmaf(wv, __half2float(x[t * n_in + i]), acc[t]);
  }
#pragma unroll
  for (int t = 0; t < kGemvMaxRows; ++t) {
    if (t >= m) break;
    const float s = detail::warp_sum(acc[t]);
    if (lane == 0) y[t * n_out + row] = __float2half_rn(kInt8 ? s * scales[row] : s);
  }
}

template <bool kInt8, int M>
void launch_vec(const void* w, const float* scales, const __half* x, int64_t n_out, int64_t n_in,
                __half* y, cudaStream_t stream) {
  const int64_t warps = (n_out + kRowsPerWarp - 1) / kRowsPerWarp;
  const unsigned blocks = unsigned((warps + kWarpsPerBlock - 1) / kWarpsPerBlock);
  gemv_vec_kernel<kInt8, M>
      <<<blocks, kWarpsPerBlock * 32, 0, stream>>>(w, scales, x, n_out, n_in, y);
}

template <bool kInt8>
void gemv(const void* w, const float* scales, const __half* x, int64_t m, int64_t n_out,
          int64_t n_in, __half* y, cudaStream_t stream) {
  LATPROF_ASSERT(m >= 1 && m <= kGemvMaxRows, "gemv serves 1..8 rows");
  if (n_out <= 0) return;
  const bool aligned = n_in % kChunk == 0 && (reinterpret_cast<uintptr_t>(w) % 16) == 0 &&
                       (reinterpret_cast<uintptr_t>(x) % 16) == 0;
  if (aligned && n_in > 0) {
    switch (m) {
      case 1:
        launch_vec<kInt8, 1>(w, scales, x, n_out, n_in, y, stream);
        break;
      case 2:
        launch_vec<kInt8, 2>(w, scales, x, n_out, n_in, y, stream);
        break;
      case 3:
        launch_vec<kInt8, 3>(w, scales, x, n_out, n_in, y, stream);
        break;
      case 4:
        launch_vec<kInt8, 4>(w, scales, x, n_out, n_in, y, stream);
        break;
      case 5:
        launch_vec<kInt8, 5>(w, scales, x, n_out, n_in, y, stream);
        break;
      case 6:
        launch_vec<kInt8, 6>(w, scales, x, n_out, n_in, y, stream);
        break;
      case 7:
        launch_vec<kInt8, 7>(w, scales, x, n_out, n_in, y, stream);
        break;
      default:
        launch_vec<kInt8, 8>(w, scales, x, n_out, n_in, y, stream);
        break;
    }
  } else {
    const unsigned blocks = unsigned((n_out + kWarpsPerBlock - 1) / kWarpsPerBlock);
    gemv_scalar_kernel<kInt8>
        <<<blocks, kWarpsPerBlock * 32, 0, stream>>>(w, scales, x, m, n_out, n_in, y);
  }
  LP_CHECK_LAUNCH();
}

__global__ void dequantize_kernel(const int8_t* w, const float* scales, int64_t n_out, int64_t n_in,
                                  __half* out) {
  const int64_t n = n_out * n_in;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    out[i] = __float2half_rn(float(w[i]) * scales[i / n_in]);
}

// 16 elements per thread, one row per blockIdx.y: n_in % 16 == 0.
__global__ void dequantize16_kernel(const uint4* w, const float* scales, int64_t chunks_per_row,
                                    uint4* out) {
  const int64_t r = blockIdx.y;
  const float s = scales[r];
  for (int64_t c = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; c < chunks_per_row;
       c += int64_t(gridDim.x) * blockDim.x) {
    const uint4 q = __ldcs(w + r * chunks_per_row + c);
    float f[16];
    i8x4_to_float(q.x, f);
    i8x4_to_float(q.y, f + 4);
    i8x4_to_float(q.z, f + 8);
    i8x4_to_float(q.w, f + 12);
    uint4 h[2];
    __half2* hp = reinterpret_cast<__half2*>(h);
#pragma unroll
    for (int i = 0; i < 8; ++i) hp[i] = __floats2half2_rn(f[2 * i] * s, f[2 * i + 1] * s);
    out[(r * chunks_per_row + c) * 2] = h[0];
    out[(r * chunks_per_row + c) * 2 + 1] = h[1];
  }
}

}  // namespace

void gemv_f16(const __half* w, const __half* x, int64_t m, int64_t n_out, int64_t n_in, __half* y,
              cudaStream_t stream) {
  gemv<false>(w, nullptr, x, m, n_out, n_in, y, stream);
}

void gemv_i8(const int8_t* w, const float* scales, const __half* x, int64_t m, int64_t n_out,
             int64_t n_in, __half* y, cudaStream_t stream) {
  gemv<true>(w, scales, x, m, n_out, n_in, y, stream);
}

void dequantize_i8(const int8_t* w, const float* scales, int64_t n_out, int64_t n_in, __half* out,
                   cudaStream_t stream) {
  if (n_out <= 0 || n_in <= 0) return;
  if (n_in % 16 == 0 && n_out <= 65535) {
    const int64_t chunks = n_in / 16;
    dim3 grid(detail::blocks_for(chunks, 128, 64), unsigned(n_out));
    dequantize16_kernel<<<grid, 128, 0, stream>>>(reinterpret_cast<const uint4*>(w), scales, chunks,
                                                  reinterpret_cast<uint4*>(out));
  } else {
    dequantize_kernel<<<detail::blocks_for(n_out * n_in, 256), 256, 0, stream>>>(w, scales, n_out,
                                                                                 n_in, out);
  }
  LP_CHECK_LAUNCH();
}

}  // namespace latprof::cuda
