// Decode attention over the paged KV cache (one query row per sequence), split-context ("flash
// decoding"). CPU reference: cpu::attention_paged with one query token per sequence.
//
// Pass 1, grid (splits, kv heads, sequences): block `sp` handles keys [sp*kDecodeSplit, ...) of
// sequence s's context [first, positions[row] + 1) (first > 0 under a sliding window; row =
// query_start[s]) for all the query heads that share one KV head, so every K and V row is read
// from memory once per step (GQA). Key j lives in cache row block_tables[s][j / block_size] *
// block_size + j % block_size. Each of the 4 warps takes 32 keys (lane = key) and forms partial
// (max, sum, P·V); the block merges its warps and writes one partial per (sequence, head, split).
// The grid is sized by max_blocks * block_size, not by the context, so one captured graph serves
// every step: blocks past the context (or before the window) return at once.
// Pass 2, grid (heads, sequences): rescales the valid partials by exp2(m_i - max) and divides.
#include <cmath>

#include "kernels/cuda/common.cuh"

namespace latprof::cuda {

namespace {

constexpr int kWarps = 4;
static_assert(kDecodeSplit == kWarps * 32, "one key per thread per split");

__host__ __device__ inline int64_t n_splits(int64_t max_context) {
  return (max_context + kDecodeSplit - 1) / kDecodeSplit;
}

// The query row of sequence s, or -1 when it has none in this step; its context length and the
// first key its window sees.
struct DecodeSeq {
  int64_t row = -1, len = 0, first = 0;
};
__device__ inline DecodeSeq decode_seq(const AttnArgs& a, int s) {
  DecodeSeq d;
  const int64_t r0 = a.query_start[s];
  if (int64_t(a.query_start[s + 1]) - r0 != 1) return d;
  d.row = r0;
  d.len = int64_t(a.positions[r0]) + 1;
  d.first = a.window > 0 && d.len > a.window ? d.len - a.window : 0;
  return d;
}

// G: query heads per KV head (rounded up to a power of two), DPL: head dims per lane.
template <int G, int DPL>
__global__ void __launch_bounds__(kWarps * 32)
    attn_decode_split_kernel(AttnArgs a, float scale_log2, float* part_o, float* part_ml) {
  constexpr int HDW = 32 * DPL;  // padded head dim
  __shared__ float q_s[G][HDW];
  __shared__ float m_s[kWarps][G], l_s[kWarps][G];
  __shared__ float o_s[kWarps][G][HDW];

  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int sp = blockIdx.x, kvh = blockIdx.y, s = blockIdx.z;
  const int g = a.n_heads / a.n_kv_heads;
  const DecodeSeq ds = decode_seq(a, s);
  const int64_t len = ds.len, first = ds.first;
  const int64_t key0 = int64_t(sp) * kDecodeSplit;
  // Uniform over the block: no query row, or a split past the context or before the window.
  if (ds.row < 0 || key0 >= len || key0 + kDecodeSplit <= first) return;
  const int64_t q_dim = int64_t(a.n_heads) * a.hd, kv_dim = int64_t(a.n_kv_heads) * a.hd;
  const int64_t n_splits_total = n_splits(a.max_context());

  for (int i = threadIdx.x; i < G * HDW; i += blockDim.x) {
    const int hh = i / HDW, d = i % HDW;
    float v = 0.f;
    if (hh < g && d < a.hd)
      v = __half2float(a.q[ds.row * q_dim + int64_t(kvh * g + hh) * a.hd + d]);
    q_s[hh][d] = v * scale_log2;
  }
  __syncthreads();

  const __half* kbase = a.k_cache + int64_t(kvh) * a.hd;
  const __half* vbase = a.v_cache + int64_t(kvh) * a.hd;
  const int32_t* table = a.block_tables + int64_t(s) * a.max_blocks;
  const int64_t wkey0 = key0 + warp * 32;
  const int64_t key = wkey0 + lane;
  const bool valid = key < len && key >= first;
  // This lane's key's cache row; keys outside [first, len) are never read (their blocks may be
  // unassigned, -1).
  const int64_t krow_idx =
      valid ? int64_t(table[key / a.block_size]) * a.block_size + key % a.block_size : 0;

  // Scores of this lane's key for the G query heads.
  float sc[G];
#pragma unroll
  for (int hh = 0; hh < G; ++hh) sc[hh] = 0.f;
  if (valid) {
    const __half2* krow = reinterpret_cast<const __half2*>(kbase + krow_idx * kv_dim);
    for (int d = 0; d < a.hd; d += 2) {
      const float2 kf = __half22float2(krow[d / 2]);
#pragma unroll
      for (int hh = 0; hh < G; ++hh)
        sc[hh] = fmaf(q_s[hh][d], kf.x, fmaf(q_s[hh][d + 1], kf.y, sc[hh]));
    }
  }
  float m[G], p[G], l[G];
#pragma unroll
  for (int hh = 0; hh < G; ++hh) {
    const float sv = valid ? sc[hh] : -INFINITY;
    m[hh] = fmaxf(-1e30f, detail::warp_max(sv));
    p[hh] = exp2f(sv - m[hh]);
    l[hh] = detail::warp_sum(p[hh]);
  }
  // P·V: lane owns dims lane*DPL ..; keys of the warp broadcast their probabilities by shuffle.
  float o[G][DPL];
#pragma unroll
  for (int hh = 0; hh < G; ++hh)
#pragma unroll
    for (int dd = 0; dd < DPL; ++dd) o[hh][dd] = 0.f;
  // Keys [wkey0 + j_first, wkey0 + n_valid) of this warp are valid (the range may be empty).
  const int64_t n_valid = len - wkey0 < 32 ? len - wkey0 : 32;
  const int64_t j_first = first > wkey0 ? first - wkey0 : 0;
  const bool lane_dims = lane * DPL < a.hd;
  for (int64_t j = j_first; j < n_valid; ++j) {  // uniform over the warp
    float pj[G];
#pragma unroll
    for (int hh = 0; hh < G; ++hh) pj[hh] = __shfl_sync(0xffffffffu, p[hh], int(j));
    const int64_t vrow = __shfl_sync(0xffffffffu, krow_idx, int(j));
    if (!lane_dims) continue;
    const __half2* vp = reinterpret_cast<const __half2*>(vbase + vrow * kv_dim + lane * DPL);
#pragma unroll
    for (int dd = 0; dd < DPL; dd += 2) {
      const float2 vf = __half22float2(vp[dd / 2]);
#pragma unroll
      for (int hh = 0; hh < G; ++hh) {
        o[hh][dd] = fmaf(pj[hh], vf.x, o[hh][dd]);
        o[hh][dd + 1] = fmaf(pj[hh], vf.y, o[hh][dd + 1]);
      }
    }
  }
#pragma unroll
  for (int hh = 0; hh < G; ++hh) {
    if (lane == 0) {
      m_s[warp][hh] = m[hh];
      l_s[warp][hh] = l[hh];
    }
#pragma unroll
    for (int dd = 0; dd < DPL; ++dd) o_s[warp][hh][lane * DPL + dd] = o[hh][dd];
  }
  __syncthreads();
  // Merge the warps: thread i handles (head, dim) pairs.
  for (int i = threadIdx.x; i < g * HDW; i += blockDim.x) {
    const int hh = i / HDW, d = i % HDW;
    float mx = -1e30f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) mx = fmaxf(mx, m_s[w][hh]);
    float ov = 0.f, lv = 0.f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      const float c = exp2f(m_s[w][hh] - mx);
      ov += c * o_s[w][hh][d];
      lv += c * l_s[w][hh];
    }
    const int64_t idx = (int64_t(s) * a.n_heads + kvh * g + hh) * n_splits_total + sp;
    if (d < a.hd) part_o[idx * a.hd + d] = ov;
    if (d == 0) {
      part_ml[2 * idx] = mx;
      part_ml[2 * idx + 1] = lv;
    }
  }
}

__global__ void attn_decode_reduce_kernel(AttnArgs a, const float* part_o, const float* part_ml) {
  const int h = blockIdx.x, s = blockIdx.y;
  const DecodeSeq ds = decode_seq(a, s);
  if (ds.row < 0) return;
  const int64_t split0 = ds.first / kDecodeSplit;  // splits [split0, valid) wrote partials
  const int64_t valid = (ds.len + kDecodeSplit - 1) / kDecodeSplit;
  const int64_t n_splits_total = n_splits(a.max_context());
  const int64_t base = (int64_t(s) * a.n_heads + h) * n_splits_total;
  float mx = -1e30f;
  for (int64_t i = split0; i < valid; ++i) mx = fmaxf(mx, part_ml[2 * (base + i)]);
  float lsum = 0.f;
  for (int64_t i = split0; i < valid; ++i)
    lsum += exp2f(part_ml[2 * (base + i)] - mx) * part_ml[2 * (base + i) + 1];
  const float inv = 1.f / lsum;
  __half* orow = a.out + ds.row * a.n_heads * a.hd + int64_t(h) * a.hd;
  for (int d = threadIdx.x; d < a.hd; d += blockDim.x) {
    float acc = 0.f;
    for (int64_t i = split0; i < valid; ++i)
      acc += exp2f(part_ml[2 * (base + i)] - mx) * part_o[(base + i) * a.hd + d];
    orow[d] = __float2half_rn(acc * inv);
  }
}

template <int G, int DPL>
void launch_split(const AttnArgs& a, float scale_log2, float* part_o, float* part_ml,
                  cudaStream_t stream) {
  const dim3 grid(unsigned(n_splits(a.max_context())), unsigned(a.n_kv_heads), unsigned(a.n_seqs));
  attn_decode_split_kernel<G, DPL>
      <<<grid, kWarps * 32, 0, stream>>>(a, scale_log2, part_o, part_ml);
}

template <int G>
void launch_split_g(const AttnArgs& a, float scale_log2, float* part_o, float* part_ml,
                    cudaStream_t stream) {
  if (a.hd <= 64)
    launch_split<G, 2>(a, scale_log2, part_o, part_ml, stream);
  else if (a.hd <= 128)
    launch_split<G, 4>(a, scale_log2, part_o, part_ml, stream);
  else
    launch_split<G, 8>(a, scale_log2, part_o, part_ml, stream);
}

}  // namespace

int64_t attention_decode_scratch_floats(int64_t n_seqs, int n_heads, int hd, int64_t max_context) {
  return n_seqs * n_heads * n_splits(max_context) * (int64_t(hd) + 2);
}

void attention_decode(const AttnArgs& a, float* scratch, cudaStream_t stream) {
  LATPROF_ASSERT(a.hd % 2 == 0 && a.hd <= kAttnMaxHeadDim, "head_dim must be even and <= 256");
  LATPROF_ASSERT(a.n_kv_heads > 0 && a.n_heads % a.n_kv_heads == 0, "n_heads % n_kv_heads != 0");
  const int g = a.n_heads / a.n_kv_heads;
  LATPROF_ASSERT(g <= kDecodeMaxGroup, "at most 8 query heads per KV head");
  LATPROF_ASSERT(a.block_size > 0 && a.max_blocks > 0, "the paged cache needs a block size");
  if (a.n_seqs <= 0) return;
  const int64_t parts = a.n_seqs * a.n_heads * n_splits(a.max_context());
  float* part_o = scratch;
  float* part_ml = scratch + parts * a.hd;
  const float scale_log2 = float(1.0 / std::sqrt(double(a.hd)) * 1.4426950408889634);
  if (g == 1)
    launch_split_g<1>(a, scale_log2, part_o, part_ml, stream);
  else if (g == 2)
    launch_split_g<2>(a, scale_log2, part_o, part_ml, stream);
  else if (g <= 4)
    launch_split_g<4>(a, scale_log2, part_o, part_ml, stream);
  else
    launch_split_g<8>(a, scale_log2, part_o, part_ml, stream);
  LP_CHECK_LAUNCH();
  attn_decode_reduce_kernel<<<dim3(unsigned(a.n_heads), unsigned(a.n_seqs)), 128, 0, stream>>>(
      a, part_o, part_ml);
  LP_CHECK_LAUNCH();
}

}  // namespace latprof::cuda
