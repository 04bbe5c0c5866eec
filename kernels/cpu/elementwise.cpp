// Elementwise ops of the transformer block: SwiGLU, residual add, argmax.
#include <cmath>

#include "kernels/cpu/kernels.hpp"

namespace latprof::cpu {

void swiglu(const float* gate, const float* up, int64_t n, float* out) {
#pragma omp parallel for schedule(static) if (n > 65536)
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i];
    out[i] = g / (1.0f + std::exp(-g)) * up[i];
  }
}

void add(float* x, const float* y, int64_t n) {
#pragma omp parallel for schedule(static) if (n > 262144)
  for (int64_t i = 0; i < n; ++i) x[i] += y[i];
}

int32_t argmax(const float* logits, int64_t n) {
  int64_t best = 0;
  for (int64_t i = 1; i < n; ++i)
    if (logits[i] > logits[best]) best = i;  // strict: the first index wins ties
  return int32_t(best);
}

}  // namespace latprof::cpu
