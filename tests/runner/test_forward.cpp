// latprof's forward pass on the tiny model against the plain fp64 implementation in
// naive_llama.hpp, for prefill and for decode steps from the KV cache, in fp16 and int8.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>

#include "backend/cpu/cpu_backend.hpp"
#include "kernels/cpu/kernels.hpp"
#include "model/open.hpp"
#include "runner/forward.hpp"
#include "runner/naive_llama.hpp"
#include "support/model_writer.hpp"
#include "support/param_names.hpp"
#include "support/step_driver.hpp"

namespace {

using namespace latprof;

// ||a - b|| / ||b||: latprof keeps activations in fp32 and the KV cache in fp16, so logits
// agree with the fp64 reference to about fp16 rounding of K/V (2^-11) amplified through two
// layers; 5e-3 leaves room for that and fails on any real indexing or math error.
constexpr double kLogitTolerance = 5e-3;

double rel_error(const std::vector<float>& a, const naive::Vec& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    den += b[i] * b[i];
  }
  return std::sqrt(num / den);
}

class ForwardTest : public ::testing::TestWithParam<std::tuple<WeightType, int>> {};

TEST_P(ForwardTest, MatchesNaiveReference) {
  const auto [wtype, threads] = GetParam();
  BackendOptions bo;
  bo.threads = threads;
  auto backend = make_cpu_backend(bo);
  OpenedModel om = open_model("tiny", 7);
  const ModelConfig& c = om.config;
  constexpr int64_t kPrompt = 13, kSteps = 5;
  LoadedModel m(c, wtype, *backend, test::rect_shape(1, kPrompt, kPrompt + kSteps));
  m.load(*om.weights, {});
  test::StepDriver drive(m);

  std::vector<int32_t> prompt(kPrompt);
  for (int64_t i = 0; i < kPrompt; ++i) prompt[size_t(i)] = int32_t((i * 37 + 11) % c.vocab_size);
  std::vector<float> logits(size_t(c.vocab_size));
  // Poison the logits so an unwritten element cannot pass.
  std::vector<float> poison(size_t(c.vocab_size), std::nanf(""));
  backend->copy_to_device(m.logits, poison.data(), poison.size() * 4);

  drive.step(prompt, 1, kPrompt, 0);
  backend->activations_to_host(logits.data(), m.logits, c.vocab_size);

  naive::Llama ref(m);
  naive::Vec want;
  for (int32_t t : prompt) want = ref.step(t);
  EXPECT_LT(rel_error(logits, want), kLogitTolerance) << "prefill logits";

  int32_t next = prompt.back();
  for (int64_t s = 0; s < kSteps; ++s) {
    next = int32_t((next * 7 + 3) % c.vocab_size);
    backend->copy_to_device(m.logits, poison.data(), poison.size() * 4);
    drive.step({next}, 1, 1, kPrompt + s);
    backend->activations_to_host(logits.data(), m.logits, c.vocab_size);
    want = ref.step(next);
    EXPECT_LT(rel_error(logits, want), kLogitTolerance) << "decode step " << s;
  }
}

INSTANTIATE_TEST_SUITE_P(DtypesAndThreads, ForwardTest,
                         ::testing::Combine(::testing::Values(WeightType::f16, WeightType::i8),
                                            ::testing::Values(1, 2)),
                         [](const ::testing::TestParamInfo<ForwardTest::ParamType>& i) {
                           return std::string(std::get<0>(i.param) == WeightType::f16 ? "f16"
                                                                                      : "i8") +
                                  "_t" + std::to_string(std::get<1>(i.param));
                         });

// A bf16 or int8 KV cache (BackendOptions::kv) against the same fp64 reference, on a GQA model
// with heads of 32 (the decode's vdpbf16ps or vpdpbusd path where the CPU has it): the logits of
// a 13-token prompt and 5 decode steps, each within tol of the reference's; and those of an fp16
// cache over the same steps (the setting is in effect when they differ).
std::pair<std::vector<float>, std::vector<float>> kv_cache_logits(KvType kv, double tol,
                                                                  const std::string& name) {
  const std::string cfg = latprof::testing::temp_dir(name) + "/gqa-hd32.json";
  latprof::testing::write_file(cfg, R"({"name": "gqa-hd32", "architecture": "llama", "dim": 128,
    "n_layers": 2, "n_heads": 4, "n_kv_heads": 2, "ffn_dim": 176, "vocab_size": 256,
    "max_seq_len": 512, "rope_theta": 10000.0, "norm_eps": 1e-5, "tie_embeddings": false})");
  OpenedModel om = open_model(cfg, 7);
  const ModelConfig& c = om.config;
  EXPECT_EQ(c.head_dim(), 32);
  constexpr int64_t kPrompt = 13, kSteps = 5;
  auto run = [&](KvType kv, bool check) {
    BackendOptions bo;
    bo.kv = kv;
    auto backend = make_cpu_backend(bo);
    EXPECT_EQ(backend->kv_type(), kv);
    LoadedModel m(c, WeightType::f16, *backend, test::rect_shape(1, kPrompt, kPrompt + kSteps));
    m.load(*om.weights, {});
    test::StepDriver drive(m);
    naive::Llama ref(m);
    std::vector<float> logits(size_t(c.vocab_size)), all;
    const std::vector<float> poison(size_t(c.vocab_size), std::nanf(""));
    int32_t next = 11;
    for (int64_t s = 0; s <= kSteps; ++s) {
      backend->copy_to_device(m.logits, poison.data(), poison.size() * 4);
      naive::Vec want;
      if (s == 0) {
        std::vector<int32_t> prompt(kPrompt);
        for (int64_t i = 0; i < kPrompt; ++i)
          want = ref.step(prompt[size_t(i)] = int32_t((i * 37 + 11) % c.vocab_size));
        drive.step(prompt, 1, kPrompt, 0);
      } else {
        next = int32_t((next * 7 + 3) % c.vocab_size);
        want = ref.step(next);
        drive.step({next}, 1, 1, kPrompt + s - 1);
      }
      backend->activations_to_host(logits.data(), m.logits, c.vocab_size);
      if (check) {
        EXPECT_LT(rel_error(logits, want), tol) << "step " << s;
      }
      all.insert(all.end(), logits.begin(), logits.end());
    }
    return all;
  };
  return {run(kv, true), run(KvType::f16, false)};
}

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff = std::max(diff, double(std::fabs(a[i] - b[i])));
  return diff;
}

// bf16 keeps 8 significant bits (2^-9 relative, 4x fp16's rounding) and the vdpbf16ps path rounds
// q and the probabilities as well (2.3e-3 measured against 5e-3 for fp16's tolerance): twice the
// fp16 tolerance.
TEST(Forward, Bf16KvCacheMatchesNaiveReference) {
  const auto [bf16, fp16] = kv_cache_logits(KvType::bf16, 2 * kLogitTolerance, "forward-bf16");
  EXPECT_GT(max_abs_diff(bf16, fp16), 0.0) << "a bf16 cache gave the fp16 cache's logits";
}

// int8 keeps K and V within half a step of max |x| / 127 per position and kv head (~4e-3 of
// each value), and the vpdpbusd path rounds q to int8 per head as well: up to 1.1e-2 measured
// (6.1e-3 after the prefill, which widens the cache) against 5e-3 for fp16's tolerance: four
// times the fp16 tolerance.
TEST(Forward, Int8KvCacheMatchesNaiveReference) {
  const auto [i8, fp16] = kv_cache_logits(KvType::i8, 4 * kLogitTolerance, "forward-int8");
  EXPECT_GT(max_abs_diff(i8, fp16), 0.0) << "an int8 cache gave the fp16 cache's logits";
}

// A batch of identical sequences must give identical logits per sequence, equal to batch 1.
TEST(Forward, BatchRowsAgree) {
  auto backend = make_cpu_backend(BackendOptions{});
  OpenedModel om = open_model("tiny", 3);
  const ModelConfig& c = om.config;
  constexpr int64_t B = 3, T = 9;
  LoadedModel m(c, WeightType::f16, *backend, test::rect_shape(B, T, T + 1));
  m.load(*om.weights, {});
  test::StepDriver drive(m);
  std::vector<int32_t> toks;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t) toks.push_back(int32_t(5 + t * 3));
  drive.step(toks, B, T, 0);
  std::vector<float> logits(size_t(B * c.vocab_size));
  backend->activations_to_host(logits.data(), m.logits, B * c.vocab_size);
  for (int64_t b = 1; b < B; ++b)
    for (int64_t i = 0; i < c.vocab_size; ++i)
      ASSERT_NEAR(logits[size_t(b * c.vocab_size + i)], logits[size_t(i)], 1e-4)
          << "sequence " << b << " logit " << i;
}

// The CPU backend lays INT8 (W8A16) weights out as StreamTuning::i8_rows4 says when it writes
// them (kernels/cpu/kernels.hpp): interleaved in fours where the GEMV reads that layout, else
// row-major. Either way its matmul of 1, 3 and 9 activation rows (the decode's GEMV) and of 40
// (the GEMM, on every ISA) agrees with an fp64 product of the written values; the setting then
// returns to the vendor's default.
TEST(Forward, Int8LayoutFollowsStreamTuning) {
  auto backend = make_cpu_backend(BackendOptions{});
  constexpr int64_t kOut = 12, kIn = 192;
  std::vector<int8_t> q(size_t(kOut * kIn));
  std::vector<float> scales(static_cast<size_t>(kOut));
  for (size_t i = 0; i < q.size(); ++i) q[i] = int8_t(int((i * 2654435761u >> 7) % 255) - 127);
  for (int64_t r = 0; r < kOut; ++r) scales[size_t(r)] = 0.01f + 0.001f * float(r);
  for (const bool rows4 : {false, true}) {
    cpu::StreamTuning t = cpu::vendor_stream_tuning();
    t.i8_rows4 = rows4;
    cpu::set_stream_tuning(t);
    DeviceWeight w;
    w.type = WeightType::i8;
    w.n_out = kOut;
    w.n_in = kIn;
    w.data = backend->alloc(w.data_bytes(), "w");
    w.scales = static_cast<float*>(backend->alloc(size_t(kOut) * 4, "s"));
    backend->upload_weight(w, q.data(), scales.data());
    EXPECT_EQ(w.interleaved, rows4 && cpu::gemv_int8_dot()) << "rows4 " << rows4;
    DeviceWeight f = w;  // the synthetic fill decides the same way
    f.data = backend->alloc(f.data_bytes(), "f");
    f.scales = static_cast<float*>(backend->alloc(size_t(kOut) * 4, "fs"));
    f.interleaved = !w.interleaved;
    backend->fill_weight(f, 5, 0.02f);
    EXPECT_EQ(f.interleaved, w.interleaved) << "rows4 " << rows4;
    for (const int64_t m : {1, 3, 9, 40}) {
      std::vector<float> x(size_t(m * kIn)), y(size_t(m * kOut), std::nanf(""));
      for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.37f * float(i)) * 0.5f;
      backend->matmul(w, x.data(), m, y.data());
      for (int64_t j = 0; j < m; ++j)
        for (int64_t r = 0; r < kOut; ++r) {
          double want = 0, mag = 0;
          for (int64_t k = 0; k < kIn; ++k) {
            const double p = double(q[size_t(r * kIn + k)]) * x[size_t(j * kIn + k)];
            want += p;
            mag += std::fabs(p);
          }
          want *= scales[size_t(r)];
          mag *= scales[size_t(r)];
          // int16 activations (2^-16 of max|x|) and fp32 sums
          ASSERT_NEAR(y[size_t(j * kOut + r)], want, 1e-4 * mag + 1e-6)
              << "rows4 " << rows4 << " m " << m << " row " << r << " act " << j;
        }
    }
    backend->release(f.data);
    backend->release(f.scales);
    backend->release(w.data);
    backend->release(w.scales);
  }
  cpu::reset_stream_tuning();
  EXPECT_EQ(cpu::stream_tuning().i8_rows4, cpu::vendor_stream_tuning().i8_rows4);
}

}  // namespace
