// Decode-path linear layer: y[m, n_out] = x[m, n_in] · Wᵀ for a few activation rows. Every
// weight byte is read from memory once per call (for m <= 16): each thread streams a contiguous
// band of output rows. This file holds the dispatcher and the portable reference path.
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <vector>

#include "core/half.hpp"
#include "kernels/cpu/internal.hpp"

namespace latprof::cpu {
namespace detail {

void gemv_rows_scalar(const Weight& w, const float* x, int64_t m, float* y, int64_t r0,
                      int64_t r1) {
  const int64_t n = w.n_in;
  std::vector<float> row(static_cast<size_t>(n));
  for (int64_t r = r0; r < r1; ++r) {
    // Dequantise one weight row, then dot it with every activation row.
    if (w.type == WType::f16) {
      const uint16_t* src = static_cast<const uint16_t*>(w.data) + r * n;
      for (int64_t k = 0; k < n; ++k) row[size_t(k)] = half_to_float(src[k]);
    } else {
      const int8_t* src = static_cast<const int8_t*>(w.data) + r * n;
      for (int64_t k = 0; k < n; ++k) row[size_t(k)] = float(src[k]);
    }
    const float scale = int8_storage(w.type) ? w.scales[r] : 1.0f;
    for (int64_t i = 0; i < m; ++i) {
      const float* xi = x + i * n;
      float part[8] = {0, 0, 0, 0, 0, 0, 0, 0};  // 8 partial sums: vectorisable, less rounding
      int64_t k = 0;
      for (; k + 8 <= n; k += 8)
        for (int j = 0; j < 8; ++j) part[j] += xi[k + j] * row[size_t(k + j)];
      for (; k < n; ++k) part[0] += xi[k] * row[size_t(k)];
      const float s =
          ((part[0] + part[1]) + (part[2] + part[3])) + ((part[4] + part[5]) + (part[6] + part[7]));
      y[i * w.n_out + r] = s * scale;
    }
  }
}

void round_activations_i8(const float* x, int64_t m, int64_t n, float* out) {
  for (int64_t j = 0; j < m; ++j) {
    const float* xj = x + j * n;
    float mx = 0;
    for (int64_t k = 0; k < n; ++k) mx = std::max(mx, std::fabs(xj[k]));
    const float s = i8_activation_scale(mx);
    const float inv = 1.0f / s;
    for (int64_t k = 0; k < n; ++k) out[j * n + k] = float(round_i8(xj[k], inv)) * s;
  }
}

}  // namespace detail

bool gemv_int8_dot() {
  static const bool vnni512 = __builtin_cpu_supports("avx512vnni");
  return active_isa() == Isa::avx512 && vnni512;
}

void gemv(const Weight& w, const float* x, int64_t m, float* y) {
  gemv_group(&w, 1, x, m, &y);
}

namespace {

// gemv_group; avx2_i16: INT8 weights may take the AVX2 W8A16 path (not for W8A8's rounded
// activations, which keep their FP32 path there).
void gemv_group_impl(const Weight* ws, int n, const float* x, int64_t m, float* const* ys,
                     bool avx2_i16) {
  if (m <= 0 || n <= 0) return;
  const Weight& w0 = ws[0];
  if (!detail::same_input(ws, n)) {  // not one group: one call each
    for (int j = 0; j < n; ++j) gemv_group_impl(ws + j, 1, x, m, ys + j, avx2_i16);
    return;
  }
  auto* rows = detail::gemv_rows_scalar;
  switch (active_isa()) {
    case Isa::avx512:
      rows = detail::gemv_rows_avx512;
      break;
    case Isa::avx2:
      rows = detail::gemv_rows_avx2;
      break;
    case Isa::scalar:
      break;
  }
  constexpr int64_t kMaxM = 8;      // activation rows one kernel call holds in registers
  constexpr int64_t kMaxPass = 16;  // activation rows sharing one pass over the weights from DRAM
  constexpr int64_t kOwnRows = 4;   // W8A16: up to this many rows rounded by each thread (below)
  // Work is handed out in chunks of whole 4-row groups, ~256 KB of weights each, with guided
  // scheduling: each thread first takes a long run of consecutive chunks (half the rows, then a
  // quarter, ...), i.e. one linear stream of weights, and the runs shrink towards the end, so a
  // thread slowed down by another process on its core does not hold the others up. (With
  // dynamic scheduling of single chunks a thread's stream jumped every 256 KB and the prefetch
  // restarted: a tinyllama decode step's weights at 85% of the read bandwidth, 98% this way.)
  // A run is one kernel call (per weight it spans): with a call per chunk, the kernel's software
  // prefetch stopped at each chunk's end and the next chunk's first 8 KB came without it; one
  // call a run took a tinyllama decode step's GEMVs to 0.965-0.977x the time in FP16 and
  // 0.968-0.988x in INT8 on Zen 4 (reports/cpu-kernels.md).
  // The chunks of all the group's weights are shared out in one parallel region (one fork and
  // one join for q, k and v).
  const int64_t n_in = w0.n_in;
  const int64_t row_bytes = n_in * (w0.type == WType::f16 ? 2 : 1);
  const int64_t chunk =
      std::max<int64_t>(4, (int64_t(256) << 10) / std::max<int64_t>(row_bytes, 1) / 4 * 4);
  if (n > kMatmulGroupMax) {
    for (int j = 0; j < n; j += kMatmulGroupMax)
      gemv_group_impl(ws + j, std::min(kMatmulGroupMax, n - j), x, m, ys + j, avx2_i16);
    return;
  }
  // INT8 weights on AVX512-VNNI: W8A16 (int16 activations, vpdpwssd: gemv_vnni_avx512.cpp) or
  // W8A8 (int8 activations, vpdpbusd: gemv_w8a8_avx512.cpp). Elsewhere W8A8 rounds the activations
  // (q * s in fp32) and runs the INT8-weight path.
  // INT8 weights on AVX2 without VNNI: W8A16 too, in vpmaddwd (gemv_avx2.cpp), the same int16
  // activations; on AMD Zen 3 the FP32 path (6 uops per 16 weights) stayed below the read
  // bandwidth (reports/cpu-kernels.md).
  const bool i16_avx2 = avx2_i16 && w0.type == WType::i8 && active_isa() == Isa::avx2;
  const bool use_vnni = (int8_storage(w0.type) && gemv_int8_dot()) || i16_avx2;
  auto* const quantize_i16 =
      i16_avx2 ? detail::quantize_activations_i16_avx2 : detail::quantize_activations_i16;
  auto* const rows_i16 = i16_avx2 ? detail::gemv_rows_i8_avx2 : detail::gemv_rows_i8_vnni;
  const bool w8a8 = w0.type == WType::i8a8;
  if (w8a8 && !use_vnni)
    return detail::with_rounded_activations(ws, n, x, m, [&](const Weight* w8, const float* xr) {
      gemv_group_impl(w8, n, xr, m, ys, false);
    });
  // FP16 weights multiply activations rounded to fp16 (kernels.hpp). On AVX-512, groups of up to
  // kF16X16MaxRows activation rows take the fp16 rows themselves (gemv_rows_f16_x16): the loop
  // then reads half the activation bytes again for every weight row, and 8-44 KB of fp32
  // activations a row (2,048-11,008 wide) no longer contest AMD Zen 4's 32 KiB L1 with the
  // weight stream: one row in one process, alternating, 1.09-1.18x on every decode shape (50-53
  // GB/s of a 55-60 GB/s read), tinyllama FP16 decode steps 1.25x; 2-7 rows 1.02-1.78x
  // (reports/cpu-kernels.md). Groups of 8 rows, other ISAs and steps with a row beyond fp16's
  // range take the fp32 path (round_rows_f16: rows in range rounded, to the same values; the
  // others as they are).
  // The activation copies start on a 64-byte line (so do their rows, where n_in % 32 == 0): from
  // a std::vector (16-byte aligned) every 64-byte load of the fp32 rows of 8 could straddle two
  // lines; on the Intel Xeon the 8-row FP16 GEMV ran 1.13-1.27x as fast aligned from DRAM, 1.5x
  // hot (reports/cpu-kernels.md).
  thread_local detail::Aligned64<uint16_t> xh;
  thread_local detail::AlignedFloats xr;
  const uint16_t* x16 = nullptr;
  if (w0.type == WType::f16) {
    // Which paths the groups of activation rows below take (each pass of up to kMaxPass rows is
    // cut into ceil(rows / kMaxM) groups of balanced sizes): the activations are converted for
    // those only.
    bool small = false, large = false;
    for (int64_t i0 = 0; i0 < m; i0 += kMaxPass) {
      const int64_t mm = std::min(kMaxPass, m - i0), ng = (mm + kMaxM - 1) / kMaxM;
      small |= mm / ng <= detail::kF16X16MaxRows;
      large |= (mm + ng - 1) / ng > detail::kF16X16MaxRows;
    }
    // One activation row reads fp32 activations (rounded below) where the CPU's vendor runs that
    // faster, up to a width (StreamTuning, kernels.hpp): the same values, the vcvtph2ps of each
    // activation off the loop.
    if (m == 1 && n_in <= stream_tuning().f16_one_row_f32_max_in) small = false;
    if (small && active_isa() == Isa::avx512) {
      xh.reserve(size_t(m * n_in));
      if (detail::f32_to_f16_in_range_f16c(x, xh.p, m * n_in)) x16 = xh.p;
    }
    if (!x16 || large) {
      xr.reserve(size_t(m * n_in));
      detail::round_rows_f16(x, m, n_in, xr.p);
      x = xr.p;
    }
  }
  int64_t first_chunk[kMatmulGroupMax + 1] = {0};  // chunks of weight i: [first_chunk[i], [i + 1])
  for (int i = 0; i < n; ++i)
    first_chunk[i + 1] = first_chunk[i] + (ws[i].n_out + chunk - 1) / chunk;
  const int64_t n_chunks = first_chunk[n];
  if (n_chunks == 0) return;
  // More than 8 rows: each chunk is walked in bands of ~32 KB of weight rows (a multiple of 12
  // rows, so every kernel's row blocking divides it), and every group of <= 8 activation rows is
  // applied to a band before the next: the first group reads the band from DRAM, the others from
  // L1/L2, so each weight byte still comes from memory once per call.
  const int64_t band =
      std::max<int64_t>(12, (int64_t(32) << 10) / std::max<int64_t>(row_bytes, 1) / 12 * 12);
  thread_local detail::Aligned64<int16_t> xq;
  thread_local detail::AlignedFloats xu;  // W8A8's u8 rows (aligned 64-byte loads), as floats
  float xs[kMaxPass];
  const int64_t ldx = w8a8 ? (n_in + 63) / 64 * 64 : (n_in + 31) / 32 * 32;
  for (int64_t i0 = 0; i0 < m; i0 += kMaxPass) {
    const int64_t mm = std::min(kMaxPass, m - i0);
    // Groups of activation rows, balanced (9 rows: 5 + 4, not 8 + 1: a 1-row group spends a
    // load per FMA).
    const int64_t n_groups = (mm + kMaxM - 1) / kMaxM;
    int64_t g0[kMaxPass / kMaxM + 1];
    for (int64_t g = 0; g <= n_groups; ++g) g0[g] = mm * g / n_groups;
    const int64_t step = n_groups > 1 ? band : std::numeric_limits<int64_t>::max() / 2;
    const float* xi = x + i0 * n_in;
    const int16_t* q = nullptr;
    const uint8_t* u = nullptr;
    if (use_vnni && w8a8) {
      xu.reserve(size_t(mm * ldx) / 4);
      u = reinterpret_cast<uint8_t*>(xu.p);
      detail::quantize_activations_u8(xi, mm, n_in, ldx, reinterpret_cast<uint8_t*>(xu.p), xs);
    } else if (use_vnni && mm > kOwnRows) {
      xq.reserve(size_t(mm * ldx));
      quantize_i16(xi, mm, n_in, ldx, xq.p, xs);
      q = xq.p;
    }
    // Up to kOwnRows W8A16 activation rows (a decode step of a few sequences): each thread
    // rounds its own copy, in the parallel region, so nobody waits for the calling thread to
    // round them and their lines do not cross to the other core (writing a buffer the other core
    // had read made each store wait for that core's copy to be dropped: with the weights in L2,
    // 10% of a 5,632-column call went to the rounding and 31% to the other thread's wait). The
    // same values as before. On AMD Zen 4, a tinyllama INT8 decode step's GEMVs (22 layers and
    // lm_head, alternating step by step): 1 row 0.8-2.1% faster in fast windows, level in slow
    // ones; 2 and 4 rows a median 1.5% faster (reports/cpu-kernels.md).
    const bool own_q = use_vnni && !w8a8 && !q;
    // One run [c0, c1) of consecutive chunks (split where one weight ends and the next begins):
    // one kernel call per weight, so its software prefetch runs on across the chunk boundaries.
    auto run = [&](int64_t c0, int64_t c1, const int16_t* q, const float* xs) {
      while (c0 < c1) {
        int i = 0;
        while (c0 >= first_chunk[i + 1]) ++i;
        const int64_t ce = std::min(c1, first_chunk[i + 1]);
        const Weight& w = ws[i];
        float* yi = ys[i] + i0 * w.n_out;
        const int64_t r0 = (c0 - first_chunk[i]) * chunk;
        const int64_t r1 = std::min(w.n_out, (ce - first_chunk[i]) * chunk);
        for (int64_t b = r0; b < r1; b += step) {
          const int64_t b1 = std::min(r1, b + step);
          for (int64_t g = 0; g < n_groups; ++g) {
            const int64_t j = g0[g], mg = g0[g + 1] - g0[g];
            if (u)
              detail::gemv_rows_w8a8_vnni(w, u + j * ldx, ldx, xs + j, mg, yi + j * w.n_out, b, b1);
            else if (q && !(i16_avx2 && w.rows4))
              rows_i16(w, q + j * ldx, ldx, xs + j, mg, yi + j * w.n_out, b, b1);
            else if (x16 && mg <= detail::kF16X16MaxRows)
              detail::gemv_rows_f16_x16(w, x16 + (i0 + j) * n_in, mg, yi + j * w.n_out, b, b1);
            else if (w.rows4) {  // no interleaved form on these paths: rows copied row-major
              thread_local std::vector<int8_t> buf;
              const Weight v = detail::row_major_rows(w, b, b1, buf);
              if (q)
                rows_i16(v, q + j * ldx, ldx, xs + j, mg, yi + j * w.n_out + b, 0, b1 - b);
              else
                rows(v, xi + j * n_in, mg, yi + j * w.n_out + b, 0, b1 - b);
            } else
              rows(w, xi + j * n_in, mg, yi + j * w.n_out, b, b1);
          }
        }
        c0 = ce;
      }
    };
    detail::SyncRegion sync;
    std::atomic<int64_t> next{0};
#pragma omp parallel if (n_chunks > 1)
    {
      sync.start();
      // Guided by hand: each thread takes the next run of ceil(left / threads) chunks, at most
      // kMaxRun (4 MB), so the runs shrink towards the end (as schedule(guided) does), and calls
      // the kernel once a run, not once a chunk. (Without the cap the first run was half of
      // everything, and a thread a few percent slower held the other up at the end: at 7B's
      // 100 MB q/k/v group 33-89 us of waiting a region; with it 3-8x less wait, the step
      // 0.98-1.01x.)
      constexpr int64_t kMaxRun = 16;
      const int64_t nt = omp_get_num_threads();
      const int16_t* qt = q;
      const float* xst = xs;
      float own_xs[kMaxPass];
      if (own_q) {
        thread_local detail::Aligned64<int16_t> own;
        own.reserve(size_t(mm * ldx));
        quantize_i16(xi, mm, n_in, ldx, own.p, own_xs);
        qt = own.p;
        xst = own_xs;
      }
      for (int64_t c0 = next.load(std::memory_order_relaxed); c0 < n_chunks;) {
        const int64_t take = std::min(kMaxRun, (n_chunks - c0 + nt - 1) / nt);
        if (next.compare_exchange_weak(c0, c0 + take, std::memory_order_relaxed)) {
          run(c0, c0 + take, qt, xst);
          c0 = next.load(std::memory_order_relaxed);
        }
      }
      sync.done();
    }
    sync.finish();
  }
}

}  // namespace

void gemv_group(const Weight* ws, int n, const float* x, int64_t m, float* const* ys) {
  gemv_group_impl(ws, n, x, m, ys, true);
}

}  // namespace latprof::cpu
