// Prefill-path linear layer: y[m, n_out] = x[m, n_in] · Wᵀ for many activation rows. This file
// holds the dispatcher and the portable path (each weight row dequantised once and dotted with
// every activation row, parallel over output rows). The fast paths are in gemm_avx512.cpp and
// gemm_avx2.cpp.
#include <omp.h>

#include <algorithm>

#include "kernels/cpu/internal.hpp"

namespace latprof::cpu {

void gemm(const Weight& w, const float* x, int64_t m, float* y) {
  if (m <= 0 || w.n_out <= 0) return;
  if (active_isa() == Isa::avx512) return detail::gemm_avx512(w, x, m, y);
  if (active_isa() == Isa::avx2) return detail::gemm_avx2(w, x, m, y);
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

}  // namespace latprof::cpu
