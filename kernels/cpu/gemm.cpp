// Prefill-path linear layer: y[m, n_out] = x[m, n_in] · Wᵀ for many activation rows. This file
// holds the dispatcher and the portable path (each weight row dequantised once and dotted with
// every activation row, parallel over output rows). The fast paths are in gemm_avx512.cpp and
// gemm_avx2.cpp.
#include <omp.h>

#include <algorithm>
#include <vector>

#include "kernels/cpu/internal.hpp"

namespace latprof::cpu {
namespace {

void gemm_portable(const Weight& w, const float* x, int64_t m, float* y) {
  constexpr int64_t kRows = 16;
  const int64_t blocks = (w.n_out + kRows - 1) / kRows;
  detail::SyncRegion sync;
#pragma omp parallel
  {
    sync.start();
#pragma omp for schedule(dynamic, 1) nowait
    for (int64_t b = 0; b < blocks; ++b)
      detail::gemv_rows_scalar(w, x, m, y, b * kRows, std::min(w.n_out, (b + 1) * kRows));
    sync.done();
  }
  sync.finish();
}

}  // namespace

void gemm(const Weight& w, const float* x, int64_t m, float* y) {
  gemm_group(&w, 1, x, m, &y);
}

void gemm_group(const Weight* ws, int n, const float* x, int64_t m, float* const* ys) {
  if (m <= 0 || n <= 0) return;
  if (std::any_of(ws, ws + n, [](const Weight& w) { return w.type == WType::i8a8; })) {
    // W8A8: each weight's activations rounded to int8 (q * s in fp32), then the INT8-weight GEMM
    // (the rounding depends on x alone, so one rounded copy serves a group of one n_in).
    if (!detail::same_input(ws, n)) {
      for (int i = 0; i < n; ++i) gemm_group(ws + i, 1, x, m, ys + i);
      return;
    }
    // AVX512-VNNI: the AVX-512 GEMM rounds the rows itself and multiplies q by the int8 weights
    // in exact integer sums (gemm_avx512.cpp).
    if (gemv_int8_dot() &&
        std::all_of(ws, ws + n, [](const Weight& w) { return w.type == WType::i8a8; }))
      return detail::gemm_group_avx512(ws, n, x, m, ys);
    return detail::with_rounded_activations(
        ws, n, x, m, [&](const Weight* w8, const float* xr) { gemm_group(w8, n, xr, m, ys); });
  }
  if (std::any_of(ws, ws + n, [](const Weight& w) { return w.type == WType::f16; })) {
    // FP16 weights multiply activations rounded to fp16 (kernels.hpp): one rounded copy of x
    // serves the group (the rounding depends on x alone).
    if (!detail::same_input(ws, n)) {
      for (int i = 0; i < n; ++i) gemm_group(ws + i, 1, x, m, ys + i);
      return;
    }
    thread_local std::vector<float> xr;
    xr.resize(size_t(m * ws[0].n_in));
    detail::round_rows_f16(x, m, ws[0].n_in, xr.data());
    x = xr.data();
  }
  if (active_isa() != Isa::avx512 &&
      std::any_of(ws, ws + n, [](const Weight& w) { return w.rows4; })) {
    // INT8 rows interleaved in fours, which only the AVX-512 GEMM reads: copied row-major.
    for (int i = 0; i < n; ++i) {
      if (!ws[i].rows4) {
        gemm_group(ws + i, 1, x, m, ys + i);
        continue;
      }
      std::vector<int8_t> buf;
      const Weight v = detail::row_major_rows(ws[i], 0, ws[i].n_out, buf);
      gemm_group(&v, 1, x, m, ys + i);
    }
    return;
  }
  if (active_isa() == Isa::avx512 && detail::same_input(ws, n))
    return detail::gemm_group_avx512(ws, n, x, m, ys);
  if (active_isa() == Isa::avx2 && detail::same_input(ws, n))
    return detail::gemm_group_avx2(ws, n, x, m, ys);
  for (int i = 0; i < n; ++i) {
    if (ws[i].n_out <= 0) continue;
    if (active_isa() == Isa::avx512)
      detail::gemm_group_avx512(ws + i, 1, x, m, ys + i);
    else if (active_isa() == Isa::avx2)
      detail::gemm_group_avx2(ws + i, 1, x, m, ys + i);
    else
      gemm_portable(ws[i], x, m, ys[i]);
  }
}

}  // namespace latprof::cpu
