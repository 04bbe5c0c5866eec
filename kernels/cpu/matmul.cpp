// Linear layer entry point: decode-sized batches go to the streaming GEMV, larger ones to the
// blocked GEMM.
#include "kernels/cpu/internal.hpp"

namespace latprof::cpu {

// Up to this many activation rows the GEMV (weights streamed from memory once per 16 rows, no
// packing) is faster: BM_Step measured it 1.5-2.7x faster than the GEMM at 16 rows and still
// ~1.5x at 24 and 32 on tinyllama's shapes (reports/cpu-kernels.md). Larger (prefill) steps go
// to the GEMM.
constexpr int64_t kGemvMaxRows = 32;

void matmul(const Weight& w, const float* x, int64_t m, float* y) {
  if (m <= kGemvMaxRows)
    gemv(w, x, m, y);
  else
    gemm(w, x, m, y);
}

}  // namespace latprof::cpu
