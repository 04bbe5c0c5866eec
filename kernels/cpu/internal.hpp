#pragma once
// Internal declarations shared by the CPU kernel files (not part of the public API). Functions
// suffixed _avx512 / _avx2 live in files compiled with those ISA flags and must only be called
// after the dispatcher has checked the CPU.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>
#include <type_traits>
#include <vector>

#include "kernels/cpu/kernels.hpp"

namespace latprof::cpu::detail {

// A 64-byte aligned scratch buffer of T that only grows (reserve() drops the contents). Kernels'
// thread_local scratch: a std::vector's 16-byte alignment split every 64-byte load of a row
// across two cache lines. (The GEMV's activation copies were std::vectors until 2026-12-06: on
// the Intel Xeon, one thread, 8 fp32 rows of 2,048-4,096 hot in L2, the FP16 GEMV ran at 73-80
// GFLOP/s from where malloc put them and 113-119 aligned; reports/cpu-kernels.md.)
template <class T>
struct Aligned64 {
  static_assert(std::is_trivially_copyable_v<T>);
  T* p = nullptr;
  size_t n = 0;
  Aligned64() = default;
  void reserve(size_t want) {
    if (want <= n) return;
    std::free(p);
    p = nullptr;
    n = 0;
    p = static_cast<T*>(std::aligned_alloc(64, (want * sizeof(T) + 63) / 64 * 64));
    if (!p) throw std::bad_alloc();
    n = want;
  }
  ~Aligned64() { std::free(p); }
  Aligned64(const Aligned64&) = delete;
  Aligned64& operator=(const Aligned64&) = delete;
};
using AlignedFloats = Aligned64<float>;

// f(i) for i in [0, n): split statically over the OpenMP threads when parallel, else on the
// calling thread without entering a region. (A region whose `if` is false still sets up and tears
// down a team of one: ~0.35 us with libgomp on AMD Zen 4, and a tinyllama decode step made ~155
// such calls from the small ops and the KV store.)
template <class F>
inline void parallel_for(int64_t n, bool parallel, F&& f) {
  if (!parallel) {
    for (int64_t i = 0; i < n; ++i) f(i);
    return;
  }
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) f(i);
}

// Output rows [r0, r1) of y = x · Wᵀ for m activation rows (m <= 8). y row stride is w.n_out.
void gemv_rows_scalar(const Weight& w, const float* x, int64_t m, float* y, int64_t r0, int64_t r1);
void gemv_rows_avx2(const Weight& w, const float* x, int64_t m, float* y, int64_t r0, int64_t r1);
void gemv_rows_avx512(const Weight& w, const float* x, int64_t m, float* y, int64_t r0, int64_t r1);
// FP16 weights on AVX-512 (gemv_avx512.cpp), 1 <= m <= kF16X16MaxRows activation rows: rows
// [r0, r1) of y = xh · Wᵀ (y's row stride w.n_out), xh the m rows in fp16, n_in apart
// (f32_to_f16_in_range_f16c).
inline constexpr int64_t kF16X16MaxRows = 7;
void gemv_rows_f16_x16(const Weight& w, const uint16_t* xh, int64_t m, float* y, int64_t r0,
                       int64_t r1);
// INT8 weights with AVX512-VNNI (gemv_vnni_avx512.cpp): activations quantised once per call to
// int16 rows of stride ldx (a multiple of 32, zero-padded) with one scale per row.
void quantize_activations_i16(const float* x, int64_t m, int64_t n, int64_t ldx, int16_t* xq,
                              float* xs);
void gemv_rows_i8_vnni(const Weight& w, const int16_t* xq, int64_t ldx, const float* xs, int64_t m,
                       float* y, int64_t r0, int64_t r1);
// W8A8's rounding (round_i8) of one activation row of n, as int16 in q (zero from n to ldq, a
// multiple of 16), with its scale in *s (gemm_avx512.cpp): the AVX-512 GEMMs' W8A8 rows.
void quantize_row_i8_as_i16(const float* x, int64_t n, int64_t ldq, int16_t* q, float* s);
// INT8 weights on AMX-INT8 (gemm_amx_avx512.cpp; only where amx_int8_active(), n_in <=
// kAmxMaxIn): ys[i] = x · ws[i]ᵀ for a group of one n_in, W8A8 (a8) or W8A16, from the VNNI
// GEMM's rounded activations. Its int32 sums over all of n_in stay exact up to kAmxMaxIn.
inline constexpr int64_t kAmxMaxIn = 65536;
void gemm_i8_amx(const Weight* ws, int n, const float* x, int64_t m, float* const* ys, bool a8);
// FP16 weights on AMX-BF16 (gemm_f16_amx_bf16_avx512.cpp; only where amx_f16_active()): ys[i] =
// x · ws[i]ᵀ for a group of one n_in, x's rows already rounded to fp16 (gemm.cpp). Each value is
// split into two bf16 exactly, four tile products; returns false, having written nothing, when a
// row is not fp16 (then the FMA GEMM takes the call).
bool gemm_f16_amx(const Weight* ws, int n, const float* x, int64_t m, float* const* ys);
// The same on AVX2 without VNNI (gemv_avx2.cpp: vpmaddwd), and its quantisation (the same values).
void quantize_activations_i16_avx2(const float* x, int64_t m, int64_t n, int64_t ldx, int16_t* xq,
                                   float* xs);
void gemv_rows_i8_avx2(const Weight& w, const int16_t* xq, int64_t ldx, const float* xs, int64_t m,
                       float* y, int64_t r0, int64_t r1);

// W8A8 (WType::i8a8): each activation row rounded to int8 with one scale, s = max|x| / 127 (1 for
// an all-zero row), q = round-to-nearest-even(clamp(x / s, -127, 127)) computed as x * (1 / s) in
// fp32. Every path computes the same q and s, so the AVX512-VNNI GEMV and the fp32 paths (which
// multiply the weights by q * s) differ only by fp32 rounding.
inline float i8_activation_scale(float max_abs) {
  return max_abs > 0 ? max_abs / 127.0f : 1.0f;
}
inline int32_t round_i8(float x, float inv) {
  float v = x * inv;
  v = v > -127.0f ? v : -127.0f;  // as _mm512_max_ps / _mm512_min_ps (NaN -> -127)
  v = v < 127.0f ? v : 127.0f;
  return int32_t(std::nearbyint(v));
}
// x[m, n] -> out[m, n] = q * s (portable; the fp32 GEMV and GEMM paths of W8A8).
void round_activations_i8(const float* x, int64_t m, int64_t n, float* out);
// W8A8 where no int8 x int8 kernel runs (the GEMM; the GEMV without AVX512-VNNI): run(ws8, xr)
// with the weights as WType::i8 and x[m, ws[0].n_in] rounded to q * s. All n weights take x.
template <class Run>
void with_rounded_activations(const Weight* ws, int n, const float* x, int64_t m, Run&& run) {
  thread_local std::vector<float> xr;
  thread_local std::vector<Weight> w8;
  xr.resize(size_t(m * ws[0].n_in));
  round_activations_i8(x, m, ws[0].n_in, xr.data());
  w8.assign(ws, ws + n);
  for (Weight& w : w8) w.type = WType::i8;
  run(w8.data(), xr.data());
}
// AVX512-VNNI W8A8 (gemv_w8a8_avx512.cpp): rows of u = q + 128 (stride ldx, a multiple of 64,
// padded with 128) and their scales.
void quantize_activations_u8(const float* x, int64_t m, int64_t n, int64_t ldx, uint8_t* xu,
                             float* xs);
void gemv_rows_w8a8_vnni(const Weight& w, const uint8_t* xu, int64_t ldx, const float* xs,
                         int64_t m, float* y, int64_t r0, int64_t r1);

// f(std::integral_constant<int, m>{}) for 1 <= m <= 8 (larger m as 8): the GEMV kernels' row
// counts, as template arguments.
template <class F>
void with_rows(int64_t m, F&& f) {
  switch (m) {
    case 1:
      return f(std::integral_constant<int, 1>{});
    case 2:
      return f(std::integral_constant<int, 2>{});
    case 3:
      return f(std::integral_constant<int, 3>{});
    case 4:
      return f(std::integral_constant<int, 4>{});
    case 5:
      return f(std::integral_constant<int, 5>{});
    case 6:
      return f(std::integral_constant<int, 6>{});
    case 7:
      return f(std::integral_constant<int, 7>{});
    default:
      return f(std::integral_constant<int, 8>{});
  }
}

// How far ahead of its loads a GEMV that reads one linear stream per thread prefetches, and
// where to: 8 KB ahead into L2 (prefetcht1), the L1 left to the activations and to the hardware
// prefetcher. On AMD Zen 4 (32 KiB L1d) prefetching 4 KB ahead into L1 (prefetcht0) evicted the
// activation vector the loop reads again for every row: FP16 decode GEMVs 1.2-1.75x slower
// (reports/cpu-kernels.md). 4 KB into L1 had measured best on AMD Zen 5 (48 KiB L1d) among
// distances (1-2 KB left 5-10% of the bandwidth unused); L2 hints there are not yet measured.
constexpr int64_t kLinearPrefetchBytes = 8192;
// The prefetch helpers below are always inlined: GCC 12 takes a function whose only effect is a
// prefetch for pure and drops any call to it that it does not inline. (A try at the 8-row W8A16
// block with its steps in lambdas lost its row streams' prefetches so, silently: 0.45-0.62x from
// DRAM; reports/cpu-kernels.md.)
[[gnu::always_inline]] inline void prefetch_linear(const void* p) {
  __builtin_prefetch(p, 0, 2);  // prefetcht1
}
// The most activation bytes (all rows of a step) a GEMV reads again for every weight row, one
// linear stream per thread, instead of in R-row blocks: half of the smallest L1d here (32 KiB on
// AMD Zen 4), so the activations stay in L1 beside the weight stream. On Zen 4 the linear stream
// ran 1.2-2.1x faster than the blocks within it and up to 1.8x slower beyond it (2-4 rows of
// 5,632 int16 activations; reports/cpu-kernels.md).
constexpr int64_t kLinearActivationBytes = 16384;

// The GEMV's software prefetch of row stream i of a block of R weight rows (n elements each,
// starting at wr), `ahead` elements past element k. Past the end of a row it goes on in row i of
// the next block (which the thread reads next: its rows are contiguous, so the next block starts
// R rows on), not in row i + 1, whose head that row's own stream has already fetched. Before,
// every new block started R - 1 of its R streams with a DRAM miss: the 2,048-wide GEMV ran 12%
// slower (reports/cpu-kernels.md). Locality 3: into L1 (prefetcht0); 2: into L2 (prefetcht1, the
// FP16 blocks' streams, gemv_avx512.cpp).
template <int R, int Locality = 3, class T>
[[gnu::always_inline]] inline void prefetch_row_stream(const T* wr, int64_t n, int i, int64_t k,
                                                       int64_t ahead) {
  const T* p = k + ahead < n ? wr + i * n + k + ahead : wr + (R + i) * n + (k + ahead - n);
  __builtin_prefetch(p, 0, Locality);
}

// The R INT8 weight rows [r, r + R) of an INT8 GEMV block, row-major or (Rows4) interleaved in
// fours (kernels.hpp, Weight::rows4): at(i, k) is element k of row r + i (contiguous up to the
// next multiple of 64), for any r. With Rows4 and R = 4 from a multiple of 4 (gemv hands out
// whole groups) the 4 rows of a group are one linear stream, which the prefetch assumes; rows
// otherwise are R streams, each prefetched `ahead` elements on (row-major: prefetch_row_stream).
// The layout is a template argument, so the stride and the prefetch are constants in the loops
// (with them run-time values, bench_kernels measured the interleaved 4-row block at 4 activation
// rows at 0.80-0.85x row-major; as constants the harness measured 1.7x; not side by side).
template <int R, bool Rows4>
struct I8Rows {
  static constexpr int64_t kStride = Rows4 ? 256 : 64;
  static constexpr bool kLinear = Rows4 && R == 4;
  const int8_t* wr;  // row r (row-major, from column c0), or its group (interleaved)
  const int8_t* base[R];
  int64_t n;   // elements of each row read: the matrix's width or (row-major) a panel's
  int64_t ld;  // row-major: elements from one row to the next (the matrix's width)
  bool small_m_prefetch = kLinear && stream_tuning().i8_prefetch;
  // Row-major weights may be read in a panel of `width` columns from c0 (width 0: all of them).
  I8Rows(const Weight& w, int64_t r, int64_t c0 = 0, int64_t width = 0)
      : n(width > 0 ? width : w.n_in), ld(w.n_in) {
    const int8_t* d = static_cast<const int8_t*>(w.data);
    wr = Rows4 ? d + (r >> 2) * 4 * n : d + r * ld + c0;
    // (Rows4: a matrix of one panel, kernels.hpp; the GEMV entry points hand the kernels one
    // panel at a time, as a Weight of its columns: for_panels below.)
    for (int i = 0; i < R; ++i)
      base[i] = Rows4 ? d + i8_offset(true, w.n_out, n, r + i, 0) : wr + i * ld;
  }
  const int8_t* at(int i, int64_t k) const { return base[i] + (k >> 6) * kStride + (k & 63); }
  // Row-major, whole rows: each of the R row streams `ahead` elements on, into the cache level
  // Locality says (prefetch_row_stream); nothing for rows interleaved in fours. Always inlined,
  // as prefetch.
  template <int Locality>
  [[gnu::always_inline]] void prefetch_rows(int64_t k, int64_t ahead) const {
    if constexpr (!Rows4)
      for (int i = 0; i < R; ++i) prefetch_row_stream<R, Locality>(wr, n, i, k, ahead);
  }
  // Row-major, read in column panels: element k of each of the next block's R rows (R rows on,
  // in the same panel: the block the thread reads next), into the cache level Locality says.
  template <int Locality>
  [[gnu::always_inline]] void prefetch_next_block(int64_t k) const {
    if constexpr (!Rows4)
      for (int i = 0; i < R; ++i) __builtin_prefetch(wr + (R + i) * ld + k, 0, Locality);
  }
  // Called once per 64 weights (k a multiple of 64), by a block of M activation rows. The linear
  // stream of 4 interleaved rows, measured on AMD Zen 4: at M = 1 and 2 best left to the hardware
  // prefetcher (one core, 2,048 / 5,632 wide, against the FP16 stream: 1.09 / 0.97 of it at M =
  // 1, 4 lines 12 KB ahead into L2 0.73 / 0.66, 4-8 KB into L1 0.92-0.98 / 0.84-0.89; at M = 2,
  // 2 threads, 2,048-column panels, 4,096 x 11,008 in a fast window: none ran 1.08x as fast as
  // 4 KB ahead into L1); from M = 3, where the multiply-adds bound it, 12 KB ahead into L2 (M = 4:
  // 0.87 / 0.82, into L1 or none 0.35-0.53; M = 3: 0.66 / 0.66, 4 KB into L1 0.59 / 0.43).
  // On Intel Xeon (family 6 model 207, 2 threads, 2,048-5,632-column panels) the W8A16 stream of
  // M = 1 and 2 left to the hardware prefetcher read at ~0.61-0.66 and ~0.45-0.59 of the read;
  // 4 lines kLinearPrefetchBytes ahead into L2 made it 1.36-1.41x and 1.43-1.52x as fast (4-12 KB
  // within a few percent; the W8A8 stream level), so there it prefetches (StreamTuning,
  // kernels.hpp).
  // Always inlined: GCC 12 takes a function whose only effects are prefetches for pure and
  // drops its calls (a call left out of line, as the M <= 2 branch's loop was, prefetched nothing).
  template <int M>
  [[gnu::always_inline]] void prefetch(int64_t k, int64_t ahead) const {
    if constexpr (kLinear) {
      if constexpr (M <= 2) {
        if (!small_m_prefetch) return;
        const int8_t* p = wr + (k >> 6) * 256 + kLinearPrefetchBytes;
        for (int i = 0; i < 4; ++i) __builtin_prefetch(p + 64 * i, 0, 2);
        return;
      }
      const int8_t* p = wr + (k >> 6) * 256 + 12288;
      for (int i = 0; i < 4; ++i) __builtin_prefetch(p + 64 * i, 0, 2);
    } else if constexpr (!Rows4) {
      prefetch_rows<3>(k, ahead);
    } else {
      for (int i = 0; i < R; ++i)
        if (k + ahead < n) __builtin_prefetch(at(i, k + ahead), 0, 3);
    }
  }
};

// The rows [r0, r1) of an INT8 weight stored interleaved in fours, copied row-major into buf, for
// the paths that have no interleaved form (the FP32 GEMVs, the AVX2 and portable GEMMs): a Weight
// whose rows 0.. are rows r0.. (its scales too) and whose n_out, the output's row stride, is
// unchanged, so a kernel writes rows [0, r1 - r0) of y + r0.
inline Weight row_major_rows(const Weight& w, int64_t r0, int64_t r1, std::vector<int8_t>& buf) {
  buf.resize(size_t((r1 - r0) * w.n_in));
  const int8_t* d = static_cast<const int8_t*>(w.data);
  for (int64_t r = r0; r < r1; ++r)
    for (int64_t c = 0; c < w.n_in; c += 64)
      std::memcpy(buf.data() + (r - r0) * w.n_in + c, d + i8_offset(true, w.n_out, w.n_in, r, c),
                  64);
  Weight v = w;
  v.data = buf.data();
  v.scales = w.scales + r0;
  v.rows4 = false;
  return v;
}

// Runs f(view, p0, yv) for each column panel of an INT8 weight interleaved in fours (kernels.hpp,
// kRows4Panel): view is a Weight of the panel's columns (a one-panel matrix, the layout the GEMV
// kernels read), p0 its first column; the first panel writes rows [r0, r1) of y (m rows, n_out
// apart), the others a scratch that is then added to them. A row-major or one-panel weight is
// passed through whole.
template <class F>
void for_panels(const Weight& w, int64_t m, float* y, int64_t r0, int64_t r1, F&& f) {
  if (!w.rows4 || w.n_in <= kRows4Panel) return f(w, int64_t(0), y);
  thread_local std::vector<float> part;
  // Grown, never shrunk: f writes rows [r0, r1) of each activation row before they are read, so
  // nothing is zeroed again when a wider weight follows a narrower one.
  if (part.size() < size_t(m * w.n_out)) part.resize(size_t(m * w.n_out));
  for (int64_t p0 = 0; p0 < w.n_in; p0 += kRows4Panel) {
    Weight v = w;
    v.data = static_cast<const int8_t*>(w.data) + p0 * w.n_out;
    v.n_in = std::min(kRows4Panel, w.n_in - p0);
    if (p0 == 0) {
      f(v, p0, y);
      continue;
    }
    f(v, p0, part.data());
    for (int64_t j = 0; j < m; ++j)
      for (int64_t r = r0; r < r1; ++r) y[j * w.n_out + r] += part[size_t(j * w.n_out + r)];
  }
}

// Accounting of one parallel region (kernels.hpp, SyncStats). Use:
//   SyncRegion sync;                    // before the region: it opens now
//   #pragma omp parallel
//   { sync.start(); ... work, `nowait` on the last omp for ...; sync.barrier(); ... sync.done(); }
//   sync.finish();                      // after the region
// barrier() is a timed `#pragma omp barrier`; done() stamps the end of a thread's share (its wait
// runs to finish()). Threads beyond kMaxThreads are not counted.
class SyncRegion {
 public:
  static constexpr int kMaxThreads = 256;
  SyncRegion();
  void start();    // in the region, each thread
  void barrier();  // in the region, each thread: a timed omp barrier
  void done();     // in the region, each thread, after its share
  void finish();   // after the region, the calling thread
 private:
  int64_t t0_;
  int threads_ = 0;
  int64_t start_[kMaxThreads];
  int64_t done_[kMaxThreads];
  int64_t waited_[kMaxThreads];
};

// Whether n weights can run as one group (matmul_group): the same n_in and type.
inline bool same_input(const Weight* ws, int n) {
  for (int i = 1; i < n; ++i)
    if (ws[i].n_in != ws[0].n_in || ws[i].type != ws[0].type) return false;
  return true;
}

// Whole blocked GEMM, all threads. The group form: n weights of the same n_in and type applied to
// the same x (one packing of x, one parallel region).
void gemm_group_avx512(const Weight* ws, int n, const float* x, int64_t m, float* const* ys);
void gemm_group_avx2(const Weight* ws, int n, const float* x, int64_t m, float* const* ys);

// Attention over a paged KV cache for one work unit: query tokens [t0, t1) of sequence s (in
// the step's order: global rows query_start[s] + t), every query head that shares kv head kvh.
// Each writes only its own output rows.
struct AttnArgs {
  const float* q;       // [T, n_heads * hd]
  const void* k_cache;  // rows of n_kv_heads slices (KvType): row_elems() elements apart
  const void* v_cache;
  const int32_t* query_start;   // [S + 1]
  const int32_t* positions;     // [T]
  const int32_t* block_tables;  // [S, max_blocks]
  int64_t max_blocks, block_size;
  int n_heads, n_kv_heads, hd;
  float* out;
  int64_t window;  // sliding window in keys; 0: none
  KvType kv = KvType::f16;
  // The decode takes attention_chunk_bf16_avx512 (a bf16 cache, AVX512-BF16, hd % 32 == 0).
  bool dot_bf16 = false;
  // The GQA decode scores with vpdpbusd (an int8 cache, AVX512-VNNI, hd % 4 == 0).
  bool dot_i8 = false;
  // K in KLayout::tiled16 (kv f16, block_size a multiple of 16).
  bool k_tiled = false;

  int64_t kv_dim() const { return int64_t(n_kv_heads) * hd; }
  // One (position, kv head) slice and one row of the cache, in elements of its type (uint16 for
  // fp16 and bf16; bytes for int8, whose slice ends with its fp32 scale).
  int64_t slice_elems() const { return kv_slice_bytes(kv, hd) / (kv == KvType::i8 ? 1 : 2); }
  int64_t row_elems() const { return n_kv_heads * slice_elems(); }
  int64_t tok0(int64_t s) const { return query_start[s]; }
  int64_t n_tok(int64_t s) const { return int64_t(query_start[s + 1]) - query_start[s]; }
  int64_t pos(int64_t s, int64_t t) const { return positions[query_start[s] + t]; }
  // The first element of tile g (rows 16g .. 16g + 15) of a tiled16 K cache, in uint16.
  int64_t k_tile(int64_t g) const { return g * 16 * kv_dim(); }
  // The cache row of position p of sequence s.
  int64_t row(int64_t s, int64_t p) const {
    return int64_t(block_tables[s * max_blocks + p / block_size]) * block_size + p % block_size;
  }
};
// The first key a query at position pos sees (keys [first, pos]).
inline int64_t attn_first_key(const AttnArgs& a, int64_t pos) {
  return a.window > 0 && pos >= a.window ? pos - a.window + 1 : 0;
}
// Query rows (tokens x heads of one kv group) per tile of the AVX-512 prefill attention.
inline constexpr int kAttnTileRows = 64;
void attention_unit_scalar(const AttnArgs& a, int64_t s, int kvh, int64_t t0, int64_t t1);
void attention_unit_avx512(const AttnArgs& a, int64_t s, int kvh, int64_t t0, int64_t t1);
void attention_unit_avx2(const AttnArgs& a, int64_t s, int kvh, int64_t t0, int64_t t1);
// Query rows per tile of the prefill attention on the AMX-BF16 tiles: K's and V's blocks are
// split into tiles once a tile, so more rows share that work than the FMA tile's 64.
inline constexpr int kAttnAmxRows = 512;
// Whether attention_unit_avx512 runs on the AMX-BF16 tiles (attention_amx_bf16_avx512.cpp): an
// fp16 cache, hd a multiple of 32 up to 256, amx_f16_active().
bool attention_amx_applies(const AttnArgs& a);
// One such tile: query tokens [t0, t1) of sequence s and kv head kvh, at most kAttnAmxRows rows.
void attention_tile_amx(const AttnArgs& a, int64_t s, int kvh, int64_t t0, int64_t t1);
// Decode attention split over keys: keys [k0, k1) of sequence s for all
// its tokens in the step and all heads; partial online-softmax state per (token, head) row at
// part + (t * n_heads + h) * attn_part_stride(hd): o[16 * ceil(hd / 16)], max, sum.
inline int64_t attn_part_stride(int hd) {
  return 16 * ((hd + 15) / 16) + 16;
}
void attention_chunk_avx512(const AttnArgs& a, int64_t s, int64_t k0, int64_t k1, float* part);
// The same on AVX2 (attention_avx2.cpp), every cache type.
void attention_chunk_avx2(const AttnArgs& a, int64_t s, int64_t k0, int64_t k1, float* part);
// The same on a bf16 cache with vdpbf16ps (attention_bf16_avx512.cpp; a.dot_bf16).
void attention_chunk_bf16_avx512(const AttnArgs& a, int64_t s, int64_t k0, int64_t k1, float* part);
// The same with GQA on an int8 cache with vpdpbusd scores (attention_i8_avx512.cpp; a.dot_i8).
void attention_chunk_i8_avx512(const AttnArgs& a, int64_t s, int64_t k0, int64_t k1, float* part);
// AVX512-VNNI present and allow_kv_dot not turned off.
bool i8_dot_allowed();

// SwiGLU over n elements (elementwise.cpp's swiglu), AVX-512 and AVX2.
void swiglu_avx512(const float* gate, const float* up, int64_t n, float* out);
void swiglu_avx2(const float* gate, const float* up, int64_t n, float* out);
// Synthetic weights (fill.cpp's values, 16 at a time): elements i0 .. i0 + n of a tensor into
// dst[0 .. n).
void fill_f16_avx512(uint16_t* dst, int64_t n, uint64_t key, uint64_t i0, float amplitude);
void fill_i8_avx512(int8_t* dst, int64_t n, uint64_t key, uint64_t i0);
void fill_f16_avx2(uint16_t* dst, int64_t n, uint64_t key, uint64_t i0, float amplitude);
void fill_i8_avx2(int8_t* dst, int64_t n, uint64_t key, uint64_t i0);

// fp32 -> fp16 (round to nearest even) and back, n elements, with F16C.
void f32_to_f16_f16c(const float* src, uint16_t* dst, int64_t n);
inline constexpr float kF16Max = 65504.0f;  // the largest finite fp16
// The same, and whether every element was within fp16's range (|x| <= kF16Max, not NaN).
bool f32_to_f16_in_range_f16c(const float* src, uint16_t* dst, int64_t n);
// FP16-weight matmuls' activations (kernels.hpp): each of m rows of n rounded to the nearest fp16
// (ties to even) and back to fp32 into out, or copied unchanged when an element is beyond fp16's
// range or NaN. round_rows_f16 dispatches (F16C, else portable).
void round_rows_f16(const float* x, int64_t m, int64_t n, float* out);
void round_rows_f16_f16c(const float* x, int64_t m, int64_t n, float* out);
void f16_to_f32_f16c(const uint16_t* src, float* dst, int64_t n);

// Probe inner loops: each returns a value that depends on all the work done (so it is not
// optimised away). Called from inside an OpenMP parallel region, one call per thread.
// prefetch: each line is also prefetched into L2 kProbePrefetchBytes ahead, as the decode GEMVs'
// weight streams are (below).
double read_sum_avx512(const float* p, size_t n, bool prefetch);
double read_sum_avx2(const float* p, size_t n, bool prefetch);
// The same n floats cut into kProbeStreams runs read side by side, a line of each in turn, as the
// AVX2 W8A16 GEMV reads a thread's rows (gemv_avx2.cpp). On AMD Zen 3 (2 threads, 1 GiB) 4 runs
// read 41-42 GB/s where one read 34-37 in the same minutes: the GEMV in 4 streams had read more
// than the one-stream probe allowed (reports/cpu-kernels.md).
constexpr int kProbeStreams = 4;
double read_streams_avx512(const float* p, size_t n);
double read_streams_avx2(const float* p, size_t n);
// The read probe's software prefetch distance: the INT8 decode stream's (gemv_vnni_avx512.cpp).
// On AMD Zen 4 (2 threads, 512 MiB, huge pages) a read prefetched 6 KB ahead into L2 ran
// 1.04-1.08x a plain one when the memory read ~60 GB/s and 1.00-1.03x at ~35 GB/s
// (reports/cpu-kernels.md): without it the probe's roof was below what the kernels reached.
constexpr size_t kProbePrefetchBytes = 6144;
double fma_chains_avx512(int64_t iters);       // 2 * 16 * 24 * iters FLOP
double fma_chains_avx2(int64_t iters);         // 2 * 8 * 12 * iters FLOP
int64_t dpbusd_chains_avx512(int64_t iters);   // 2 * 64 * 24 * iters op
double dpbf16_chains_avx512(int64_t iters);    // 2 * 32 * 24 * iters FLOP (AVX512-BF16)
int64_t dpwssd_chains_avx512(int64_t iters);   // 2 * 32 * 24 * iters op (AVX512-VNNI)
int64_t tdpbssd_chains_amx(int64_t iters);     // 2 * 4 * 16 * 16 * 64 * iters op (AMX-INT8)
int64_t tdpbf16ps_chains_amx(int64_t iters);   // 2 * 4 * 16 * 16 * 32 * iters FLOP (AMX-BF16)
int64_t dpbusd_chains_avxvnni(int64_t iters);  // 2 * 32 * 12 * iters op
int64_t maddubs_chains_avx2(int64_t iters);    // 2 * 32 * 12 * iters op (no VNNI)

}  // namespace latprof::cpu::detail
