// GGUF and safetensors loads of the same tiny random Llama: identical configs and weights (Q/K
// un-permuted from GGUF), identical logits through latprof's forward pass, INT8 at load.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "backend/cpu/cpu_backend.hpp"
#include "core/half.hpp"
#include "model/loaders.hpp"
#include "model/open.hpp"
#include "runner/forward.hpp"
#include "runner/model.hpp"
#include "support/model_writer.hpp"
#include "support/step_driver.hpp"

namespace {

using namespace latprof;
using namespace latprof::testing;

struct Files {
  TinyLlama model = make_tiny_llama(11);
  std::string dir = temp_dir("load");
  std::string gguf(uint32_t type) {
    const std::string p = dir + "/tiny-" + std::to_string(type) + ".gguf";
    write_file(p, tiny_gguf_bytes(model, type));
    return p;
  }
  std::string hf(const std::string& dtype, int shards = 1) {
    const std::string p = dir + "/hf-" + dtype + "-" + std::to_string(shards);
    write_tiny_hf(model, p, dtype, shards);
    return p;
  }
};

Files& files() {
  static Files f;
  return f;
}

std::vector<float> load_f16(OpenedModel& om, const std::string& name, int64_t rows, int64_t cols,
                            Backend& b) {
  DeviceWeight w;
  w.type = WeightType::f16;
  w.n_out = rows;
  w.n_in = cols;
  w.data = b.alloc(w.data_bytes(), "test weight");
  if (name == "tok_embeddings")
    om.weights->load_embedding(name, w, b);
  else
    om.weights->load_linear(name, w, b);
  std::vector<uint16_t> h(size_t(rows * cols));
  b.copy_to_host(h.data(), w.data, w.data_bytes());
  b.release(w.data);
  std::vector<float> out(h.size());
  for (size_t i = 0; i < h.size(); ++i) out[i] = half_to_float(h[i]);
  return out;
}

std::vector<float> load_any(OpenedModel& om, const std::string& name,
                            const std::vector<int64_t>& shape, Backend& b) {
  if (shape.size() == 1) {
    std::vector<float> v(static_cast<size_t>(shape[0]));
    auto* d = static_cast<float*>(b.alloc(v.size() * 4, "test vector"));
    om.weights->load_vector(name, d, shape[0], b);
    b.copy_to_host(v.data(), d, v.size() * 4);
    b.release(d);
    return v;
  }
  return load_f16(om, name, shape[0], shape[1], b);
}

void expect_config(const ModelConfig& c, const TinyLlama& m) {
  EXPECT_EQ(c.dim, m.dim);
  EXPECT_EQ(c.n_layers, m.n_layers);
  EXPECT_EQ(c.n_heads, m.n_heads);
  EXPECT_EQ(c.n_kv_heads, m.n_kv_heads);
  EXPECT_EQ(c.ffn_dim, m.ffn);
  EXPECT_EQ(c.vocab_size, m.vocab());
  EXPECT_EQ(c.max_seq_len, m.max_seq);
  EXPECT_NEAR(c.rope_theta, m.rope_theta, 1e-3);
  EXPECT_NEAR(c.norm_eps, m.eps, 1e-9);
  EXPECT_EQ(c.tie_embeddings, m.tied);
}

TEST(ModelFiles, RecognisesPaths) {
  auto& f = files();
  EXPECT_TRUE(is_model_file(f.gguf(1)));
  EXPECT_TRUE(is_model_file(f.hf("F16")));
  EXPECT_TRUE(is_model_file("./no/such/model.gguf"));
  EXPECT_FALSE(is_model_file("llama-2-7b"));
  EXPECT_FALSE(is_model_file("tiny"));
  EXPECT_FALSE(is_model_file("models/x.json"));
}

TEST(ModelFiles, ConfigFromMetadata) {
  auto& f = files();
  OpenedModel g = open_model_file(f.gguf(1));
  expect_config(g.config, f.model);
  EXPECT_EQ(g.file_format, "gguf");
  EXPECT_EQ(g.file_dtype, "F16");
  EXPECT_EQ(g.config.name, "tiny-llama-test");
  OpenedModel h = open_model(f.hf("BF16"), 0);
  expect_config(h.config, f.model);
  EXPECT_EQ(h.file_format, "safetensors");
  EXPECT_EQ(h.file_dtype, "BF16");
  EXPECT_NE(h.weights->describe().find("safetensors"), std::string::npos);
}

// Every tensor, loaded through the CPU backend, equals the written values exactly: from GGUF
// (F16, F32, BF16, Q/K rows un-permuted) and from safetensors (F16, BF16, F32, sharded).
TEST(ModelFiles, AllFormatsGiveIdenticalWeights) {
  auto& f = files();
  auto b = make_cpu_backend(BackendOptions{});
  const std::vector<std::string> paths = {f.gguf(1),    f.gguf(0),   f.gguf(30),    f.hf("F16"),
                                          f.hf("BF16"), f.hf("F32"), f.hf("F16", 3)};
  for (const auto& p : paths) {
    SCOPED_TRACE(p);
    OpenedModel om = open_model_file(p);
    double bytes = 0;
    for (const auto& [name, want] : f.model.weights) {
      const auto got = load_any(om, name, f.model.shapes.at(name), *b);
      ASSERT_EQ(got.size(), want.size()) << name;
      size_t bad = 0;
      for (size_t i = 0; i < want.size(); ++i) bad += got[i] != want[i];
      EXPECT_EQ(bad, 0u) << name << ": " << bad << " elements differ";
    }
    bytes = om.weights->bytes_read();
    EXPECT_GT(bytes, 0);
  }
}

TEST(ModelFiles, BytesReadCountsEachTensorOnce) {
  auto& f = files();
  auto b = make_cpu_backend(BackendOptions{});
  OpenedModel om = open_model_file(f.hf("F16"));
  double want = 0;
  for (const auto& [name, v] : f.model.weights) {
    load_any(om, name, f.model.shapes.at(name), *b);
    want += double(v.size()) * 2;
  }
  EXPECT_EQ(om.weights->bytes_read(), want);
}

TEST(ModelFiles, Q8_0IsDequantisedExactly) {
  auto& f = files();
  auto b = make_cpu_backend(BackendOptions{});
  OpenedModel om = open_model_file(f.gguf(8));
  EXPECT_EQ(om.file_dtype, "Q8_0");
  const std::string name = "layers.1.wk";
  const auto& shape = f.model.shapes.at(name);
  const auto got = load_f16(om, name, shape[0], shape[1], *b);
  // Q8_0 blocks run along the GGUF (permuted) rows; un-permuting keeps whole rows, so the
  // round trip of the HF rows equals the round trip of the permuted ones.
  const auto want = q8_0_roundtrip(f.model.weights.at(name));
  for (size_t i = 0; i < want.size(); ++i)
    ASSERT_EQ(got[i], half_to_float(float_to_half(want[i]))) << i;
  EXPECT_NE(om.weights->describe().find("Q8_0 blocks dequantised to FP16"), std::string::npos)
      << om.weights->describe();
}

TEST(ModelFiles, Int8AtLoadQuantisesPerRow) {
  auto& f = files();
  auto b = make_cpu_backend(BackendOptions{});
  for (const std::string& p : {f.hf("F16"), f.gguf(8)}) {
    SCOPED_TRACE(p);
    OpenedModel om = open_model_file(p);
    const std::string name = "layers.0.w_up";
    const auto& shape = f.model.shapes.at(name);
    DeviceWeight w;
    w.type = WeightType::i8;
    w.n_out = shape[0];
    w.n_in = shape[1];
    w.data = b->alloc(w.data_bytes(), "w");
    w.scales = static_cast<float*>(b->alloc(size_t(w.n_out) * 4, "s"));
    om.weights->load_linear(name, w, *b);
    const auto* q = static_cast<const int8_t*>(w.data);
    const auto& want = f.model.weights.at(name);
    for (int64_t r = 0; r < w.n_out; ++r) {
      float amax = 0;
      for (int64_t i = 0; i < w.n_in; ++i)
        amax = std::max(amax, std::fabs(want[size_t(r * w.n_in + i)]));
      ASSERT_NEAR(w.scales[r], amax / 127.f, amax * 0.02f) << "row " << r;
      for (int64_t i = 0; i < w.n_in; ++i)
        ASSERT_NEAR(q[r * w.n_in + i] * w.scales[r], want[size_t(r * w.n_in + i)],
                    w.scales[r] * 1.01f)
            << "row " << r << " col " << i;
    }
    b->release(w.data);
    b->release(w.scales);
    EXPECT_NE(om.weights->describe().find("INT8"), std::string::npos) << om.weights->describe();
  }
}

TEST(ModelFiles, TiedEmbeddings) {
  TinyLlama m = make_tiny_llama(5, /*tied=*/true);
  const std::string dir = temp_dir("tied");
  write_file(dir + "/t.gguf", tiny_gguf_bytes(m, 1));
  write_tiny_hf(m, dir + "/hf", "F16");
  for (const std::string& p : {dir + "/t.gguf", dir + "/hf"}) {
    OpenedModel om = open_model_file(p);
    EXPECT_TRUE(om.config.tie_embeddings) << p;
  }
}

std::vector<float> logits_of(OpenedModel& om, const std::vector<int32_t>& prompt, WeightType wt) {
  auto b = make_cpu_backend(BackendOptions{});
  const ModelConfig& c = om.config;
  const int64_t n = int64_t(prompt.size());
  LoadedModel m(c, wt, *b, test::rect_shape(1, n, n + 1));
  m.load(*om.weights, {});
  test::StepDriver drive(m);
  drive.step(prompt, 1, n, 0);
  std::vector<float> logits(size_t(c.vocab_size));
  b->activations_to_host(logits.data(), m.logits, c.vocab_size);
  return logits;
}

// The check: GGUF and safetensors loads give identical logits.
TEST(ModelFiles, GgufAndSafetensorsGiveIdenticalLogits) {
  auto& f = files();
  OpenedModel g = open_model_file(f.gguf(1));
  OpenedModel h = open_model_file(f.hf("F16", 2));
  const std::vector<int32_t> prompt = {1, 283, 288, 40, 7};
  for (WeightType wt : {WeightType::f16, WeightType::i8}) {
    const auto a = logits_of(g, prompt, wt);
    const auto c = logits_of(h, prompt, wt);
    ASSERT_EQ(a.size(), c.size());
    for (size_t i = 0; i < a.size(); ++i) ASSERT_EQ(a[i], c[i]) << "logit " << i;
    for (float x : a) ASSERT_TRUE(std::isfinite(x));
  }
}

}  // namespace
