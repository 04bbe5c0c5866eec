// latprof's forward pass on a tiny random Llama loaded from safetensors (and from GGUF) against
// the independent NumPy reference in tests/reference/llama_ref.py: logits after the prompt and
// greedy tokens. Skipped when python3 with NumPy is not installed (Debian: python3-numpy).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>

#include "backend/cpu/cpu_backend.hpp"
#include "model/loaders.hpp"
#include "runner/forward.hpp"
#include "runner/model.hpp"
#include "support/model_writer.hpp"
#include "support/step_driver.hpp"

namespace {

using namespace latprof;
using namespace latprof::testing;

// Relative L2 error of the logits. latprof keeps activations in fp32 and the KV cache in fp16;
// the reference computes in fp64 from the same fp16 weights: agreement to about the fp16
// rounding of K/V through two layers. 5e-3 leaves room for that and fails on any real error.
constexpr double kTolerance = 5e-3;

std::string run(const std::string& cmd, int* status) {
  std::string out;
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) {
    *status = -1;
    return out;
  }
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  *status = ::pclose(p);
  return out;
}

// The first Python with NumPy: python3 on PATH, else Debian's (a pyenv shim may shadow it).
std::string python_with_numpy() {
  for (const char* py : {"python3", "/usr/bin/python3"}) {
    int st = 0;
    run(std::string(py) + " -c 'import numpy' 2>/dev/null", &st);
    if (st == 0) return py;
  }
  return "";
}

struct Greedy {
  std::vector<float> logits_last;
  std::vector<int32_t> tokens;
};

Greedy latprof_greedy(const std::string& path, const std::vector<int32_t>& prompt, int steps) {
  OpenedModel om = open_model_file(path);
  BackendOptions bo;
  bo.threads = 1;
  auto b = make_cpu_backend(bo);
  const ModelConfig& c = om.config;
  const int64_t n = int64_t(prompt.size());
  LoadedModel m(c, WeightType::f16, *b, test::rect_shape(1, n, n + steps));
  m.load(*om.weights, {});
  test::StepDriver drive(m);
  Greedy g;
  std::vector<float> logits(size_t(c.vocab_size));
  drive.step(prompt, 1, n, 0);
  b->activations_to_host(logits.data(), m.logits, c.vocab_size);
  g.logits_last = logits;
  for (int s = 0; s < steps; ++s) {
    const auto next = int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
    g.tokens.push_back(next);
    drive.step({next}, 1, 1, n + s);
    b->activations_to_host(logits.data(), m.logits, c.vocab_size);
  }
  return g;
}

double rel_l2(const std::vector<double>& want, const std::vector<float>& got) {
  double num = 0, den = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    num += (got[i] - want[i]) * (got[i] - want[i]);
    den += want[i] * want[i];
  }
  return std::sqrt(num / den);
}

// One model variant: the reference's logits and greedy tokens against latprof's, loaded from
// safetensors and from GGUF. Returns the reference's logits.
std::vector<double> check_variant(const std::string& py, const TinyLlama& model,
                                  const std::string& name) {
  SCOPED_TRACE(name);
  const std::string dir = temp_dir("ref-" + name);
  write_tiny_hf(model, dir + "/hf", "F16");
  write_file(dir + "/t.gguf", tiny_gguf_bytes(model, 1));
  const std::vector<int32_t> prompt = {1, 283, 288, 40, 7, 300};
  constexpr int kSteps = 4;
  std::string toks;
  for (int32_t t : prompt) {
    if (!toks.empty()) toks += ',';
    toks += std::to_string(t);
  }
  int st = 0;
  const std::string out = run(py + " " LATPROF_TEST_DIR "/reference/llama_ref.py --model " + dir +
                                  "/hf --tokens " + toks + " --steps " + std::to_string(kSteps),
                              &st);
  EXPECT_EQ(st, 0) << out;
  if (st != 0) return {};
  const auto ref = nlohmann::json::parse(out);
  const auto want = ref["logits_last"].get<std::vector<double>>();
  const auto want_greedy = ref["greedy"].get<std::vector<int32_t>>();
  const auto margins = ref["margins"].get<std::vector<double>>();
  EXPECT_EQ(int64_t(want.size()), model.vocab());
  if (int64_t(want.size()) != model.vocab()) return {};

  for (const std::string& path : {dir + "/hf", dir + "/t.gguf"}) {
    SCOPED_TRACE(path);
    const Greedy g = latprof_greedy(path, prompt, kSteps);
    EXPECT_LT(rel_l2(want, g.logits_last), kTolerance);
    // Greedy tokens agree while the reference's choice is clear (margin above fp16 noise).
    for (int s = 0; s < kSteps; ++s) {
      if (g.tokens[size_t(s)] != want_greedy[size_t(s)]) {
        EXPECT_LT(margins[size_t(s)], 1e-2) << "step " << s << ": latprof " << g.tokens[size_t(s)]
                                            << ", reference " << want_greedy[size_t(s)];
        break;
      }
    }
  }
  return want;
}

TEST(NumpyReference, LogitsAndGreedyTokensAgree) {
  const std::string py = python_with_numpy();
  if (py.empty())
    GTEST_SKIP() << "python3 with numpy not available (apt-get install python3-numpy)";
  const TinyLlama plain = make_tiny_llama(21);
  const std::vector<double> base = check_variant(py, plain, "plain");
  ASSERT_FALSE(base.empty());

  // Rope scaling and a sliding window smaller than the sequence (6 prompt + 4 generated tokens).
  // head_dim 16 and theta 10: 8 frequencies with wavelengths 6.3 .. 47 positions; llama3 with an
  // original context of 32 keeps the first, blends the next five and divides the last two.
  // Each variant names the one it differs from by a single feature.
  struct Variant {
    std::string name, baseline;
    TinyLlama model;
  };
  std::vector<Variant> variants;
  TinyLlama m = plain;
  m.rope_theta = 10.f;  // fast rotations, so position scaling moves the logits within 10 tokens
  variants.push_back({"theta10", "plain", m});
  m.rope_scaling = {{"type", "linear"}, {"factor", 4.0}};
  variants.push_back({"linear", "theta10", m});
  m.rope_scaling = {{"rope_type", "llama3"},
                    {"factor", 8.0},
                    {"low_freq_factor", 1.0},
                    {"high_freq_factor", 4.0},
                    {"original_max_position_embeddings", 32}};
  variants.push_back({"llama3", "theta10", m});
  m = plain;
  m.sliding_window = 3;
  variants.push_back({"window3", "plain", m});
  m.rope_theta = 10.f;
  m.rope_scaling = {{"rope_type", "linear"}, {"factor", 2.0}};
  m.sliding_window = 5;
  variants.push_back({"window5-linear", "theta10", m});
  std::map<std::string, std::vector<double>> refs = {{"plain", base}};
  for (const auto& v : variants) {
    const std::vector<double> want = check_variant(py, v.model, v.name);
    ASSERT_FALSE(want.empty()) << v.name;
    // The feature must change the reference's logits well beyond the tolerance, or agreeing with
    // the reference would not show that latprof honours it.
    const std::vector<double>& b = refs.at(v.baseline);
    const double diff = rel_l2(want, std::vector<float>(b.begin(), b.end()));
    EXPECT_GT(diff, 5 * kTolerance) << v.name << " vs " << v.baseline;
    std::printf("%s vs %s: relative L2 difference of the reference logits %.3g\n", v.name.c_str(),
                v.baseline.c_str(), diff);
    refs[v.name] = want;
  }
}

}  // namespace
