// The whole forward pass on the CUDA backend against the CPU backend: the same synthetic tiny
// model (the device fill is bit-identical to the CPU's) driven through the engine's executor
// (ModelRunner), so all-decode steps go through run_step with their graph key (captured once,
// then replayed) and other steps run eagerly; logits and greedy tokens compared step by step.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <random>
#include <tuple>

#include "backend/cpu/cpu_backend.hpp"
#include "gpu/gpu_support.hpp"
#include "model/open.hpp"
#include "runner/forward.hpp"
#include "support/param_names.hpp"
#include "support/step_driver.hpp"

namespace {

using namespace latprof;

// The CUDA backend keeps activations in fp16 (the CPU in fp32): each layer rounds to 2^-11,
// and two layers plus the LM head amplify that to about 1e-2 relative; 3e-2 still fails on
// any indexing or math error (which gives ~1).
constexpr double kLogitTolerance = 3e-2;

double rel_error(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return INFINITY;
  double num = 0, den = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    if (!std::isfinite(a[i])) return INFINITY;
    num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    den += double(b[i]) * b[i];
  }
  return std::sqrt(num / den);
}

struct Outcome {
  std::vector<std::vector<float>> logits;    // per step, every sampled row
  std::vector<std::vector<int32_t>> tokens;  // per step, the greedy picks
};

// Rectangular steps (support/step_driver.hpp): a prompt for n_seq sequences, then decode steps.
Outcome run_rect(Backend& b, WeightType wt, int64_t n_seq, int64_t prompt, int64_t steps) {
  OpenedModel om = open_model("tiny", 11);
  LoadedModel m(om.config, wt, b, test::rect_shape(n_seq, prompt, prompt + steps + 1));
  m.load(*om.weights, {});
  test::StepDriver drive(m);
  const int64_t V = om.config.vocab_size;
  std::vector<int32_t> toks;
  for (int64_t s = 0; s < n_seq; ++s)
    for (int64_t t = 0; t < prompt; ++t) toks.push_back(int32_t((t * 37 + 11 + s) % V));
  Outcome r;
  std::vector<float> l(size_t(n_seq * V));
  for (int64_t k = 0; k <= steps; ++k) {
    toks = k == 0 ? drive.step(toks, n_seq, prompt, 0) : drive.step(toks, n_seq, 1, prompt + k - 1);
    b.synchronize();
    b.activations_to_host(l.data(), m.logits, n_seq * V);
    r.logits.push_back(l);
    r.tokens.push_back(toks);
  }
  return r;
}

class GpuForward : public ::testing::TestWithParam<std::tuple<WeightType, int64_t>> {};

TEST_P(GpuForward, MatchesCpuBackend) {
  LATPROF_REQUIRE_GPU(gpu);
  gpu->set_graph_enabled(true);
  const auto [wt, n_seq] = GetParam();
  auto cpu = make_cpu_backend(BackendOptions{});
  constexpr int64_t kPrompt = 29, kSteps = 6;
  const Outcome want = run_rect(*cpu, wt, n_seq, kPrompt, kSteps);
  const Outcome got = run_rect(*gpu, wt, n_seq, kPrompt, kSteps);
  ASSERT_EQ(got.logits.size(), want.logits.size());
  for (size_t k = 0; k < want.logits.size(); ++k)
    EXPECT_LT(rel_error(got.logits[k], want.logits[k]), kLogitTolerance) << "step " << k;
  EXPECT_EQ(got.tokens, want.tokens);
  EXPECT_TRUE(gpu->graph_enabled()) << "decode steps fell back to eager launches";
}

INSTANTIATE_TEST_SUITE_P(DtypesAndBatch, GpuForward,
                         ::testing::Combine(::testing::Values(WeightType::f16, WeightType::i8),
                                            ::testing::Values(int64_t(1), int64_t(3))),
                         [](const ::testing::TestParamInfo<GpuForward::ParamType>& i) {
                           return std::string(std::get<0>(i.param) == WeightType::f16 ? "f16"
                                                                                      : "i8") +
                                  "_batch" + std::to_string(std::get<1>(i.param));
                         });

// Continuous batching: sequence A (a 29-token prompt) decodes while sequence B's 13-token
// prompt arrives in two chunks (mixed steps: a decode row next to a chunk at a nonzero start),
// then both decode (graph key 2: warm-up, capture, replays), then B alone (key 1). Blocks of 4
// positions drawn from a shuffled pool, so no sequence's blocks are contiguous.
Outcome run_ragged(Backend& b, WeightType wt) {
  OpenedModel om = open_model("tiny", 5);
  const int64_t V = om.config.vocab_size;
  EngineShape e;
  e.block_size = 4;
  e.max_model_len = 40;
  e.kv_blocks = 2 * e.max_blocks() + 2;
  e.max_step_tokens = 29;
  e.max_seqs = 2;
  LoadedModel m(om.config, wt, b, e);
  m.load(*om.weights, {});
  Profiler prof(b);
  ModelRunner runner(m, prof, SamplingParams{});

  std::vector<int32_t> pool(static_cast<size_t>(e.kv_blocks));
  for (size_t i = 0; i < pool.size(); ++i) pool[i] = int32_t(i);
  std::mt19937_64 rng(17);
  for (size_t i = pool.size(); i > 1; --i) std::swap(pool[i - 1], pool[size_t(rng() % i)]);
  const int64_t mb = e.max_blocks();
  // Sequence id -> its blocks: A the first max_blocks of the pool, B the next.
  auto block_of = [&](int64_t id, int64_t p) { return pool[size_t(id * mb + p / e.block_size)]; };

  struct Part {
    int64_t id;
    std::vector<int32_t> tokens;
    int64_t pos0;
  };
  auto step = [&](const std::vector<Part>& parts) {
    engine::StepBatch sb;
    sb.block_size = e.block_size;
    sb.max_blocks = mb;
    sb.query_start.push_back(0);
    for (size_t s = 0; s < parts.size(); ++s) {
      const Part& pt = parts[s];
      for (size_t t = 0; t < pt.tokens.size(); ++t) {
        const int64_t p = pt.pos0 + int64_t(t);
        sb.tokens.push_back(pt.tokens[t]);
        sb.positions.push_back(int32_t(p));
        sb.seq_of_token.push_back(int32_t(s));
        sb.slots.push_back(int32_t(block_of(pt.id, p) * e.block_size + p % e.block_size));
      }
      const int64_t ctx = pt.pos0 + int64_t(pt.tokens.size());
      sb.query_start.push_back(int32_t(sb.tokens.size()));
      sb.context_lens.push_back(int32_t(ctx));
      for (int64_t k = 0; k < mb; ++k)
        sb.block_tables.push_back(k * e.block_size < ctx ? block_of(pt.id, k * e.block_size) : -1);
      sb.logits_rows.push_back(int32_t(sb.tokens.size() - 1));
      sb.sample_streams.push_back(pt.id);
      sb.sample_index.push_back(ctx);
      sb.request_ids.push_back(pt.id);
    }
    return runner.execute(sb);
  };

  std::vector<int32_t> prompt_a(29), prompt_b(13);
  for (size_t t = 0; t < prompt_a.size(); ++t) prompt_a[t] = int32_t((t * 37 + 11) % size_t(V));
  for (size_t t = 0; t < prompt_b.size(); ++t) prompt_b[t] = int32_t((t * 53 + 7) % size_t(V));
  Outcome r;
  auto record = [&](const std::vector<int32_t>& toks) {
    std::vector<float> l(toks.size() * size_t(V));
    b.synchronize();
    b.activations_to_host(l.data(), m.logits, int64_t(l.size()));
    r.logits.push_back(l);
    r.tokens.push_back(toks);
  };
  // Inputs are fixed (not the sampled tokens), so both backends see the same steps even where
  // a near tie makes their greedy picks differ.
  auto tok = [&](int64_t k) { return int32_t((k * 31 + 5) % V); };
  record(step({{0, prompt_a, 0}}));
  record(step({{0, {tok(0)}, 29}, {1, {prompt_b.begin(), prompt_b.begin() + 8}, 0}}));
  record(step({{0, {tok(1)}, 30}, {1, {prompt_b.begin() + 8, prompt_b.end()}, 8}}));
  for (int64_t k = 0; k < 5; ++k)  // key 2: warm-up, capture, three replays
    record(step({{0, {tok(2 + k)}, 31 + k}, {1, {tok(10 + k)}, 13 + k}}));
  for (int64_t k = 0; k < 3; ++k)  // key 1
    record(step({{1, {tok(20 + k)}, 18 + k}}));
  return r;
}

TEST(GpuForwardEngine, RaggedStepsMatchCpuBackend) {
  LATPROF_REQUIRE_GPU(gpu);
  gpu->set_graph_enabled(true);
  auto cpu = make_cpu_backend(BackendOptions{});
  for (WeightType wt : {WeightType::f16, WeightType::i8}) {
    SCOPED_TRACE(wt == WeightType::f16 ? "f16" : "i8");
    const Outcome want = run_ragged(*cpu, wt);
    const Outcome got = run_ragged(*gpu, wt);
    ASSERT_EQ(got.logits.size(), want.logits.size());
    for (size_t k = 0; k < want.logits.size(); ++k) {
      EXPECT_LT(rel_error(got.logits[k], want.logits[k]), kLogitTolerance) << "step " << k;
      // Greedy picks agree unless the CPU's best two logits of the row are a near tie.
      ASSERT_EQ(got.tokens[k].size(), want.tokens[k].size());
      const size_t V = want.logits[k].size() / want.tokens[k].size();
      for (size_t r = 0; r < want.tokens[k].size(); ++r) {
        std::vector<float> row(want.logits[k].begin() + std::ptrdiff_t(r * V),
                               want.logits[k].begin() + std::ptrdiff_t((r + 1) * V));
        std::partial_sort(row.begin(), row.begin() + 2, row.end(), std::greater<float>());
        if (row[0] - row[1] > 2e-2f * std::fabs(row[0])) {
          EXPECT_EQ(got.tokens[k][r], want.tokens[k][r]) << "step " << k << " row " << r;
        }
      }
    }
  }
  EXPECT_TRUE(gpu->graph_enabled()) << "decode steps fell back to eager launches";
}

}  // namespace
