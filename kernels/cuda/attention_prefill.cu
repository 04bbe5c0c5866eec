// Causal GQA attention of a ragged batch of query rows over the paged KV cache (prefill chunks,
// mixed steps), flash-attention style. CPU reference: cpu::attention_paged (scale 1/sqrt(hd); the
// row at position p of a sequence attends to its positions [0, p], or to the last `window` of
// them under a sliding window).
//
// Grid: (query tiles, query heads); a tile is kBQ consecutive query rows of one sequence, and
// the grid holds an upper bound of the step's tiles, (n_tokens + n_seqs * (kBQ - 1)) / kBQ, so
// it is sized from n_tokens and n_seqs only; block x finds its (sequence, tile) from query_start
// and blocks past the last tile return. 4 warps, each owning kQPW queries. The block walks the
// sequence's keys in tiles of kBK staged in shared memory (each key's cache row looked up in the
// block table; K rows padded by one word so that 32 lanes reading 32 different rows hit 32
// banks). Per tile a warp computes the
// kQPW x kBK scores (lane = key), updates the running max and sum of its queries (online softmax
// in base 2, the scale folded into Q), and accumulates P·V with lanes owning head dimensions.
// Only one kQPW x kBK tile of probabilities per warp ever exists: the n x n matrix is never
// formed. Arithmetic is fp32 on CUDA cores; a tensor-core (mma) version is future work.
#include <cmath>

#include "kernels/cuda/common.cuh"

namespace latprof::cuda {

namespace {

constexpr int kWarps = 4;
constexpr int kQPW = 8;  // queries per warp
constexpr int kBQ = kWarps * kQPW;
constexpr int kBK = 32;                              // keys per tile (one per lane)
constexpr size_t kStaticSmem = 2 * sizeof(int64_t);  // the kernel's static shared memory

__host__ __device__ constexpr int round4(int x) {
  return (x + 3) / 4 * 4;
}

struct PrefillSmem {
  int hdp;       // head dim rounded up to 4 (zero padded)
  int k_words;   // K row stride in 32-bit words (odd: conflict-free)
  int v_stride;  // V row stride in halves (32 * DPL, zero padded)
  __host__ __device__ size_t q_bytes() const { return size_t(kBQ) * hdp * 4; }
  __host__ __device__ size_t k_bytes() const { return size_t(kBK) * k_words * 4; }
  __host__ __device__ size_t v_bytes() const { return size_t(kBK) * v_stride * 2; }
  __host__ __device__ size_t p_bytes() const { return size_t(kWarps) * kQPW * kBK * 4; }
  __host__ __device__ size_t total() const { return q_bytes() + k_bytes() + v_bytes() + p_bytes(); }
};

__host__ __device__ inline PrefillSmem prefill_smem(int hd, int dpl) {
  PrefillSmem s;
  s.hdp = round4(hd);
  s.k_words = s.hdp / 2 + 1;
  s.v_stride = 32 * dpl;
  return s;
}

template <int DPL>
__global__ void __launch_bounds__(kWarps * 32) attn_prefill_kernel(AttnArgs a, float scale_log2) {
  extern __shared__ float4 smem_raw[];
  const PrefillSmem L = prefill_smem(a.hd, DPL);
  float* Qs = reinterpret_cast<float*>(smem_raw);  // [kBQ][hdp]
  uint32_t* Ks = reinterpret_cast<uint32_t*>(reinterpret_cast<char*>(Qs) + L.q_bytes());
  __half* Vs = reinterpret_cast<__half*>(reinterpret_cast<char*>(Ks) + L.k_bytes());
  float* Ps = reinterpret_cast<float*>(reinterpret_cast<char*>(Vs) + L.v_bytes());  // [w][q][k]

  __shared__ int64_t tile_s[2];  // the block's sequence and first query row (-1: none)

  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int h = blockIdx.y;
  const int kvh = h / (a.n_heads / a.n_kv_heads);
  if (threadIdx.x == 0) {
    // Tiles of sequence s: ceil(n_s / kBQ); block x is tile x of the step, counted in sequence
    // order.
    int64_t x = blockIdx.x, seq = -1, row0 = 0;
    for (int64_t si = 0; si < a.n_seqs; ++si) {
      const int64_t r0 = a.query_start[si], n = int64_t(a.query_start[si + 1]) - r0;
      const int64_t tiles = (n + kBQ - 1) / kBQ;
      if (x < tiles) {
        seq = si;
        row0 = r0 + x * kBQ;
        break;
      }
      x -= tiles;
    }
    tile_s[0] = seq;
    tile_s[1] = row0;
  }
  __syncthreads();
  const int64_t s = tile_s[0];
  if (s < 0) return;                               // uniform over the block: past the step's tiles
  const int64_t t0 = tile_s[1];                    // first query row of the tile
  const int64_t t_seq_end = a.query_start[s + 1];  // end of the sequence's rows
  const int64_t t_end = t0 + kBQ < t_seq_end ? t0 + kBQ : t_seq_end;
  const int64_t q_dim = int64_t(a.n_heads) * a.hd, kv_dim = int64_t(a.n_kv_heads) * a.hd;
  // Positions ascend within a sequence: the tile's last query sees the most keys, its first
  // query's window starts earliest.
  const int64_t n_keys = int64_t(a.positions[t_end - 1]) + 1;
  const int64_t pos_first = a.positions[t0];

  // Q tile, scaled by log2(e)/sqrt(hd), fp32, zero padded.
  for (int i = threadIdx.x; i < kBQ * L.hdp; i += blockDim.x) {
    const int qi = i / L.hdp, d = i % L.hdp;
    const int64_t t = t0 + qi;
    float v = 0.f;
    if (t < t_end && d < a.hd)
      v = __half2float(a.q[t * q_dim + int64_t(h) * a.hd + d]) * scale_log2;
    Qs[i] = v;
  }

  float m[kQPW], l[kQPW], o[kQPW][DPL];
  int64_t qpos[kQPW];  // position of each of the warp's queries; -1: no query (sees no key)
#pragma unroll
  for (int qi = 0; qi < kQPW; ++qi) {
    const int64_t t = t0 + warp * kQPW + qi;
    qpos[qi] = t < t_end ? int64_t(a.positions[t]) : -1;
    m[qi] = -1e30f;  // finite: exp2(m_old - m_new) stays defined before the first valid key
    l[qi] = 0.f;
#pragma unroll
    for (int dd = 0; dd < DPL; ++dd) o[qi][dd] = 0.f;
  }

  const __half* kbase = a.k_cache + int64_t(kvh) * a.hd;
  const __half* vbase = a.v_cache + int64_t(kvh) * a.hd;
  const int32_t* table = a.block_tables + s * a.max_blocks;
  const int hd_words = L.hdp / 2;
  // Sliding window: no query of the tile sees keys before the first query's window. Keys
  // outside [first, n_keys) are never read (their blocks may be unassigned): zeros in the tile.
  const int64_t first = a.window > 0 && pos_first >= a.window ? pos_first - a.window + 1 : 0;
  for (int64_t k0 = first / kBK * kBK; k0 < n_keys; k0 += kBK) {
    __syncthreads();  // previous tile fully consumed (and Q written on the first pass)
    for (int i = threadIdx.x; i < kBK * hd_words; i += blockDim.x) {
      const int j = i / hd_words, w = i % hd_words;
      const int64_t key = k0 + j;
      __half2 kv = __float2half2_rn(0.f);
      if (key >= first && key < n_keys && 2 * w < a.hd) {
        const int64_t row = int64_t(table[key / a.block_size]) * a.block_size + key % a.block_size;
        const __half* kp = kbase + row * kv_dim + 2 * w;
        kv = 2 * w + 1 < a.hd ? __halves2half2(kp[0], kp[1]) : __halves2half2(kp[0], __half(0.f));
      }
      Ks[j * L.k_words + w] = *reinterpret_cast<uint32_t*>(&kv);
    }
    for (int i = threadIdx.x; i < kBK * L.v_stride; i += blockDim.x) {
      const int j = i / L.v_stride, d = i % L.v_stride;
      const int64_t key = k0 + j;
      __half v = __half(0.f);
      if (key >= first && key < n_keys && d < a.hd) {
        const int64_t row = int64_t(table[key / a.block_size]) * a.block_size + key % a.block_size;
        v = vbase[row * kv_dim + d];
      }
      Vs[i] = v;
    }
    __syncthreads();

    // Scores: lane = key k0 + lane, for the warp's kQPW queries.
    float sc[kQPW];
#pragma unroll
    for (int qi = 0; qi < kQPW; ++qi) sc[qi] = 0.f;
    const uint32_t* krow = Ks + lane * L.k_words;
    const float* qw = Qs + warp * kQPW * L.hdp;
    for (int d = 0; d < L.hdp; d += 4) {
      const uint32_t w0 = krow[d / 2], w1 = krow[d / 2 + 1];
      const float2 ka = __half22float2(*reinterpret_cast<const __half2*>(&w0));
      const float2 kb = __half22float2(*reinterpret_cast<const __half2*>(&w1));
#pragma unroll
      for (int qi = 0; qi < kQPW; ++qi) {
        const float4 qv = *reinterpret_cast<const float4*>(qw + qi * L.hdp + d);
        sc[qi] = fmaf(qv.x, ka.x, sc[qi]);
        sc[qi] = fmaf(qv.y, ka.y, sc[qi]);
        sc[qi] = fmaf(qv.z, kb.x, sc[qi]);
        sc[qi] = fmaf(qv.w, kb.y, sc[qi]);
      }
    }
    const int64_t key = k0 + lane;
    float* pw = Ps + warp * kQPW * kBK;
#pragma unroll
    for (int qi = 0; qi < kQPW; ++qi) {
      const int64_t pos = qpos[qi];
      const bool valid = key <= pos && (a.window <= 0 || key > pos - a.window);
      const float sv = valid ? sc[qi] : -INFINITY;
      const float m_new = fmaxf(m[qi], detail::warp_max(sv));
      const float corr = exp2f(m[qi] - m_new);
      const float p = exp2f(sv - m_new);
      l[qi] = l[qi] * corr + detail::warp_sum(p);
      m[qi] = m_new;
#pragma unroll
      for (int dd = 0; dd < DPL; ++dd) o[qi][dd] *= corr;
      pw[qi * kBK + lane] = p;
    }
    __syncwarp();
    // P·V: lane owns dims lane*DPL .. lane*DPL + DPL - 1.
    for (int j = 0; j < kBK; j += 4) {
      float v[4][DPL];
#pragma unroll
      for (int jj = 0; jj < 4; ++jj) {
        const __half2* vp =
            reinterpret_cast<const __half2*>(Vs + (j + jj) * L.v_stride + lane * DPL);
#pragma unroll
        for (int dd = 0; dd < DPL; dd += 2) {
          const float2 f = __half22float2(vp[dd / 2]);
          v[jj][dd] = f.x;
          v[jj][dd + 1] = f.y;
        }
      }
#pragma unroll
      for (int qi = 0; qi < kQPW; ++qi) {
        const float4 p = *reinterpret_cast<const float4*>(pw + qi * kBK + j);
#pragma unroll
        for (int dd = 0; dd < DPL; ++dd)
          o[qi][dd] += p.x * v[0][dd] + p.y * v[1][dd] + p.z * v[2][dd] + p.w * v[3][dd];
      }
    }
  }

#pragma unroll
  for (int qi = 0; qi < kQPW; ++qi) {
    const int64_t t = t0 + warp * kQPW + qi;
    if (t >= t_end) continue;
    const float inv = 1.f / l[qi];
    __half* orow = a.out + t * q_dim + int64_t(h) * a.hd;
#pragma unroll
    for (int dd = 0; dd < DPL; ++dd) {
      const int d = lane * DPL + dd;
      if (d < a.hd) orow[d] = __float2half_rn(o[qi][dd] * inv);
    }
  }
}

template <int DPL>
void launch_prefill(const AttnArgs& a, cudaStream_t stream) {
  const PrefillSmem L = prefill_smem(a.hd, DPL);
  const size_t smem = L.total();
  if (smem + kStaticSmem > 48 * 1024)
    LP_CHECK(cudaFuncSetAttribute(attn_prefill_kernel<DPL>,
                                  cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  // sum over sequences of ceil(n_s / kBQ) <= (n_tokens + n_seqs * (kBQ - 1)) / kBQ
  const dim3 grid(unsigned((a.n_tokens + a.n_seqs * (kBQ - 1)) / kBQ), unsigned(a.n_heads));
  const float scale_log2 = float(1.0 / std::sqrt(double(a.hd)) * 1.4426950408889634);
  attn_prefill_kernel<DPL><<<grid, kWarps * 32, smem, stream>>>(a, scale_log2);
  LP_CHECK_LAUNCH();
}

}  // namespace

void attention_prefill(const AttnArgs& a, cudaStream_t stream) {
  LATPROF_ASSERT(a.hd % 2 == 0 && a.hd <= kAttnMaxHeadDim, "head_dim must be even and <= 256");
  LATPROF_ASSERT(a.n_kv_heads > 0 && a.n_heads % a.n_kv_heads == 0, "n_heads % n_kv_heads != 0");
  LATPROF_ASSERT(a.block_size > 0 && a.max_blocks > 0, "the paged cache needs a block size");
  if (a.n_seqs <= 0 || a.n_tokens <= 0) return;
  if (a.hd <= 64)
    launch_prefill<2>(a, stream);
  else if (a.hd <= 128)
    launch_prefill<4>(a, stream);
  else
    launch_prefill<8>(a, stream);
}

}  // namespace latprof::cuda
