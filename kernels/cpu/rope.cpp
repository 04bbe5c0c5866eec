// Rotary position embedding, Hugging Face "rotate_half" layout: in each head of size hd, element
// i (i < hd/2) pairs with element i + hd/2 and both rotate by angle pos * inv_freq[i]; inv_freq
// carries any rope scaling (linear, llama3), computed by the model config.
#include <algorithm>
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
  // cs[0, half) = cos and cs[half, hd) = sin of position p's angles. Angles in double: positions
  // reach 1e5 and a float angle would lose ~1e-2 rad.
  auto angles = [&](int32_t p, float* cs) {
    for (int i = 0; i < half; ++i) {
      const double a = double(p) * inv_freq[i];
      cs[i] = float(std::cos(a));
      cs[half + i] = float(std::sin(a));
    }
  };
  // Token t's heads rotated by cs.
  auto rotate_token = [&](int64_t t, const float* cs) {
    auto rotate = [&](float* v) {
      for (int i = 0; i < half; ++i) {
        const float c = cs[i], s = cs[half + i];
        const float a = v[i], b = v[i + half];
        v[i] = a * c - b * s;
        v[i + half] = b * c + a * s;
      }
    };
    for (int h = 0; h < n_heads; ++h) rotate(q + (t * n_heads + h) * int64_t(hd));
    for (int h = 0; h < n_kv_heads; ++h) rotate(k + (t * n_kv_heads + h) * int64_t(hd));
  };
  if (m <= 4) {  // on this thread, without an OpenMP region (internal.hpp's parallel_for)
    // A decode step calls this once a layer with the same positions and frequencies: the angles
    // of the last call's tokens are kept and reused when both match (the same values; ~1.3 us of
    // sin and cos a call at head size 64 on AMD Zen 4).
    thread_local std::vector<double> last_freq;
    thread_local std::vector<int32_t> last_pos;
    thread_local std::vector<float> last_cs;
    const bool same_freq = last_freq.size() == size_t(half) &&
                           std::equal(last_freq.begin(), last_freq.end(), inv_freq);
    if (!same_freq) {
      last_freq.assign(inv_freq, inv_freq + half);
      last_pos.assign(4, -1);
    }
    last_cs.resize(size_t(4 * hd));
    for (int64_t t = 0; t < m; ++t) {
      float* cs = last_cs.data() + t * hd;
      if (last_pos[size_t(t)] != pos[t]) {
        angles(pos[t], cs);
        last_pos[size_t(t)] = pos[t];
      }
      rotate_token(t, cs);
    }
    return;
  }
#pragma omp parallel
  {
    std::vector<float> cs(static_cast<size_t>(hd));
#pragma omp for schedule(static)
    for (int64_t t = 0; t < m; ++t) {
      angles(pos[t], cs.data());
      rotate_token(t, cs.data());
    }
  }
}

}  // namespace latprof::cpu
