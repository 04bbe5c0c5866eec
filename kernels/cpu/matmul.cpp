// Linear layer entry point: decode-sized batches go to the streaming GEMV, larger ones to the
// blocked GEMM.
#include "kernels/cpu/internal.hpp"

namespace latprof::cpu {

// Below this many activation rows the GEMV (weights streamed once, no packing) is faster; see
// reports/cpu-kernels.md for the measured crossover.
constexpr int64_t kGemvMaxRows = 8;

void matmul(const Weight& w, const float* x, int64_t m, float* y) {
  if (m <= kGemvMaxRows)
    gemv(w, x, m, y);
  else
    gemm(w, x, m, y);
}

}  // namespace latprof::cpu
