#pragma once
// What the CUDA kernel tests share on the host, on a GPU (tests/gpu) and under the emulation
// (tests/cuemu): random inputs, fp16 rounding (what the device stores), and the declared-tolerance
// checks of a device result against its CPU reference. Header-only: the GPU tests build with the
// CUDA targets, the emulation's with g++ alone.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <sstream>
#include <vector>

#include "core/half.hpp"

namespace latprof::test {

// fp32 host values -> fp16 bits (round to nearest even).
inline std::vector<uint16_t> to_half(const std::vector<float>& v) {
  std::vector<uint16_t> h(v.size());
  for (size_t i = 0; i < v.size(); ++i) h[i] = float_to_half(v[i]);
  return h;
}

// Rounds fp32 values through fp16 (what the device sees as input).
inline std::vector<float> round_f16(const std::vector<float>& v) {
  std::vector<float> r(v.size());
  for (size_t i = 0; i < v.size(); ++i) r[i] = half_to_float(float_to_half(v[i]));
  return r;
}

// n values uniform in [lo, hi), the same for the same seed.
inline std::vector<float> random_vector(size_t n, uint64_t seed, float lo, float hi) {
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = d(gen);
  return v;
}

inline double rms(const std::vector<float>& v) {
  double s = 0;
  for (float x : v) s += double(x) * double(x);
  return v.empty() ? 0 : std::sqrt(s / double(v.size()));
}

// Per-element tolerance |got - ref| <= atol + rtol * |ref|; reports the worst element and a few
// mismatches. Non-finite values in got always fail.
inline ::testing::AssertionResult all_close(const std::vector<float>& got,
                                            const std::vector<float>& ref, double atol,
                                            double rtol) {
  if (got.size() != ref.size())
    return ::testing::AssertionFailure() << "size " << got.size() << " != " << ref.size();
  size_t bad = 0, worst = 0;
  double worst_excess = -1;
  std::ostringstream pairs;
  for (size_t i = 0; i < got.size(); ++i) {
    const double err = std::fabs(double(got[i]) - double(ref[i]));
    const double tol = atol + rtol * std::fabs(double(ref[i]));
    const bool ok = std::isfinite(got[i]) && err <= tol;
    const double excess = std::isfinite(got[i]) ? err - tol : 1e300;
    if (excess > worst_excess) {
      worst_excess = excess;
      worst = i;
    }
    if (!ok && bad++ < 5) pairs << "\n  [" << i << "] got " << got[i] << " ref " << ref[i];
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << bad << " of " << got.size() << " elements outside atol " << atol << " + rtol " << rtol
         << "; worst [" << worst << "] got " << got[worst] << " ref " << ref[worst] << pairs.str();
}

// ||got - ref|| / ||ref|| (normalized error over a whole tensor; ||got - ref|| when ref is 0).
inline double normalized_error(const std::vector<float>& got, const std::vector<float>& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < got.size() && i < ref.size(); ++i) {
    const double d = double(got[i]) - double(ref[i]);
    num += d * d;
    den += double(ref[i]) * double(ref[i]);
  }
  if (!std::isfinite(num)) return INFINITY;
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

}  // namespace latprof::test
