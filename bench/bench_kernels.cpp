// Micro-benchmarks of the CPU kernels at Llama-2-7B shapes (dim 4096, ffn 11008, vocab 32000).
//   ./build-kernels/bench_kernels --benchmark_repetitions=3 --benchmark_filter=Gemv
// GEMV rotates among enough distinct weight matrices that the working set exceeds 1.5 GB (the L3
// is 480 MB), so every call streams its weights from DRAM. Counters: bytes_per_second (weight
// bytes), FLOP/s, and the fraction of the measured ceiling (probe_read_bandwidth for GEMV,
// probe_fma_peak for GEMM).
#include <benchmark/benchmark.h>
#include <sys/mman.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <numeric>
#include <vector>

#include "core/half.hpp"
#include "kernels/cpu/kernels.hpp"

namespace lc = latprof::cpu;

namespace {

// Ceilings, re-measured at the start of every benchmark (other processes on this 2-core machine
// come and go; a ceiling measured next to the kernel makes the percentage less noisy).
double read_bw() {
  return lc::probe_read_bandwidth(size_t(1) << 30, 3).value;
}
double fma_peak() {
  return lc::probe_fma_peak(3).value;
}

// Google Benchmark divides rate counters by the main thread's CPU time, which is wrong for
// multithreaded kernels; rates here are computed from wall time measured around the loop.
struct WallTimer {
  std::chrono::steady_clock::time_point t0 = std::chrono::steady_clock::now();
  double seconds() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
};

// Weights on 2 MiB-aligned, transparent-huge-page memory, like the read-bandwidth probe's buffer
// (with 4 KiB pages the GEMV loses ~5% to TLB misses and prefetch restarts).
struct FreeDeleter {
  void operator()(uint8_t* p) const { std::free(p); }
};

uint8_t* huge_alloc(size_t bytes) {
  const size_t align = size_t(2) << 20;
  auto* p = static_cast<uint8_t*>(std::aligned_alloc(align, (bytes + align - 1) / align * align));
  if (!p) throw std::bad_alloc();
  madvise(p, bytes, MADV_HUGEPAGE);
  return p;
}

struct Matrix {
  std::unique_ptr<uint8_t[], FreeDeleter> data;
  std::vector<float> scales;
  lc::Weight w;
};

// How W8A16 weights are laid out: as the CPU backend stores them on this CPU (rows interleaved
// in fours where its decode GEMV reads that layout and StreamTuning::i8_rows4 says so,
// kernels.hpp), row-major, or interleaved wherever the GEMV reads it.
enum class Layout { backend, row_major, rows4 };

Matrix make_matrix(lc::WType type, int64_t n_out, int64_t n_in, uint64_t key,
                   Layout layout = Layout::backend) {
  Matrix m;
  const size_t elem = type == lc::WType::f16 ? 2 : 1;
  m.data.reset(huge_alloc(size_t(n_out * n_in) * elem));
  if (type == lc::WType::f16) {
    lc::fill_f16(reinterpret_cast<uint16_t*>(m.data.get()), n_out * n_in, key, 0.02f);
  } else {
    m.scales.resize(size_t(n_out));
    lc::fill_i8(reinterpret_cast<int8_t*>(m.data.get()), m.scales.data(), n_out, n_in, key, 0.02f);
  }
  m.w = {m.data.get(), m.scales.empty() ? nullptr : m.scales.data(), type, n_out, n_in};
  const bool rows4 =
      layout == Layout::rows4 || (layout == Layout::backend && lc::stream_tuning().i8_rows4);
  if (type == lc::WType::i8 && rows4 && lc::gemv_int8_dot() && lc::rows4_fits(n_out, n_in)) {
    lc::interleave_rows4(reinterpret_cast<int8_t*>(m.data.get()), n_out, n_in);
    m.w.rows4 = true;
  }
  return m;
}

double weight_bytes(const lc::Weight& w) {
  return double(w.n_out * w.n_in) * (w.type == lc::WType::f16 ? 2.0 : 1.0);
}

// args: type, n_out, n_in, m
// Times gemv() on m activation rows over `mats` in turn (many copies: from DRAM; one: from cache),
// after 3 warm-up calls; sets GBps (weight bytes) and GFLOPs from wall time, returns bytes/s.
double time_gemv(benchmark::State& state, const std::vector<Matrix>& mats, int64_t m) {
  const lc::Weight& w0 = mats[0].w;
  std::vector<float> x(size_t(m * w0.n_in)), y(size_t(m * w0.n_out));
  lc::fill_f32(x.data(), int64_t(x.size()), 7, 0.0f, 1.0f);
  size_t next = 0;
  auto call = [&] {
    lc::gemv(mats[next].w, x.data(), m, y.data());
    next = (next + 1) % mats.size();
  };
  for (int i = 0; i < 3; ++i) call();
  const WallTimer timer;
  for (auto _ : state) {
    call();
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  const double dt = timer.seconds(), it = double(state.iterations());
  const double bytes = weight_bytes(w0);
  state.SetBytesProcessed(int64_t(bytes) * state.iterations());
  state.counters["GBps"] = bytes * it / dt * 1e-9;
  state.counters["GFLOPs"] = 2.0 * double(m * w0.n_out * w0.n_in) * it / dt * 1e-9;
  return bytes * it / dt;
}

// type: 0 FP16, 1 W8A16 (as the backend stores it on this CPU), 2 W8A8, 3 W8A16 row-major, 4 W8A16
// with its rows interleaved in fours
// The GEMV of m activation rows over > 1.5 GB of distinct n_out x n_in weights (from DRAM), with
// its share of a read ceiling measured next to it.
void time_gemv_from_dram(benchmark::State& state, lc::WType type, int64_t n_out, int64_t n_in,
                         int64_t m, Layout layout = Layout::backend) {
  const double ceiling = read_bw();
  const double bytes = double(n_out * n_in) * (type == lc::WType::f16 ? 2.0 : 1.0);
  const int copies = int(1.6e9 / bytes) + 1;
  std::vector<Matrix> mats;
  for (int i = 0; i < copies; ++i) mats.push_back(make_matrix(type, n_out, n_in, 1000 + i, layout));
  const double rate = time_gemv(state, mats, m);
  state.counters["pct_read_bw"] = 100.0 * rate / ceiling;
  state.counters["copies"] = copies;
  state.counters["ceiling_GBps"] = ceiling * 1e-9;
}

void BM_Gemv(benchmark::State& state) {
  const int64_t t = state.range(0);
  const Layout layout = t == 3 ? Layout::row_major : t == 4 ? Layout::rows4 : Layout::backend;
  time_gemv_from_dram(state, t >= 3 ? lc::WType::i8 : lc::WType(t), state.range(1), state.range(2),
                      state.range(3), layout);
}

// args: type (0 FP16, 1 W8A16, 2 W8A8), n_in, m, on. A GEMV from DRAM on tinyllama-1.1b's gate
// projection (n_in 2,048: 5,632 x 2,048) or 4,096 x n_in (llama-2-7b's down projection at 11,008;
// FP16 also 5,632-8,192, where its one-row choice turns on Intel) with its vendor-dependent choice
// (StreamTuning, kernels.hpp) set by hand instead of by the CPU's vendor, so one process compares
// both (run with --benchmark_enable_random_interleaving): INT8 on = the 1-2 row stream prefetched
// in software, FP16 on = one activation row read as fp16 (off: as fp32 holding the same values).
void BM_GemvStreamTuning(benchmark::State& state) {
  const auto type = lc::WType(state.range(0));
  const int64_t n_in = state.range(1), n_out = n_in == 2048 ? 5632 : 4096;
  lc::StreamTuning t = lc::vendor_stream_tuning();
  const bool on = state.range(3) != 0;
  if (type == lc::WType::f16)
    t.f16_one_row_f32_max_in = on ? 0 : n_in;
  else
    t.i8_prefetch = on;
  lc::set_stream_tuning(t);
  time_gemv_from_dram(state, type, n_out, n_in, state.range(2));
  lc::reset_stream_tuning();
}

// args: type, n_in, m. The same GEMV with its weights resident in the L2 caches: one matrix of
// ~1.5 MB (each of 2 threads streams ~0.75 MB from its own 1-2 MB L2, warmed by the first calls),
// so the rate is the kernel's own ceiling (instructions, conversion, dispatch) with DRAM out of
// the way. A kernel whose hot rate is near its DRAM rate is bound by its instructions, not by the
// memory. n_out is a multiple of 4, so INT8 weights take the layout the backend gives them (rows
// interleaved in fours, kernels.hpp): at 5,632 columns, 279 rows had left them row-major, a path
// the decode never takes (hot on AMD Zen 4, minutes apart: 48.6 GB/s, 276 interleaved rows 63.5).
void BM_GemvHot(benchmark::State& state) {
  const auto type = lc::WType(state.range(0));
  const int64_t n_in = state.range(1), m = state.range(2);
  const int64_t n_out = (int64_t(1536) << 10) / (n_in * (type == lc::WType::f16 ? 2 : 1)) / 4 * 4;
  std::vector<Matrix> mats;
  mats.push_back(make_matrix(type, n_out, n_in, 77));
  time_gemv(state, mats, m);
  state.counters["n_out"] = double(n_out);
}

// Times lc::gemm of m activation rows over one weight matrix of the shape (bytes processed: its
// weights a call); returns its multiply-adds x 2 per second.
double time_gemm(benchmark::State& state, lc::WType type, int64_t n_out, int64_t n_in, int64_t m) {
  const Matrix mat = make_matrix(type, n_out, n_in, 99);
  std::vector<float> x(size_t(m * n_in)), y(size_t(m * n_out));
  lc::fill_f32(x.data(), int64_t(x.size()), 7, 0.0f, 1.0f);
  const WallTimer timer;
  for (auto _ : state) {
    lc::gemm(mat.w, x.data(), m, y.data());
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  const double dt = timer.seconds(), it = double(state.iterations());
  state.SetBytesProcessed(int64_t(weight_bytes(mat.w)) * state.iterations());
  return 2.0 * double(m * n_out * n_in) * it / dt;
}

// args: type, n_out, n_in, m
void BM_Gemm(benchmark::State& state) {
  const double ceiling = fma_peak();
  const double rate =
      time_gemm(state, lc::WType(state.range(0)), state.range(1), state.range(2), state.range(3));
  state.counters["GFLOPs"] = rate * 1e-9;
  state.counters["pct_fma_peak"] = 100.0 * rate / ceiling;
  state.counters["ceiling_GFLOPs"] = ceiling * 1e-9;
}

// args: type (0 FP16, 1 W8A16, 2 W8A8), n_out, n_in, m, amx: the GEMM with the AMX tiles on or
// off (off: the FMA GEMM for FP16, the AVX512-VNNI GEMM for INT8); the counter GOPs counts a
// multiply-add as 2.
void BM_GemmAmx(benchmark::State& state) {
  const auto type = lc::WType(state.range(0));
  const bool amx = state.range(4) != 0;
  if (amx && !(type == lc::WType::f16 ? lc::has_amx_bf16() : lc::has_amx_int8())) {
    state.SkipWithError("no AMX for this type on this CPU (or the OS refused the tile state)");
    return;
  }
  lc::set_amx_enabled(amx);
  const double rate = time_gemm(state, type, state.range(1), state.range(2), state.range(3));
  lc::set_amx_enabled(true);
  state.counters["GOPs"] = rate * 1e-9;
  state.counters["amx"] = amx ? 1 : 0;
}

// Times the GEMV (path 0) or the GEMM (path 1) of m activation rows over `copies` distinct
// weight matrices, rotated so they come from DRAM; sets the GFLOPs counter, returns the weight
// bytes streamed per second.
double time_linear(benchmark::State& state, int64_t path, lc::WType type, int64_t n_out,
                   int64_t n_in, int64_t m, int copies, int seed, Layout layout = Layout::backend) {
  std::vector<Matrix> mats;
  for (int i = 0; i < copies; ++i) mats.push_back(make_matrix(type, n_out, n_in, seed + i, layout));
  std::vector<float> x(size_t(m * n_in)), y(size_t(m * n_out));
  lc::fill_f32(x.data(), int64_t(x.size()), 7, 0.0f, 1.0f);
  int next = 0;
  const WallTimer timer;
  for (auto _ : state) {
    if (path == 0)
      lc::gemv(mats[size_t(next)].w, x.data(), m, y.data());
    else
      lc::gemm(mats[size_t(next)].w, x.data(), m, y.data());
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
    next = (next + 1) % copies;
  }
  const double dt = timer.seconds(), it = double(state.iterations());
  state.counters["GFLOPs"] = 2.0 * double(m * n_out * n_in) * it / dt * 1e-9;
  return double(n_out * n_in) * (type == lc::WType::f16 ? 2.0 : 1.0) * it / dt;
}

// GEMV vs GEMM at small m (the matmul() crossover). args: path (0 gemv, 1 gemm), type, m
void BM_Crossover(benchmark::State& state) {
  // 8 x 32 MB fp16: not L3-resident... mostly
  time_linear(state, state.range(0), lc::WType(state.range(1)), 4096, 4096, state.range(2), 8,
              2000);
}

// Engine steps of 8-32 tokens (decode batches, mixed decode + prefill chunks): GEMV vs GEMM on
// the projections of tinyllama-1.1b (shapes 0-3) and llama-2-7b (4-6), > 256 MB of distinct
// weights rotated so they come from DRAM (L3 32 MB). args: path (0 gemv, 1 gemm), i8 (0 FP16, 1
// W8A16 as the backend stores it here, 3 W8A16 row-major, 4 W8A16 interleaved in fours), shape, m
void BM_Step(benchmark::State& state) {
  static const std::pair<int64_t, int64_t> kShapes[] = {{2048, 2048}, {256, 2048},  {5632, 2048},
                                                        {2048, 5632}, {4096, 4096}, {11008, 4096},
                                                        {4096, 11008}};
  const int64_t t = state.range(1);
  const auto type = t == 0 ? lc::WType::f16 : lc::WType::i8;
  const Layout layout = t == 3 ? Layout::row_major : t == 4 ? Layout::rows4 : Layout::backend;
  const auto [n_out, n_in] = kShapes[state.range(2)];
  const double bytes = double(n_out * n_in) * (type == lc::WType::f16 ? 2.0 : 1.0);
  state.counters["GBps"] = time_linear(state, state.range(0), type, n_out, n_in, state.range(3),
                                       int(2.6e8 / bytes) + 1, 3000, layout) *
                           1e-9;
}

// Decode attention (n_seq 1) at llama-2-7b's heads (model 0: 32 heads, hd 128) or
// tinyllama-1.1b's (model 1: 32 query heads on 4 kv heads, hd 64): enough distinct caches of
// `context` positions are rotated that > 1.1 GB is touched between reuses (more than any L3
// here), so K and V come from DRAM. bytes_per_second counts the K+V bytes read (an int8 cache's
// scales included). kv: 0 an fp16 cache in the CPU backend's layout (K in 16-position tiles), 1
// bf16 (vdpbf16ps where the CPU has AVX512-BF16, set here whatever StreamTuning::bf16_kv_dot
// says), 2 bf16 widened to fp32, 3 int8 (vpdpbusd scores
// where the CPU has AVX512-VNNI), 4 int8 widened, 5 fp16 with K by rows (the layout before the
// tiles).
// hot (BM_AttentionDecodeHot): one cache, read again every call, so it stays in the caches (L2
// and L3; llama-2-7b's heads at 2,000 positions, 32 MB, spill to DRAM): the kernel's own rate
// with the memory out of the way. A decode whose hot time is near its DRAM time is bound by its
// arithmetic and bookkeeping (tinyllama's heads at 2,000 positions on AMD Zen 4, fp16: 130 us
// either way; reports/cpu-kernels.md).
// args: context, n_new, model, kv
void attention_decode(benchmark::State& state, bool hot) {
  const int64_t ctx = state.range(0), n_new = state.range(1);
  const bool tiny = state.range(2) == 1;
  const int64_t kind = state.range(3);
  const auto kv = kind == 0 || kind == 5 ? lc::KvType::f16
                  : kind <= 2            ? lc::KvType::bf16
                                         : lc::KvType::i8;
  lc::allow_kv_dot(kind != 2 && kind != 4);
  lc::StreamTuning tuning = lc::stream_tuning();  // BM_AttentionDecodeStreamTuning's, or the CPU's
  tuning.bf16_kv_dot = true;
  lc::set_stream_tuning(tuning);
  const int n_heads = 32, n_kv = tiny ? 4 : 32, hd = tiny ? 64 : 128;
  const int64_t kv_dim = int64_t(n_kv) * hd, qd = int64_t(n_heads) * hd;
  const double ceiling = hot ? 0.0 : read_bw();  // hot: no DRAM figure to judge against
  // One block of ctx positions rounded up to whole 16-position tiles (the random fill is as
  // random in any layout).
  const int64_t block = (ctx + 15) / 16 * 16;
  const lc::KLayout kl = kind == 5 ? lc::KLayout::rows : lc::k_layout_for(kv, block);
  const size_t cache_elems = size_t(block * kv_dim);
  const size_t cache_bytes = size_t(block * lc::kv_row_bytes(kv, n_kv, hd));
  const double bytes = 2.0 * double(ctx * lc::kv_row_bytes(kv, n_kv, hd));  // K + V read
  const int copies = hot ? 1 : int(1.1e9 / bytes) + 1;
  std::unique_ptr<uint8_t[], FreeDeleter> k(huge_alloc(cache_bytes * size_t(copies))),
      v(huge_alloc(cache_bytes * size_t(copies)));
  if (kv == lc::KvType::i8) {  // fp16 fill's values, quantised
    std::vector<uint16_t> h(cache_elems);
    std::vector<float> kf(cache_elems), vf(cache_elems);
    lc::fill_f16(h.data(), int64_t(h.size()), 31, 1.0f);
    for (size_t i = 0; i < h.size(); ++i) kf[i] = latprof::half_to_float(h[i]);
    lc::fill_f16(h.data(), int64_t(h.size()), 32, 1.0f);
    for (size_t i = 0; i < h.size(); ++i) vf[i] = latprof::half_to_float(h[i]);
    std::vector<int32_t> slots(static_cast<size_t>(block));
    std::iota(slots.begin(), slots.end(), 0);
    lc::kv_store_paged(kf.data(), vf.data(), block, slots.data(), n_kv, hd, kv, k.get(), v.get());
    for (int c = 1; c < copies; ++c) {
      std::memcpy(k.get() + size_t(c) * cache_bytes, k.get(), cache_bytes);
      std::memcpy(v.get() + size_t(c) * cache_bytes, v.get(), cache_bytes);
    }
  } else {
    auto* kc = reinterpret_cast<uint16_t*>(k.get());
    auto* vc = reinterpret_cast<uint16_t*>(v.get());
    lc::fill_f16(kc, int64_t(cache_elems) * copies, 31, 1.0f);
    lc::fill_f16(vc, int64_t(cache_elems) * copies, 32, 1.0f);
    if (kv == lc::KvType::bf16)  // the same values, rounded to bf16
      for (uint16_t* c : {kc, vc})
        for (size_t i = 0; i < cache_elems * size_t(copies); ++i)
          c[i] = latprof::float_to_bf16(latprof::half_to_float(c[i]));
  }
  std::vector<float> q(size_t(n_new * qd)), out(q.size());
  lc::fill_f32(q.data(), int64_t(q.size()), 7, 0.0f, 1.0f);
  // Each cache copy is one block of ctx positions; the new tokens are its last n_new.
  std::vector<int32_t> query_start = {0, int32_t(n_new)}, positions, table = {0};
  for (int64_t t = 0; t < n_new; ++t) positions.push_back(int32_t(ctx - n_new + t));
  const lc::RaggedBatch batch{1, query_start.data(), positions.data(), table.data(), 1, block};
  int next = 0;
  const WallTimer timer;
  for (auto _ : state) {
    const size_t off = size_t(next) * cache_bytes;
    lc::attention_paged(q.data(), kv, k.get() + off, v.get() + off, batch, n_heads, n_kv, hd, 0,
                        out.data(), kl);
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
    next = (next + 1) % copies;
  }
  const double dt = timer.seconds(), it = double(state.iterations());
  state.SetBytesProcessed(int64_t(bytes) * state.iterations());
  state.counters["GBps"] = bytes * it / dt * 1e-9;
  state.counters["us_per_layer"] = dt / it * 1e6;
  state.counters["copies"] = copies;
  if (!hot) {
    state.counters["pct_read_bw"] = 100.0 * bytes * it / dt / ceiling;
    state.counters["ceiling_GBps"] = ceiling * 1e-9;
  }
  lc::allow_kv_dot(true);
  lc::reset_stream_tuning();
}
void BM_AttentionDecode(benchmark::State& state) {
  attention_decode(state, false);
}
void BM_AttentionDecodeHot(benchmark::State& state) {
  attention_decode(state, true);
}
// BM_AttentionDecode with StreamTuning::mha_k_prefetch (the MHA decode's K prefetch on a tiled
// cache) set by hand (arg on), so one process compares both
// (--benchmark_enable_random_interleaving). args: context, n_new, model, kv, on
void BM_AttentionDecodeStreamTuning(benchmark::State& state) {
  lc::StreamTuning t = lc::vendor_stream_tuning();
  t.mha_k_prefetch = state.range(4) != 0;
  lc::set_stream_tuning(t);
  attention_decode(state, false);
  lc::reset_stream_tuning();
}

// Prefill attention (one sequence, causal, fp16 KV cache) of `tokens` new tokens after `past`
// cached positions, at llama-2-7b's heads (model 0) or tinyllama-1.1b's (model 1).
// GFLOPs counts the cost model's 4 * hd FLOPs per visible (query head, key) pair. rows: 0 K in
// the CPU backend's layout (16-position tiles), 1 K by rows. amx: 1 the AMX-BF16 tiles where the
// CPU has them (an error elsewhere), 0 the multiply-add tiles.
// args: tokens, past, model, rows, amx
void BM_AttentionPrefill(benchmark::State& state) {
  const bool amx = state.range(4) != 0;
  if (amx && !lc::has_amx_bf16()) {
    state.SkipWithError("no AMX-BF16 on this CPU (or the OS refused the tile state)");
    return;
  }
  const int64_t n_new = state.range(0), past = state.range(1), ctx = past + n_new;
  const bool tiny = state.range(2) == 1;
  const int n_heads = 32, n_kv = tiny ? 4 : 32, hd = tiny ? 64 : 128;
  const int64_t kv_dim = int64_t(n_kv) * hd, qd = int64_t(n_heads) * hd;
  const int64_t block = (ctx + 15) / 16 * 16;  // one block of whole 16-position tiles
  const lc::KLayout kl =
      state.range(3) == 1 ? lc::KLayout::rows : lc::k_layout_for(lc::KvType::f16, block);
  std::vector<uint16_t> kc(size_t(block * kv_dim)), vc(kc.size());
  lc::fill_f16(kc.data(), int64_t(kc.size()), 31, 1.0f);
  lc::fill_f16(vc.data(), int64_t(vc.size()), 32, 1.0f);
  std::vector<float> q(size_t(n_new * qd)), out(q.size());
  lc::fill_f32(q.data(), int64_t(q.size()), 7, 0.0f, 1.0f);
  std::vector<int32_t> query_start = {0, int32_t(n_new)}, positions, table = {0};
  for (int64_t t = 0; t < n_new; ++t) positions.push_back(int32_t(past + t));
  const lc::RaggedBatch batch{1, query_start.data(), positions.data(), table.data(), 1, block};
  lc::set_amx_enabled(amx);
  const WallTimer timer;
  for (auto _ : state) {
    lc::attention_paged(q.data(), lc::KvType::f16, kc.data(), vc.data(), batch, n_heads, n_kv, hd,
                        0, out.data(), kl);
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  const double dt = timer.seconds(), it = double(state.iterations());
  lc::set_amx_enabled(true);
  double pairs = 0;  // visible (query token, key) pairs
  for (int64_t t = 0; t < n_new; ++t) pairs += double(past + t + 1);
  const double flop = 4.0 * hd * n_heads * pairs;
  state.counters["GFLOPs"] = flop * it / dt * 1e-9;
  state.counters["pct_fma_peak"] = 100.0 * flop * it / dt / fma_peak();
  state.counters["ms_per_layer"] = dt / it * 1e3;
}

void BM_Probe(benchmark::State& state) {
  lc::ProbeResult r;
  for (auto _ : state) {
    switch (state.range(0)) {
      case 0:
        r = lc::probe_read_bandwidth(size_t(2) << 30, 5);
        break;
      case 1:
        r = lc::probe_triad_bandwidth(size_t(3) << 30, 5);
        break;
      case 2:
        r = lc::probe_fma_peak(5);
        break;
      default:
        r = lc::probe_int8_peak(5);
        break;
    }
  }
  state.counters["best_G"] = r.value * 1e-9;
  state.counters["median_G"] = r.median * 1e-9;
  state.SetLabel(state.range(0) < 2 ? "GB/s (1e9 bytes)" : "Gop/s");
}

// Synthetic weights (the setup of every run without a weights file): one 11,008 x 4,096 matrix,
// fp16 (fill) or int8 (fill_i8 into the rows-in-fours layout), on the scalar path or AVX-512 (16
// values at a time); the buffer is written once before timing, so page faults are not counted.
void BM_Fill(benchmark::State& state) {
  const bool i8 = state.range(0) != 0, vec = state.range(1) != 0;
  if (vec && lc::detected_isa() != lc::Isa::avx512) {
    state.SkipWithError("no AVX-512 on this CPU");
    return;
  }
  const int64_t n_out = 11008, n_in = 4096, n = n_out * n_in;
  const size_t bytes = size_t(n) * (i8 ? 1 : 2);
  std::unique_ptr<uint8_t[], FreeDeleter> buf(huge_alloc(bytes));
  std::memset(buf.get(), 0, bytes);
  std::vector<float> scales(static_cast<size_t>(n_out));
  lc::force_isa(vec ? lc::Isa::avx512 : lc::Isa::scalar);
  auto fill = [&] {
    if (i8)
      lc::fill_i8(reinterpret_cast<int8_t*>(buf.get()), scales.data(), n_out, n_in, 7, 0.02f, true);
    else
      lc::fill_f16(reinterpret_cast<uint16_t*>(buf.get()), n, 7, 0.02f);
  };
  fill();
  WallTimer t;
  for (auto _ : state) {
    fill();
    benchmark::ClobberMemory();
  }
  const double s = t.seconds();
  lc::force_isa(lc::detected_isa());
  state.counters["ns_per_value"] = s * 1e9 / (double(n) * double(state.iterations()));
  state.counters["GB_per_s"] = double(bytes) * double(state.iterations()) / s * 1e-9;
}

void shapes(benchmark::internal::Benchmark* b, int64_t m) {
  for (int t : {0, 1})
    for (auto [o, i] :
         {std::pair<int64_t, int64_t>{4096, 4096}, {11008, 4096}, {4096, 11008}, {32000, 4096}})
      b->Args({t, o, i, m});
  b->ArgNames({"type", "n_out", "n_in", "m"});
}

}  // namespace

BENCHMARK(BM_Probe)->DenseRange(0, 3)->Iterations(1)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_Gemv)
    ->Apply([](benchmark::internal::Benchmark* b) { shapes(b, 1); })
    ->Args({0, 4096, 4096, 4})
    ->Args({1, 4096, 4096, 4})
    // Engine decode steps of 2-4 sequences on the MLP's shapes (FP16: fp16 activations in R-row
    // blocks; W8A16: 2,048-column panels, whose activations stay in L1; reports/cpu-kernels.md),
    // FP16 and W8A16.
    ->ArgsProduct({{0, 1}, {11008}, {4096}, {2, 3, 4}})
    ->ArgsProduct({{0, 1}, {4096}, {11008}, {2, 3, 4}})
    // Engine decode steps of 8 sequences: a square projection and the MLP's two shapes.
    ->Args({0, 4096, 4096, 8})
    ->Args({0, 11008, 4096, 8})
    ->Args({0, 4096, 11008, 8})
    // type 0 FP16, 1 W8A16 (as the backend stores it here), 2 W8A8, 3 W8A16 row-major, 4 W8A16
    // interleaved in fours on tinyllama-1.1b's gate and down projections, 1-16 activation rows
    // (run with --benchmark_enable_random_interleaving to alternate them as the bandwidth drifts).
    ->ArgsProduct({{0, 1, 2, 3, 4}, {5632}, {2048}, {1, 2, 3, 4, 6, 8, 16}})
    ->ArgsProduct({{0, 1, 2, 3, 4}, {2048}, {5632}, {1, 2, 3, 4, 6, 8, 16}})
    // The W8A16 layouts (StreamTuning::i8_rows4) on llama-2-7b's MLP shapes.
    ->ArgsProduct({{3, 4}, {11008}, {4096}, {1, 2, 4, 8, 16}})
    ->ArgsProduct({{3, 4}, {4096}, {11008}, {1, 2, 4, 8, 16}})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();
BENCHMARK(BM_GemvStreamTuning)
    ->ArgsProduct({{0, 1, 2}, {2048, 11008}, {1, 2}, {0, 1}})
    ->ArgsProduct({{0}, {5632, 6144, 8192}, {1}, {0, 1}})
    ->ArgNames({"type", "n_in", "m", "on"})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();
BENCHMARK(BM_GemvHot)
    ->ArgsProduct({{0, 1, 2}, {2048, 5632}, {1, 2, 4, 8}})
    ->ArgNames({"type", "n_in", "m"})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();
BENCHMARK(BM_Gemm)
    ->Apply([](benchmark::internal::Benchmark* b) { shapes(b, 500); })
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK(BM_GemmAmx)
    ->ArgsProduct({{0, 1, 2}, {4096, 11008}, {4096}, {64, 500}, {0, 1}})
    ->Args({1, 4096, 11008, 500, 0})
    ->Args({1, 4096, 11008, 500, 1})
    ->Args({0, 4096, 11008, 500, 0})
    ->Args({0, 4096, 11008, 500, 1})
    ->Args({0, 4096, 4096, 2000, 0})
    ->Args({0, 4096, 4096, 2000, 1})
    ->Args({1, 4096, 4096, 2000, 1})
    ->Args({2, 4096, 4096, 2000, 1})
    ->ArgNames({"type", "n_out", "n_in", "m", "amx"})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK(BM_Crossover)
    ->ArgsProduct({{0, 1}, {0, 1}, {1, 2, 4, 8, 16, 32}})
    ->ArgNames({"gemm", "i8", "m"})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

BENCHMARK(BM_Step)
    ->ArgsProduct({{0, 1}, {0, 1}, {0, 1, 2, 3, 4, 5, 6}, {8, 9, 12, 16, 24, 32}})
    // The W8A16 layouts (StreamTuning::i8_rows4) in the GEMM of engine steps and short prompts.
    ->ArgsProduct({{1}, {3, 4}, {0, 2, 3, 5, 6}, {16, 64, 256}})
    ->ArgNames({"gemm", "i8", "shape", "m"})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

BENCHMARK(BM_AttentionDecode)
    ->ArgsProduct({{500, 2000, 4000}, {1}, {0, 1}, {0, 1, 2, 3, 4, 5}})
    ->Args({2048, 4, 0, 0})
    ->ArgNames({"ctx", "n_new", "model", "kv"})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();
BENCHMARK(BM_AttentionDecodeStreamTuning)
    ->ArgsProduct({{500, 2000, 4000}, {1}, {0}, {0}, {0, 1}})
    ->ArgNames({"ctx", "n_new", "model", "kv", "on"})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();
BENCHMARK(BM_AttentionDecodeHot)
    ->ArgsProduct({{500, 2000}, {1}, {0, 1}, {0, 1, 3, 5}})
    ->ArgNames({"ctx", "n_new", "model", "kv"})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

BENCHMARK(BM_Fill)
    ->ArgsProduct({{0, 1}, {0, 1}})
    ->ArgNames({"i8", "avx512"})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

BENCHMARK(BM_AttentionPrefill)
    ->ArgsProduct({{500}, {0}, {0, 1}, {0, 1}, {1, 0}})
    ->ArgsProduct({{512}, {1536}, {0, 1}, {0}, {1, 0}})
    ->Args({512, 3584, 0, 0, 1})
    ->Args({512, 3584, 0, 0, 0})
    ->Args({512, 1536, 1, 1, 1})
    ->Args({512, 1536, 1, 1, 0})
    ->ArgNames({"tokens", "past", "model", "rows", "amx"})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

BENCHMARK_MAIN();
