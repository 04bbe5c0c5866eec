// Elementwise ops of the transformer block: SwiGLU, residual add, argmax.
#include <algorithm>
#include <cmath>

#include "kernels/cpu/internal.hpp"

namespace latprof::cpu {

void swiglu(const float* gate, const float* up, int64_t n, float* out) {
  if (active_isa() != Isa::scalar) {
    // Blocks of 16K elements (a multiple of 16), in parallel only for prefill-sized inputs.
    constexpr int64_t kBlock = 16384;
    const int64_t blocks = (n + kBlock - 1) / kBlock;
    auto* f = active_isa() == Isa::avx512 ? detail::swiglu_avx512 : detail::swiglu_avx2;
    detail::parallel_for(blocks, n > 65536, [&](int64_t b) {
      f(gate + b * kBlock, up + b * kBlock, std::min(kBlock, n - b * kBlock), out + b * kBlock);
    });
    return;
  }
  detail::parallel_for(n, n > 65536, [&](int64_t i) {
    const float g = gate[i];
    out[i] = g / (1.0f + std::exp(-g)) * up[i];
  });
}

void add(float* x, const float* y, int64_t n) {
  detail::parallel_for(n, n > 262144, [&](int64_t i) { x[i] += y[i]; });
}

int32_t argmax(const float* logits, int64_t n) {
  int64_t best = 0;
  for (int64_t i = 1; i < n; ++i)
    if (logits[i] > logits[best]) best = i;  // strict: the first index wins ties
  return int32_t(best);
}

}  // namespace latprof::cpu
