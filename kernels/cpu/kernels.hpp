#pragma once
// CPU kernels: the fast CPU backend and the specification every CUDA kernel is tested against.
// One op per file in kernels/cpu/. Activations are fp32, linear weights fp16 or int8 (symmetric,
// one fp32 scale per output channel), the KV cache fp16. Kernels parallelise with OpenMP over
// omp_get_max_threads() threads and pick AVX-512, AVX2 or a portable path at run time.
#include <cstddef>
#include <cstdint>

namespace latprof::cpu {

// ---- instruction sets ---------------------------------------------------------------------------
enum class Isa { scalar = 0, avx2 = 1, avx512 = 2 };
Isa detected_isa();       // best the CPU supports (AVX-512 needs F, BW, VL and F16C)
Isa active_isa();         // what kernels use now (detected, unless forced)
void force_isa(Isa isa);  // tests and benchmarks: run a lower path; clamps to detected_isa()
const char* isa_name(Isa isa);
bool has_vnni();         // AVX512-VNNI or AVX-VNNI present
bool has_avx512_bf16();  // AVX512-BF16 (vdpbf16ps) present
// AMX-TILE and AMX-INT8 present and the tile state granted by the OS (Linux: asked once with
// arch_prctl(ARCH_REQ_XCOMP_PERM); a kernel or hypervisor that refuses it leaves AMX off).
bool has_amx_int8();
// AMX-TILE and AMX-BF16 (and AVX512-BF16, which splits the values) present and granted.
bool has_amx_bf16();
// Whether the GEMM (prefill) multiplies INT8 weights on the AMX tiles: has_amx_int8(), the active
// ISA AVX-512, and not switched off (set_amx_enabled(false): tests and benchmarks compare both
// ways; the decode's GEMVs never use AMX).
bool amx_int8_active();
// Whether the GEMM multiplies FP16 weights on the AMX-BF16 tiles (gemm_f16_amx_bf16_avx512.cpp):
// has_amx_bf16(), the active ISA AVX-512, and not switched off (set_amx_enabled, as for INT8).
bool amx_f16_active();
void set_amx_enabled(bool on);
// The decode's choices (GEMVs, attention) that measured opposite ways on the CPU vendors here
// (both on 2 threads from DRAM; reports/cpu-kernels.md). By default they follow the CPU's vendor;
// benchmarks and tests set them by hand, so one process compares both.
struct StreamTuning {
  // INT8 weights (rows interleaved in fours), 1-2 activation rows: a software prefetch of the
  // weight stream, 4 lines kLinearPrefetchBytes ahead into L2 (internal.hpp, I8Rows). Intel Xeon
  // (family 6 model 207): the W8A16 GEMV 1.36-1.52x as fast with it; AMD Zen 4: 0.66-0.73x. (On
  // Intel the backend now keeps INT8 weights row-major, i8_rows4 below: this applies where they
  // are interleaved all the same.)
  bool i8_prefetch = false;
  // FP16 weights, one activation row: the activations read as fp32 holding the same fp16-rounded
  // values (the results are identical) up to this many columns, as fp16 beyond. AMD Zen 4: fp16
  // 1.09-1.18x as fast on every decode shape (0: always fp16). Intel Xeon (family 6 model 207):
  // fp32 1.02-1.16x as fast from 2,048 to 8,192 columns (a row of at most 32 KiB in its 48 KiB
  // L1d), fp16 1.09-1.14x at 11,008 (llama-2-7b's down projection). From 2 rows fp16 on both.
  int64_t f16_one_row_f32_max_in = 0;
  // Decode attention without GQA (llama-2-7b's 32 heads of 128) on an fp16 K cache in 16-position
  // tiles: the K runs prefetched ~8 KB ahead into L2. Intel Xeon (family 6 model 207): the tiles
  // 1.25-1.29x the time of rows without it, level with rows with it. AMD Zen 4: the hardware
  // prefetcher alone (the prefetch of K and V together took 1.09-1.2x the time; K alone not
  // measured there).
  bool mha_k_prefetch = false;
  // W8A16 weights on AVX512-VNNI stored with their rows interleaved in fours (Weight::rows4,
  // below) where the shape allows, instead of row-major. Decided where the weights are written
  // (the CPU backend's load): a change applies to weights written after it. AMD Zen 4: the
  // interleaved stream at one activation row 0.99-1.07 of the FP16 stream, row-major 0.89-0.92.
  // Intel Xeon (family 6 model 207, tinyllama-1.1b's MLP shapes, 2 threads from DRAM, one
  // process, 3 repetitions interleaved): row-major level at 1-3 activation rows and 1.07-1.33x
  // as fast at 4-8 (reports/cpu-kernels.md). Where it is off, the INT8 GEMM's packing of row-major
  // weights prefetches them into L2 and the GEMV's row-major blocks of 2 rows prefetch 4 KB
  // ahead into L2, as measured with that layout (gemm_avx512.cpp, gemv_vnni_avx512.cpp).
  bool i8_rows4 = true;
  // The GQA decode attention on a bf16 KV cache multiplies in bf16 with AVX512-BF16 (vdpbf16ps)
  // where the CPU has it, instead of widening K and V to fp32 for FMAs. AMD Zen 4 runs vdpbf16ps
  // on 512 bits once a cycle, twice an FP32 FMA's multiply-adds (reports/cpu-kernels.md); the
  // Intel Xeon (family 6 model 207) every other cycle, half of them: there tinyllama-1.1b's heads
  // took 1.12-1.47x the widening path's time (500-4,000 positions, from DRAM).
  bool bf16_kv_dot = true;
};
StreamTuning vendor_stream_tuning();  // this CPU's defaults (Intel or not)
StreamTuning stream_tuning();         // the choices in force
void set_stream_tuning(const StreamTuning& t);
void reset_stream_tuning();  // back to vendor_stream_tuning()

// ---- linear weights -----------------------------------------------------------------------------
enum class WType { f16 = 0, i8 = 1, i8a8 = 2 };
// W: [n_out, n_in] row-major. f16: uint16_t IEEE half. i8: int8_t, value = q * scales[row].
// i8a8: stored as i8; the product rounds each activation row to int8 first (W8A8: one scale per
// row, max|x| / 127; see internal.hpp, round_i8), on AVX512-VNNI in int8 x int8 dot products.
inline bool int8_storage(WType t) {
  return t != WType::f16;
}
struct Weight {
  const void* data = nullptr;
  const float* scales = nullptr;  // [n_out], i8 only
  WType type = WType::f16;
  int64_t n_out = 0;
  int64_t n_in = 0;
  // INT8 storage only: rows interleaved in fours (interleave_rows4 below) instead of row-major.
  bool rows4 = false;
};

// INT8 rows interleaved in fours, in panels of columns: the columns are cut into panels of
// kRows4Panel (the last one narrower), panel after panel, each holding all the rows' pieces of
// its columns; within a panel of width wp, each group of 4 rows (4 * wp bytes) holds their 64-byte
// pieces in turn: row 4g + i, panel columns [64c, 64c + 64) at 4g * wp + 256c + 64i from the
// panel's start (p0 * n_out for the panel of columns [p0, p0 + wp)). A matrix of at most
// kRows4Panel columns is one panel. The decode GEMV then reads 4 rows as one linear stream
// sharing each activation load: on AMD Zen 4 (2 threads, fast windows) the W8A16 stream at one
// activation row ran at 0.99-1.07 of the FP16 stream's bytes per second, against 0.89-0.92
// row-major. A thread's rows are one linear stream per panel, and the panel's activations, which
// it reads again for every group (2 bytes a column), stay in L1 beside that stream: with all
// 11,008 columns in one panel they did not, and the 4,096 x 11,008 product ran at 0.77-0.81 of the
// 11,008 x 4,096 one when the memory read ~60 GB/s. 2,048 columns, not 4,096: the engine's batched
// steps read 2-4 activation rows a panel (M x 4 KB, not M x 8 KB, beside the 32 KiB L1's weight
// stream); on AMD Zen 4 in fast windows the W8A16 GEMV at 2, 3 and 4 rows ran 1.16-1.35x,
// 1.40-1.57x and 1.08-1.24x faster (7B's shapes), 1 row unchanged, 8 rows 0.97x
// (reports/cpu-kernels.md). Needs n_in % 64 == 0 and n_out % 4 == 0.
inline constexpr int64_t kRows4Panel = 2048;
inline bool rows4_fits(int64_t n_out, int64_t n_in) {
  return n_out > 0 && n_in > 0 && n_in % 64 == 0 && n_out % 4 == 0;
}
// Element (r, k) of an int8 matrix [n_out, n_in] in either layout; the 64 - k % 64 elements from
// there on in its row are contiguous.
inline int64_t i8_offset(bool rows4, int64_t n_out, int64_t n_in, int64_t r, int64_t k) {
  if (!rows4) return r * n_in + k;
  const int64_t p0 = k / kRows4Panel * kRows4Panel, kp = k - p0;
  const int64_t wp = n_in - p0 < kRows4Panel ? n_in - p0 : kRows4Panel;
  return p0 * n_out + (r >> 2) * 4 * wp + (kp >> 6) * 256 + (r & 3) * 64 + (kp & 63);
}
// Row-major src -> rows interleaved in fours in dst (no overlap; rows4_fits must hold), in
// parallel: how the CPU backend lays out weights that arrive row-major (a loaded file).
void pack_rows4(const int8_t* src, int8_t* dst, int64_t n_out, int64_t n_in);
// The same in place, through a copy of the matrix (tests and benchmarks).
void interleave_rows4(int8_t* w, int64_t n_out, int64_t n_in);

// y[m, n_out] = x[m, n_in] · Wᵀ, fp32 accumulation. Dispatches to gemv() for small m and to
// gemm() otherwise. y must not alias x.
void matmul(const Weight& w, const float* x, int64_t m, float* y);
// Up to how many activation rows matmul() takes the GEMV (decode) path on the active ISA.
int64_t gemv_max_rows();
// Whether the matmuls multiply INT8 weights in integer dot products (active ISA AVX-512 with
// AVX512-VNNI): i8 as int8 x int16 (vpdpwssd, GEMV and GEMM), i8a8 as uint8 x int8 in the GEMV
// (vpdpbusd) and as the same int8 values held in int16 in the GEMM (vpdpwssd). Otherwise in FP32
// (i8a8 on the rounded activations), but for the GEMV of i8 weights on AVX2, which rounds the
// activations to the same int16 values and multiplies with vpmaddwd (gemv.cpp).
bool gemv_int8_dot();
// FP16 weights (every path: GEMV, GEMM, each ISA) multiply activations rounded to FP16, to nearest
// even, with products summed in FP32, as GPU FP16 matmuls and llama.cpp's F16 path do; a row with
// an element beyond FP16's range (|x| > 65504) or NaN is multiplied unrounded. (A row computed
// alone or batched differs by FP32 summation order, which the rounding can carry across an FP16
// rounding boundary: the engine tests' logit tolerance, tests/support/logit_recorder.hpp.)
// Decode path: streams every weight byte exactly once for all m rows (m <= 8 intended).
void gemv(const Weight& w, const float* x, int64_t m, float* y);
// Prefill path: blocked, packed GEMM (fp16/int8 panels converted to fp32 once per block).
void gemm(const Weight& w, const float* x, int64_t m, float* y);
// Several products of the same activations, ys[i][m, ws[i].n_out] = x · ws[i]ᵀ (attention's q, k
// and v projections; the MLP's gate and up): one parallel region whose threads share out the
// rows of all the weights, the activations packed (GEMM) or quantised (INT8 GEMV) once. Weights
// of different n_in or type are applied one by one. No ys[i] may alias x.
void matmul_group(const Weight* ws, int n, const float* x, int64_t m, float* const* ys);
// Weights in one parallel region at most; a larger group is run in groups of this many.
inline constexpr int kMatmulGroupMax = 8;
void gemv_group(const Weight* ws, int n, const float* x, int64_t m, float* const* ys);
void gemm_group(const Weight* ws, int n, const float* x, int64_t m, float* const* ys);

// ---- elementwise and small ops ------------------------------------------------------------------
// These, and kv_store_paged, run small inputs (a decode step's) on the calling thread without
// entering an OpenMP region (internal.hpp's parallel_for).
// out[t, :] = half_to_float(table[tokens[t], :]); table: [vocab, dim] fp16
void embed(const uint16_t* table, const int32_t* tokens, int64_t m, int64_t dim, float* out);
// out[t, :] = x[t, :] / sqrt(mean(x[t, :]^2) + eps) * w; out may alias x
void rmsnorm(const float* x, const float* w, int64_t m, int64_t dim, float eps, float* out);
// Rotary embedding, Hugging Face "rotate_half" convention: within each head of size hd, element i
// pairs with i + hd/2 (i < hd/2), angle = pos * inv_freq[i].
// inv_freq: [hd/2] radians per position, with any rope scaling already applied (the model's
// ModelConfig::rope_inv_freq; unscaled: theta^(-2i/hd)).
// q: [m, n_heads*hd], k: [m, n_kv_heads*hd], pos: [m] absolute positions. In place.
void rope(float* q, float* k, const int32_t* pos, int64_t m, int n_heads, int n_kv_heads, int hd,
          const double* inv_freq);
// The same with the unscaled frequencies theta^(-2i/hd).
void rope(float* q, float* k, const int32_t* pos, int64_t m, int n_heads, int n_kv_heads, int hd,
          float theta);
// ---- the paged KV cache (the engine's) ------------------------------------------------------
// A ragged batch of query tokens over a paged cache: sequence s owns query rows
// [query_start[s], query_start[s + 1]) at positions[row] (ascending within the sequence); its
// position p is cache row block_tables[s * max_blocks + p / block_size] * block_size
// + p % block_size. A contiguous cache [n_seq, ctx_cap, kv_dim] is the case of one block of
// ctx_cap positions per sequence.
struct RaggedBatch {
  int64_t n_seqs = 0;
  const int32_t* query_start = nullptr;   // [n_seqs + 1]
  const int32_t* positions = nullptr;     // [rows]
  const int32_t* block_tables = nullptr;  // [n_seqs, max_blocks]
  int64_t max_blocks = 0;
  int64_t block_size = 0;
};
// The KV cache's element type. f16 (IEEE binary16) and bf16 (the top half of an fp32): 2 bytes
// an element, a row of n_kv_heads * hd elements per position. i8: a row per position of
// n_kv_heads slices of hd int8 values followed by that slice's fp32 scale (max |x| / 127 of the
// slice; values x / scale rounded to the nearest, ties to even), kv_row_bytes apart.
// The decode attention's dot products on CPUs that have them: with bf16 and AVX512-BF16, q and
// the softmax probabilities are rounded to bf16 as well (vdpbf16ps, fp32 sums), as GPU attention
// kernels on a bf16 cache do; with i8 and AVX512-VNNI, the GQA scores take q rounded to int8 per
// head (vpdpbusd, int32 sums), as llama.cpp's q8_0 K cache does, and where hd is a multiple of 64
// P·V takes the probabilities times the value scales rounded to int16 per head and 64-key block
// (vpdpwssd, int32 sums). Elsewhere keys and values are widened to fp32 and q and p stay fp32.
enum class KvType : uint8_t { f16 = 0, bf16 = 1, i8 = 2 };
// Bytes of one (position, kv head) slice, and of one cache row (every kv head), of type kv.
constexpr int64_t kv_slice_bytes(KvType kv, int hd) {
  return kv == KvType::i8 ? int64_t(hd) + 4 : 2 * int64_t(hd);
}
constexpr int64_t kv_row_bytes(KvType kv, int n_kv_heads, int hd) {
  return n_kv_heads * kv_slice_bytes(kv, hd);
}
// The K cache's layout (V is always stored by rows). rows: as above, row r's n_kv_heads * hd
// elements contiguous. tiled16 (fp16 only): the rows in groups of 16 (rows 16g .. 16g + 15), each
// group stored transposed, element i of row r at ((r / 16) * kv_dim + i) * 16 + r % 16: for every
// (kv head, dimension) the 16 rows' values sit in one 32-byte run, as vLLM's paged K cache puts
// a block's positions next to each other. The decode's scores then take the keys in the vector
// lanes (a broadcast q element times 16 keys per multiply-add): no transposition of the dot
// products afterwards. The cache's rows must be a multiple of 16 (block sizes of 16 and more).
enum class KLayout : uint8_t { rows = 0, tiled16 = 1 };
// The layout the CPU backend stores a K cache of type kv in blocks of block_size positions.
constexpr KLayout k_layout_for(KvType kv, int64_t block_size) {
  return kv == KvType::f16 && block_size > 0 && block_size % 16 == 0 ? KLayout::tiled16
                                                                     : KLayout::rows;
}
// The element index of (row r, element i of the row's kv_dim) in a 2-byte K cache of layout kl.
constexpr int64_t k_cache_index(KLayout kl, int64_t r, int64_t i, int64_t kv_dim) {
  return kl == KLayout::tiled16 ? ((r >> 4) * kv_dim + i) * 16 + (r & 15) : r * kv_dim + i;
}
// Tests and benchmarks: false makes the decode widen bf16 and int8 caches to fp32 on CPUs with
// the dot-product instructions too.
void allow_kv_dot(bool allow);
// Whether the GQA decode attention on a bf16 cache multiplies in bf16 (vdpbf16ps) here: AVX-512
// in use, AVX512-BF16 present, StreamTuning::bf16_kv_dot on and allow_kv_dot not turned off.
bool bf16_kv_dot_in_use();
// k, v: [rows, n_kv_heads * hd] fp32 -> cache rows slots[r] of type kv, K in layout kl (tiled16
// only with kv f16).
void kv_store_paged(const float* k, const float* v, int64_t rows, const int32_t* slots,
                    int n_kv_heads, int hd, KvType kv, void* k_cache, void* v_cache,
                    KLayout kl = KLayout::rows);
// Causal grouped-query attention of each query row over its sequence's cache positions
// [0, p] (with a sliding window W > 0: [max(0, p - W + 1), p], W keys); the cache already holds
// them. q, out: [rows, n_heads * hd] fp32; query head h uses kv head h / (n_heads / n_kv_heads);
// scale 1/sqrt(hd).
// K in layout kl (tiled16: kv f16 and b.block_size a multiple of 16).
void attention_paged(const float* q, KvType kv, const void* k_cache, const void* v_cache,
                     const RaggedBatch& b, int n_heads, int n_kv_heads, int hd, int64_t window,
                     float* out, KLayout kl = KLayout::rows);
// out[t, j] = silu(gate[t, j]) * up[t, j]; out may alias gate
void swiglu(const float* gate, const float* up, int64_t n, float* out);
// x[i] += y[i]
void add(float* x, const float* y, int64_t n);
// index of the largest logit (the first one on ties)
int32_t argmax(const float* logits, int64_t n);

// ---- the thread pool's synchronisation cost ---------------------------------------------------
// The parallel regions of the matrix products and attention (the kernels that split real work
// over threads) time, per thread, the start of its share after the region opened (fork) and its
// idle time at the barriers after its share (wait). Always on: a few clock reads per thread per
// region. Totals since the last take, wall-equivalent: each region's thread times divided by
// its own team size (a team of 2 where one thread starts 1 ms late counts 0.5 ms of fork and
// 0.5 ms of wait), so they never exceed the regions' wall time.
struct SyncStats {
  int64_t regions = 0;         // parallel regions run
  int64_t thread_regions = 0;  // (region, thread) pairs counted
  double fork_ns = 0;          // sum over regions of the mean (thread starts its share - opened)
  double wait_ns = 0;          // sum over regions of the mean time threads waited at barriers
};
SyncStats take_sync_stats();

// ---- the thread pool's time off its CPUs --------------------------------------------------------
// How long the calling thread's OpenMP team (the threads its parallel regions run on: the calling
// thread and its workers) were not running on a CPU since the last call from this thread,
// wall-equivalent (summed over the team's threads, divided by their number): time taken by the
// hypervisor (steal: a guest's CPU time excludes it where the kernel accounts steal time, as KVM
// guests' do), by other processes, or asleep. Within a decode step the pool's threads busy-wait
// between regions (OpenMP's default spin lasts milliseconds), so there it is time the machine took
// from the step, unless OMP_WAIT_POLICY=passive puts them to sleep at every barrier. runq_ns: the
// part spent runnable, waiting for a CPU behind other tasks of this kernel (its scheduler's run
// delay). From /proc/self/task/<tid>/schedstat (the thread's run time and run delay, ns); not
// available elsewhere, nor on the first call of a thread or after its team changed (the call that
// finds the change starts counting anew).
struct OffCpuStats {
  bool available = false;
  int threads = 0;       // the team's threads counted
  double wall_ns = 0;    // since the last call
  double offcpu_ns = 0;  // wall-equivalent
  double runq_ns = 0;    // the part waiting for a CPU, wall-equivalent
};
OffCpuStats take_offcpu_stats();

// ---- synthetic weights --------------------------------------------------------------------------
// Deterministic, parallel, written in place: value(i) = amplitude * rng::uniform_pm1(key, i).
void fill_f16(uint16_t* dst, int64_t n, uint64_t key, float amplitude);
// int8 weights: q(i) = rng::uniform_i8(key, row * n_in + i); scales[row] = amplitude / 127.
// rows4: written straight into the layout of rows interleaved in fours (rows4_fits must hold),
// the same values as a row-major fill followed by interleave_rows4.
void fill_i8(int8_t* dst, float* scales, int64_t n_out, int64_t n_in, uint64_t key, float amplitude,
             bool rows4 = false);
// fp32 vector: center + amplitude * uniform_pm1(key, i)
void fill_f32(float* dst, int64_t n, uint64_t key, float center, float amplitude);
// Symmetric per-row quantisation of an fp32 or fp16 matrix (for loading real FP16 checkpoints
// as INT8): scales[r] = max|row| / 127, q = round(x / scale).
void quantize_rows_f16(const uint16_t* src, int64_t n_out, int64_t n_in, int8_t* dst,
                       float* scales);

// ---- machine ceilings (the probe behind `latprof hw` and the run report) ------------------------
struct ProbeResult {
  double value = 0;   // the best of the repetitions
  double median = 0;  // median of the repetitions
  int repetitions = 0;
  double bytes_or_ops = 0;  // working set (bytes) or operations per repetition
};
// Read bandwidth in bytes/s streaming a buffer of `bytes` (far larger than the caches).
ProbeResult probe_read_bandwidth(size_t bytes, int repetitions);
// STREAM triad a[i] = b[i] + s*c[i], bytes/s counting 3 arrays (2 reads + 1 write).
ProbeResult probe_triad_bandwidth(size_t bytes, int repetitions);
// Peak fp32 FMA throughput, FLOP/s (2 per FMA), all threads, best ISA.
ProbeResult probe_fma_peak(int repetitions);
// Peak int8 dot-product throughput, op/s (2 per multiply-add), VNNI when present.
ProbeResult probe_int8_peak(int repetitions);
// Peak bf16 dot-product throughput, FLOP/s (2 per multiply-add, vdpbf16ps); all zero on a CPU
// without AVX512-BF16.
ProbeResult probe_bf16_peak(int repetitions);
// Peak int16 dot-product throughput, op/s (2 per multiply-add, vpdpwssd: the W8A16 kernels'
// products); all zero on a CPU without AVX512-VNNI.
ProbeResult probe_int16_peak(int repetitions);
// Peak AMX-INT8 tile throughput, op/s (2 per multiply-add, tdpbssd in registers); all zero where
// the GEMM does not use the tiles (amx_int8_active() false).
ProbeResult probe_amx_int8_peak(int repetitions);
// Peak AMX-BF16 tile throughput, FLOP/s (2 per multiply-add, tdpbf16ps in registers); all zero
// where the GEMM does not use the tiles for FP16 weights (amx_f16_active() false).
ProbeResult probe_amx_bf16_peak(int repetitions);
// One-way latency in ns of a cache line between the first two threads of a parallel region
// (ping-pong on one line, up to 2,000 round trips or 20 ms a repetition): what each fork, join and
// barrier of the thread pool waits for at least. value is the lowest repetition, median their
// median; all zero with fewer than 2 threads. On a VM it changes with where the host runs the vCPUs
// (AMD Zen 4, 2 vCPUs: ~30 ns on one core complex, ~180 ns across two; reports/cpu-kernels.md).
ProbeResult probe_core_to_core(int repetitions);

}  // namespace latprof::cpu
