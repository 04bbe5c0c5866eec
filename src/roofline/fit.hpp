#pragma once
// Least-squares line through decode step times: time = intercept + slope * context.
// The slope is the cost of one more cached token (KV reads: effective KV bandwidth); the
// intercept is what every step pays regardless of context (weight streaming + fixed overhead).
#include <cstdint>
#include <vector>

namespace latprof {

struct LinearFit {
  bool ok = false;       // false: fewer than 2 points or all x equal
  int64_t n = 0;         // points used
  double intercept = 0;  // y at x = 0 (here: ms)
  double slope = 0;      // dy/dx (here: ms per context token)
  double r2 = 0;         // coefficient of determination
};

LinearFit fit_linear(const std::vector<double>& x, const std::vector<double>& y);

// The context a decode step attends over, the one definition the runner and `roofline --from`
// share: step k (0-based) generates output token k + 1, so it reads the prompt's input_tokens
// positions, the k tokens generated before it and its own: input_tokens + 1 + k.
int64_t decode_step_context(int64_t input_tokens, int64_t k);

// Fits step_ms[k] against decode_step_context(input_tokens, k). Non-finite or non-positive
// samples are skipped.
LinearFit fit_decode_steps(const std::vector<double>& step_ms, int64_t input_tokens);

// Effective KV-read bandwidth implied by the slope: kv bytes one token adds, over all sequences
// of the batch, per second of extra step time. 0 when the slope is not positive.
double kv_bandwidth_from_slope(double slope_ms_per_token, double kv_bytes_per_token_all_seqs);

}  // namespace latprof
