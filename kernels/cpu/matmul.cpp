// Linear layer entry point: decode-sized batches go to the streaming GEMV, larger ones to the
// blocked GEMM.
#include "kernels/cpu/internal.hpp"

namespace latprof::cpu {

// Up to this many activation rows the GEMV (weights streamed from memory once per 16 rows, no
// packing) is faster on AVX-512: BM_Step measured it 2.2-2.9x faster than the GEMM at 16 rows
// and 0.93-1.8x at 32 on tinyllama's and llama-2-7b's shapes (reports/cpu-kernels.md). Larger
// (prefill) steps go to the GEMM. The AVX2 and portable paths keep the earlier 8 (not measured
// past it).
constexpr int64_t kGemvMaxRowsAvx512 = 32;
constexpr int64_t kGemvMaxRows = 8;

int64_t gemv_max_rows() {
  return active_isa() == Isa::avx512 ? kGemvMaxRowsAvx512 : kGemvMaxRows;
}

void matmul(const Weight& w, const float* x, int64_t m, float* y) {
  matmul_group(&w, 1, x, m, &y);
}

void matmul_group(const Weight* ws, int n, const float* x, int64_t m, float* const* ys) {
  if (m <= gemv_max_rows())
    gemv_group(ws, n, x, m, ys);
  else
    gemm_group(ws, n, x, m, ys);
}

}  // namespace latprof::cpu
