// Rotary position embedding, Hugging Face "rotate_half" layout: in each head of size hd, element
// i (i < hd/2) pairs with element i + hd/2 and both rotate by angle pos * inv_freq[i]; inv_freq
// carries any rope scaling (linear, llama3), computed by the model config.
#include <cmath>
#include <vector>

#include "kernels/cpu/kernels.hpp"

namespace latprof::cpu {

void rope(float* q, float* k, const int32_t* pos, int64_t m, int n_heads, int n_kv_heads, int hd,
          float theta) {
  std::vector<double> inv_freq(static_cast<size_t>(hd / 2));
  for (int i = 0; i < hd / 2; ++i)
    inv_freq[size_t(i)] = std::pow(double(theta), -2.0 * double(i) / double(hd));
  rope(q, k, pos, m, n_heads, n_kv_heads, hd, inv_freq.data());
}

void rope(float* q, float* k, const int32_t* pos, int64_t m, int n_heads, int n_kv_heads, int hd,
          const double* inv_freq) {
  const int half = hd / 2;
  // Token t, with cs (hd floats) for its cos[0, half) and sin[half, hd).
  auto token = [&](int64_t t, std::vector<float>& cs) {
    {
      // Angles in double: positions reach 1e5 and a float angle would lose ~1e-2 rad.
      for (int i = 0; i < half; ++i) {
        const double a = double(pos[t]) * inv_freq[i];
        cs[size_t(i)] = float(std::cos(a));
        cs[size_t(half + i)] = float(std::sin(a));
      }
      auto rotate = [&](float* v) {
        for (int i = 0; i < half; ++i) {
          const float c = cs[size_t(i)], s = cs[size_t(half + i)];
          const float a = v[i], b = v[i + half];
          v[i] = a * c - b * s;
          v[i + half] = b * c + a * s;
        }
      };
      for (int h = 0; h < n_heads; ++h) rotate(q + (t * n_heads + h) * int64_t(hd));
      for (int h = 0; h < n_kv_heads; ++h) rotate(k + (t * n_kv_heads + h) * int64_t(hd));
    }
  };
  if (m <= 4) {  // small: this thread (kernels.hpp)
    thread_local std::vector<float> cs;
    cs.resize(size_t(hd));
    for (int64_t t = 0; t < m; ++t) token(t, cs);
    return;
  }
#pragma omp parallel
  {
    std::vector<float> cs(static_cast<size_t>(hd));
#pragma omp for schedule(static)
    for (int64_t t = 0; t < m; ++t) token(t, cs);
  }
}

}  // namespace latprof::cpu
