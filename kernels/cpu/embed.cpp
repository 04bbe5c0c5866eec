// Token embedding lookup: out[t, :] = half_to_float(table[tokens[t], :]).
#include "core/half.hpp"
#include "kernels/cpu/internal.hpp"

namespace latprof::cpu {

void embed(const uint16_t* table, const int32_t* tokens, int64_t m, int64_t dim, float* out) {
  const bool f16c = active_isa() != Isa::scalar;
  detail::parallel_for(m, m > 8, [&](int64_t t) {
    const uint16_t* src = table + int64_t(tokens[t]) * dim;
    float* dst = out + t * dim;
    if (f16c) {
      detail::f16_to_f32_f16c(src, dst, dim);
    } else {
      for (int64_t i = 0; i < dim; ++i) dst[i] = half_to_float(src[i]);
    }
  });
}

}  // namespace latprof::cpu
