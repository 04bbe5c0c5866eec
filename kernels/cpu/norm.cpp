// RMSNorm: out[t, :] = x[t, :] / sqrt(mean(x[t, :]^2) + eps) * w. out may alias x.
#include <cmath>

#include "kernels/cpu/kernels.hpp"

namespace latprof::cpu {

void rmsnorm(const float* x, const float* w, int64_t m, int64_t dim, float eps, float* out) {
#pragma omp parallel for schedule(static) if (m * dim > 65536)
  for (int64_t t = 0; t < m; ++t) {
    const float* xt = x + t * dim;
    float* ot = out + t * dim;
    // Sum of squares in double: exact enough for any dim, and only dim multiply-adds per row.
    double ss = 0;
    for (int64_t i = 0; i < dim; ++i) ss += double(xt[i]) * double(xt[i]);
    const float inv = float(1.0 / std::sqrt(ss / double(dim) + double(eps)));
    for (int64_t i = 0; i < dim; ++i) ot[i] = xt[i] * inv * w[i];
  }
}

}  // namespace latprof::cpu
