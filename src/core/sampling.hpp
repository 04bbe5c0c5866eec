#pragma once
// Temperature / top-k sampling on host fp32 logits, seeded by (seed, step, sequence) so a run is
// reproducible. Header-only: the CPU backend and the CUDA module (for non-greedy sampling) share
// it. Greedy decoding (temperature 0) is argmax and lives in the backends.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

namespace latprof {

inline int32_t sample_top_k(const float* logits, int64_t vocab, float temperature, int top_k,
                            uint64_t seed, int64_t step, int64_t seq) {
  const int64_t k = (top_k > 0 && top_k < vocab) ? top_k : vocab;
  std::vector<int32_t> idx(static_cast<size_t>(vocab));
  for (int64_t i = 0; i < vocab; ++i) idx[size_t(i)] = int32_t(i);
  std::partial_sort(idx.begin(), idx.begin() + k, idx.end(),
                    [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
  const float mx = logits[idx[0]];
  std::vector<double> probs(static_cast<size_t>(k));
  double sum = 0;
  for (int64_t i = 0; i < k; ++i) {
    probs[size_t(i)] = std::exp(double(logits[idx[size_t(i)]] - mx) / temperature);
    sum += probs[size_t(i)];
  }
  std::mt19937_64 gen(seed * 0x9e3779b97f4a7c15ull + uint64_t(step) * 1315423911ull +
                      uint64_t(seq));
  double r = std::uniform_real_distribution<double>(0, sum)(gen);
  for (int64_t i = 0; i < k; ++i) {
    r -= probs[size_t(i)];
    if (r <= 0) return idx[size_t(i)];
  }
  return idx[size_t(k - 1)];
}

}  // namespace latprof
