// Activations of FP16-weight matmuls rounded to FP16 (kernels.hpp, "FP16 weights"): the dispatcher
// and the portable path; F16C rows in convert_avx2.cpp.
#include <cmath>
#include <cstring>

#include "core/half.hpp"
#include "kernels/cpu/internal.hpp"

namespace latprof::cpu::detail {

void round_rows_f16(const float* x, int64_t m, int64_t n, float* out) {
  // A prefill GEMM's rows (500 x 2,048 and up: 0.5-1.9 ms on one Zen 4 thread, 0.4-1.6% of the
  // GEMM) are rounded by all threads; a decode step's few rows by the caller alone (no fork).
  if (m > 1 && m * n >= (int64_t(1) << 18)) {
#pragma omp parallel for schedule(static)
    for (int64_t j = 0; j < m; ++j) round_rows_f16(x + j * n, 1, n, out + j * n);
    return;
  }
  if (active_isa() != Isa::scalar) return round_rows_f16_f16c(x, m, n, out);
  for (int64_t j = 0; j < m; ++j) {
    const float* xj = x + j * n;
    float* oj = out + j * n;
    bool in_range = true;
    for (int64_t k = 0; k < n; ++k) in_range &= std::fabs(xj[k]) <= kF16Max;  // NaN: false
    if (!in_range) {
      std::memcpy(oj, xj, size_t(n) * sizeof(float));
      continue;
    }
    for (int64_t k = 0; k < n; ++k) oj[k] = half_to_float(float_to_half(xj[k]));
  }
}

}  // namespace latprof::cpu::detail
