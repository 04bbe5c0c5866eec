#include "roofline/fit.hpp"

#include <cmath>

namespace latprof {

LinearFit fit_linear(const std::vector<double>& x, const std::vector<double>& y) {
  LinearFit f;
  const size_t n = std::min(x.size(), y.size());
  if (n < 2) return f;
  double mx = 0, my = 0;
  for (size_t i = 0; i < n; ++i) {
    mx += x[i];
    my += y[i];
  }
  mx /= double(n);
  my /= double(n);
  double sxx = 0, sxy = 0, syy = 0;
  for (size_t i = 0; i < n; ++i) {
    sxx += (x[i] - mx) * (x[i] - mx);
    sxy += (x[i] - mx) * (y[i] - my);
    syy += (y[i] - my) * (y[i] - my);
  }
  if (!(sxx > 0)) return f;
  f.ok = true;
  f.n = int64_t(n);
  f.slope = sxy / sxx;
  f.intercept = my - f.slope * mx;
  f.r2 = syy > 0 ? (sxy * sxy) / (sxx * syy) : 1.0;
  return f;
}

int64_t decode_step_context(int64_t input_tokens, int64_t k) {
  return input_tokens + 1 + k;
}

LinearFit fit_decode_steps(const std::vector<double>& step_ms, int64_t input_tokens) {
  std::vector<double> x, y;
  for (size_t k = 0; k < step_ms.size(); ++k) {
    if (!std::isfinite(step_ms[k]) || step_ms[k] <= 0) continue;
    x.push_back(double(decode_step_context(input_tokens, int64_t(k))));
    y.push_back(step_ms[k]);
  }
  return fit_linear(x, y);
}

double kv_bandwidth_from_slope(double slope_ms_per_token, double kv_bytes_per_token_all_seqs) {
  if (!(slope_ms_per_token > 0)) return 0;
  return kv_bytes_per_token_all_seqs / (slope_ms_per_token / 1e3);
}

}  // namespace latprof
