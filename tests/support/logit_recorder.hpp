#pragma once
// Engine tests on a real model: an executor that records the logits of every sampled row, and
// the tolerance they are compared with.
#include <cmath>
#include <cstdint>
#include <map>
#include <utility>
#include <vector>

#include "engine/engine.hpp"
#include "runner/model.hpp"
#include "runner/model_runner.hpp"

namespace latprof::test {

// Relative L2 distance between two logit vectors; the tolerance covers fp32 summation order
// (a row's dot products see different blockings in different step shapes, a suffix computed
// against cached KV or the whole prompt in one step) as it reaches the logits through the
// rounding of every FP16-weight matmul's activations to fp16 (kernels.hpp): a sum-order
// difference of one fp32 ulp can move a value across an fp16 rounding boundary, a 2^-11 relative
// step. Measured on the test models: up to 7.3e-4 (2e-4 before the rounding); one position off in
// one token's rotary embedding moves them by more than 1e-2.
inline constexpr double kLogitTolerance = 2e-3;

inline double rel_l2(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    den += double(b[i]) * b[i];
  }
  return std::sqrt(num / den);
}

// The executor, recording the logits of every sampled row by (request, token index), and
// whether any step mixed prefill tokens with other sequences.
class Recorder : public engine::Executor {
 public:
  Recorder(LoadedModel& m, Profiler& prof) : m_(m), runner_(m, prof, SamplingParams{}) {}
  std::vector<int32_t> execute(const engine::StepBatch& b) override {
    const auto out = runner_.execute(b);
    const int64_t V = m_.config().vocab_size, n = int64_t(b.logits_rows.size());
    std::vector<float> all(size_t(n * V));
    m_.backend().activations_to_host(all.data(), m_.logits, n * V);
    for (int64_t i = 0; i < n; ++i)
      logits[{b.sample_streams[size_t(i)], b.sample_index[size_t(i)]}].assign(
          all.begin() + i * V, all.begin() + (i + 1) * V);
    mixed |= b.num_tokens() > b.num_seqs() && b.num_seqs() > 1;
    return out;
  }
  std::map<std::pair<int64_t, int64_t>, std::vector<float>> logits;
  bool mixed = false;

 private:
  LoadedModel& m_;
  ModelRunner runner_;
};

}  // namespace latprof::test
