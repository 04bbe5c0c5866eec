// The engine on a real (tiny) model: a request's logits are the same whether it runs alone or
// shares steps with others at other positions (paged KV, ragged steps), chunked prefill equals
// one-shot prefill, preemption recomputes exactly and leaks no block; GQA and MHA, with and
// without a sliding window.
#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "backend/cpu/cpu_backend.hpp"
#include "engine/engine.hpp"
#include "model/open.hpp"
#include "runner/model.hpp"
#include "runner/model_runner.hpp"
#include "support/logit_recorder.hpp"

namespace latprof {
namespace {

using test::kLogitTolerance;
using test::Recorder;
using test::rel_l2;

struct Req {
  int64_t prompt_len, out;
  int64_t seed;  // of its prompt
};

struct Outcome {
  std::map<std::pair<int64_t, int64_t>, std::vector<float>> logits;
  std::map<int64_t, std::vector<int32_t>> tokens;
  int64_t preemptions = 0;
  bool mixed = false;
  bool leak_free = false;
};

std::vector<int32_t> prompt_of(int64_t id, int64_t n, int64_t vocab) {
  std::vector<int32_t> p;
  for (int64_t i = 0; i < n; ++i) p.push_back(int32_t((id * 131 + i * 29 + 7) % vocab));
  return p;
}

// Runs `reqs` (ids 0..n-1, all arriving at once) through the engine with the given budget and
// KV pool.
Outcome run_engine(const ModelConfig& cfg, OpenedModel& om, const std::vector<Req>& reqs,
                   int64_t budget, int64_t kv_blocks, int64_t block_size) {
  auto b = make_cpu_backend(BackendOptions{});
  EngineShape es;
  es.block_size = block_size;
  es.max_model_len = 128;
  es.kv_blocks = kv_blocks;
  es.max_step_tokens = budget;
  es.max_seqs = 16;
  LoadedModel m(cfg, WeightType::f16, *b, es);
  m.load(*om.weights, {});
  Profiler prof(*b);
  Recorder rec(m, prof);
  engine::BlockPool pool(kv_blocks, block_size);
  double t = 0;
  engine::Engine eng({budget, 16, 128}, pool, rec,
                     {[&] { return t += 1; }, [&](double x) { t = x; }});
  Outcome o;
  eng.on_token = [&](int64_t id, int32_t tok) { o.tokens[id].push_back(tok); };
  for (size_t i = 0; i < reqs.size(); ++i)
    eng.submit(int64_t(i), prompt_of(reqs[i].seed, reqs[i].prompt_len, cfg.vocab_size), reqs[i].out,
               0.0);
  eng.run();
  for (const auto& s : eng.steps()) o.preemptions += s.preempted;
  o.logits = rec.logits;
  o.mixed = rec.mixed;
  o.leak_free = pool.num_free() == pool.num_blocks();
  return o;
}

struct Variant {
  const char* name;
  int64_t n_kv_heads;  // 0: the model's (GQA)
  int64_t window;
};

class EngineModel : public ::testing::TestWithParam<Variant> {};

TEST_P(EngineModel, LogitsAloneEqualShared) {
  OpenedModel om = open_model("tiny", 11);
  ModelConfig cfg = om.config;
  if (GetParam().n_kv_heads > 0) cfg.n_kv_heads = GetParam().n_kv_heads;
  cfg.sliding_window = GetParam().window;
  OpenedModel src = open_model("tiny", 11);  // the same synthetic weights, keyed by name and seed
  const std::vector<Req> reqs = {{23, 6, 0}, {5, 9, 1}, {40, 4, 2}, {17, 7, 3}};
  // Together: a budget of 24 chunks the prompts and mixes them with decodes.
  const Outcome shared = run_engine(cfg, src, reqs, 24, 64, 16);
  EXPECT_TRUE(shared.mixed) << "no step mixed a prefill chunk with decodes";
  EXPECT_TRUE(shared.leak_free);
  for (size_t i = 0; i < reqs.size(); ++i) {
    // Alone, prefilled in one step.
    const Outcome alone = run_engine(cfg, src, {reqs[i]}, 64, 64, 16);
    const auto& want_tokens = alone.tokens.at(0);
    const auto& got_tokens = shared.tokens.at(int64_t(i));
    ASSERT_EQ(got_tokens.size(), want_tokens.size());
    for (int64_t k = 0; k < reqs[i].out; ++k) {
      const auto& want = alone.logits.at({0, k});
      const auto& got = shared.logits.at({int64_t(i), k});
      EXPECT_LT(rel_l2(got, want), kLogitTolerance) << "request " << i << " token " << k;
      // Greedy tokens agree wherever the top-2 margin is above the logits' tolerance; once they
      // differ the sequences diverge, so stop there.
      std::vector<float> sorted = want;
      std::partial_sort(sorted.begin(), sorted.begin() + 2, sorted.end(), std::greater<>());
      if (sorted[0] - sorted[1] < 1e-3 * std::fabs(sorted[0])) break;
      ASSERT_EQ(got_tokens[size_t(k)], want_tokens[size_t(k)]) << "request " << i << " token " << k;
    }
  }
}

TEST_P(EngineModel, ChunkedPrefillEqualsOneShotAndPreemptionRecomputes) {
  OpenedModel src = open_model("tiny", 12);
  ModelConfig cfg = src.config;
  if (GetParam().n_kv_heads > 0) cfg.n_kv_heads = GetParam().n_kv_heads;
  cfg.sliding_window = GetParam().window;
  const std::vector<Req> one = {{45, 5, 0}};
  const Outcome whole = run_engine(cfg, src, one, 64, 16, 16);
  const Outcome chunked = run_engine(cfg, src, one, 7, 16, 4);  // 7-token chunks, 4-token blocks
  for (int64_t k = 0; k < 5; ++k)
    EXPECT_LT(rel_l2(chunked.logits.at({0, k}), whole.logits.at({0, k})), kLogitTolerance) << k;
  // A pool too small for all four at once: preemption by recompute, same tokens, no leak.
  const std::vector<Req> four = {{20, 12, 0}, {20, 12, 1}, {20, 12, 2}, {20, 12, 3}};
  const Outcome roomy = run_engine(cfg, src, four, 128, 64, 4);
  const Outcome tight = run_engine(cfg, src, four, 128, 16, 4);
  EXPECT_GT(tight.preemptions, 0);
  EXPECT_TRUE(tight.leak_free);
  EXPECT_EQ(tight.tokens, roomy.tokens);
}

INSTANTIATE_TEST_SUITE_P(Variants, EngineModel,
                         ::testing::Values(Variant{"gqa", 0, 0}, Variant{"mha", 4, 0},
                                           Variant{"gqa_window8", 0, 8}),
                         [](const ::testing::TestParamInfo<Variant>& i) {
                           return std::string(i.param.name);
                         });

}  // namespace
}  // namespace latprof
