// The whole forward pass on the CUDA backend against the CPU backend: the same synthetic tiny
// model (the device fill is bit-identical to the CPU's), prefill then decode steps through
// run_step (so CUDA graphs are captured and replayed), logits and greedy tokens compared.
#include <gtest/gtest.h>

#include <cmath>

#include "backend/cpu/cpu_backend.hpp"
#include "gpu/gpu_support.hpp"
#include "model/open.hpp"
#include "runner/forward.hpp"
#include "support/param_names.hpp"

namespace {

using namespace latprof;

// The CUDA backend keeps activations in fp16 (the CPU in fp32): each layer rounds to 2^-11,
// and two layers plus the LM head amplify that to about 1e-2 relative; 3e-2 still fails on
// any indexing or math error (which gives ~1).
constexpr double kLogitTolerance = 3e-2;

double rel_error(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    if (!std::isfinite(a[i])) return INFINITY;
    num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    den += double(b[i]) * b[i];
  }
  return std::sqrt(num / den);
}

struct Outcome {
  std::vector<std::vector<float>> logits;  // per step, sequence 0
  std::vector<int32_t> tokens;             // greedy picks, sequence 0
};

Outcome run(Backend& b, WeightType wt, int64_t n_seq, int64_t prompt, int64_t steps) {
  OpenedModel om = open_model("tiny", 11);
  LoadedModel m(om.config, wt, b, n_seq, prompt, prompt + steps + 1);
  m.load(*om.weights, {});
  Profiler prof(b);
  const int64_t V = om.config.vocab_size;
  std::vector<int32_t> toks;
  for (int64_t s = 0; s < n_seq; ++s)
    for (int64_t t = 0; t < prompt; ++t) toks.push_back(int32_t((t * 37 + 11 + s) % V));
  b.copy_to_device(m.tokens, toks.data(), toks.size() * 4);
  int32_t pos = 0;
  b.copy_to_device(m.pos, &pos, 4);
  forward(m, prof, n_seq, prompt);
  Outcome r;
  std::vector<float> l(size_t(n_seq * V));
  std::vector<int32_t> next(static_cast<size_t>(n_seq));
  for (int64_t k = 0; k <= steps; ++k) {
    if (k > 0) {
      pos = int32_t(prompt + k - 1);
      b.copy_to_device(m.pos, &pos, 4);
      b.run_step([&] { forward(m, prof, n_seq, 1); });
    }
    b.synchronize();
    b.activations_to_host(l.data(), m.logits, n_seq * V);
    r.logits.emplace_back(l.begin(), l.begin() + V);
    b.sample(m.logits, n_seq, V, SamplingParams{}, k, m.tokens);
    b.copy_to_host(next.data(), m.tokens, size_t(n_seq) * 4);
    r.tokens.push_back(next[0]);
  }
  return r;
}

class GpuForward : public ::testing::TestWithParam<std::tuple<WeightType, int64_t>> {};

TEST_P(GpuForward, MatchesCpuBackend) {
  LATPROF_REQUIRE_GPU(gpu);
  const auto [wt, n_seq] = GetParam();
  auto cpu = make_cpu_backend(BackendOptions{});
  constexpr int64_t kPrompt = 29, kSteps = 6;
  const Outcome want = run(*cpu, wt, n_seq, kPrompt, kSteps);
  const Outcome got = run(*gpu, wt, n_seq, kPrompt, kSteps);
  ASSERT_EQ(got.logits.size(), want.logits.size());
  for (size_t k = 0; k < want.logits.size(); ++k)
    EXPECT_LT(rel_error(got.logits[k], want.logits[k]), kLogitTolerance) << "step " << k;
  EXPECT_EQ(got.tokens, want.tokens);
}

INSTANTIATE_TEST_SUITE_P(DtypesAndBatch, GpuForward,
                         ::testing::Combine(::testing::Values(WeightType::f16, WeightType::i8),
                                            ::testing::Values(int64_t(1), int64_t(3))),
                         [](const ::testing::TestParamInfo<GpuForward::ParamType>& i) {
                           return std::string(std::get<0>(i.param) == WeightType::f16 ? "f16"
                                                                                      : "i8") +
                                  "_batch" + std::to_string(std::get<1>(i.param));
                         });

}  // namespace
