// Values in model files that latprof cannot honour are refused with exit code 2 and one line that
// names the tensor or field: weights holding NaN or infinity (in every stored type, GGUF and
// safetensors), and config fields.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>

#include "cli/cli_util.hpp"
#include "core/error.hpp"
#include "model/config.hpp"
#include "model/loaders.hpp"
#include "support/model_writer.hpp"

namespace {

using namespace latprof::testing;

cli_test::Result run_model(const std::string& path, const std::string& extra = "") {
  return cli_test::latprof("run --model '" + path +
                           "' --input 4 --output 2 --repeat 1 --warmup 0 -q " + extra);
}

void expect_refused(const cli_test::Result& r, const std::vector<std::string>& parts) {
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << "one line: " << r.err;
  EXPECT_EQ(r.err.find("internal error"), std::string::npos) << r.err;
  for (const auto& p : parts) EXPECT_NE(r.err.find(p), std::string::npos) << p << " in " << r.err;
}

TEST(NonFiniteWeights, GgufEveryTypeAndDtype) {
  const std::string dir = temp_dir("nan-gguf");
  for (uint32_t type : {0u, 1u, 30u}) {  // F32, F16, BF16
    for (float bad : {std::numeric_limits<float>::quiet_NaN(), -INFINITY}) {
      TinyLlama m = make_tiny_llama(2);
      m.weights["layers.1.w_up"][77] = bad;  // [128, 64]: row 1, column 13
      const std::string p = dir + "/t" + std::to_string(type) + ".gguf";
      write_file(p, tiny_gguf_bytes(m, type));
      for (const char* dtype : {"fp16", "int8"}) {
        SCOPED_TRACE(std::to_string(type) + " " + dtype);
        expect_refused(run_model(p, std::string("--dtype ") + dtype),
                       {p, "blk.1.ffn_up.weight", "NaN or infinity", "row 1, column 13"});
      }
    }
  }
  // Q8_0: a block scale that is infinite.
  TinyLlama m = make_tiny_llama(2);
  GgufWriter g = tiny_gguf(m, 8);
  GgufWriter::Tensor* t = g.find_tensor("blk.0.attn_v.weight");
  ASSERT_NE(t, nullptr);
  const uint16_t inf16 = 0x7c00;
  std::memcpy(&t->data[34 * 3], &inf16, 2);  // 2 blocks per row: row 1, block 1
  const std::string p = dir + "/q8.gguf";
  write_file(p, g.bytes());
  expect_refused(run_model(p), {"blk.0.attn_v.weight", "NaN or infinity", "row 1, column 32"});
  // A norm vector (always F32).
  m.weights["layers.0.ffn_norm"][3] = std::numeric_limits<float>::quiet_NaN();
  write_file(p, tiny_gguf_bytes(m, 1));
  expect_refused(run_model(p), {"blk.0.ffn_norm.weight", "NaN or infinity", "column 3"});
  // A finite F32 value beyond FP16's range: FP16 refuses it, INT8 takes it.
  m = make_tiny_llama(2);
  m.weights["layers.0.wo"][5] = 1e6f;
  write_file(p, tiny_gguf_bytes(m, 0));
  expect_refused(run_model(p), {"blk.0.attn_output.weight", "FP16's range", "--dtype int8"});
  EXPECT_EQ(run_model(p, "--dtype int8").code, 0);
}

TEST(NonFiniteWeights, Safetensors) {
  for (const char* dtype : {"F32", "F16", "BF16"}) {
    SCOPED_TRACE(dtype);
    TinyLlama m = make_tiny_llama(4);
    m.weights["output"][1000] = INFINITY;
    const std::string dir = temp_dir(std::string("nan-st-") + dtype);
    write_tiny_hf(m, dir, dtype);
    const int64_t cols = m.shapes["output"][1];
    expect_refused(run_model(dir), {"lm_head.weight", "NaN or infinity",
                                    "row " + std::to_string(1000 / cols) + ", column " +
                                        std::to_string(1000 % cols)});
  }
  // The same checkpoint without the bad value runs.
  const std::string ok = temp_dir("nan-st-ok");
  write_tiny_hf(make_tiny_llama(4), ok, "F16");
  EXPECT_EQ(run_model(ok).code, 0) << run_model(ok).err;
}

}  // namespace

// ---- config fields ---------------------------------------------------------------------------

namespace cfg_test {

using namespace latprof;
using namespace latprof::testing;

// Expects a UsageError whose one-line message holds every part.
void expect_usage(const std::function<void()>& f, const std::vector<std::string>& parts) {
  try {
    f();
    ADD_FAILURE() << "accepted; expected an error mentioning '" << parts.front() << "'";
  } catch (const UsageError& e) {
    const std::string m = e.what();
    EXPECT_EQ(m.find('\n'), std::string::npos) << m;
    for (const auto& p : parts) EXPECT_NE(m.find(p), std::string::npos) << p << " in: " << m;
  }
}

nlohmann::json tiny_json() {
  return {{"name", "t"},       {"dim", 64},       {"n_layers", 2},     {"n_heads", 4},
          {"n_kv_heads", 2},   {"ffn_dim", 128},  {"vocab_size", 300}, {"max_seq_len", 256},
          {"rope_theta", 1e4}, {"norm_eps", 1e-5}};
}

TEST(ModelConfigFields, RopeFrequencies) {
  ModelConfig c = model_from_json(tiny_json(), "t.json");
  const std::vector<double> plain = c.rope_inv_freq();
  ASSERT_EQ(plain.size(), 8u);
  for (int i = 0; i < 8; ++i) EXPECT_DOUBLE_EQ(plain[size_t(i)], std::pow(1e4, -2.0 * i / 16));
  auto j = tiny_json();
  j["rope_scaling"] = {{"type", "linear"}, {"factor", 4}};
  c = model_from_json(j, "t.json");
  for (int i = 0; i < 8; ++i) EXPECT_DOUBLE_EQ(c.rope_inv_freq()[size_t(i)], plain[size_t(i)] / 4);
  // Llama 3.1 8B: theta 5e5, head_dim 128, factor 8, low 1, high 4, original context 8192.
  // Wavelengths below 2048 are kept, above 8192 divided by 8, between blended.
  j = {{"dim", 4096},     {"n_layers", 1},         {"n_heads", 32},         {"ffn_dim", 128},
       {"vocab_size", 8}, {"max_seq_len", 131072}, {"rope_theta", 500000.0}};
  j["rope_scaling"] = {{"rope_type", "llama3"},
                       {"factor", 8.0},
                       {"low_freq_factor", 1.0},
                       {"high_freq_factor", 4.0},
                       {"original_max_position_embeddings", 8192}};
  c = model_from_json(j, "l31.json");
  const std::vector<double> f = c.rope_inv_freq();
  int kept = 0, divided = 0, blended = 0;
  for (int i = 0; i < 64; ++i) {
    const double base = std::pow(500000.0, -2.0 * i / 128), wl = 2 * M_PI / base;
    if (wl < 2048) {
      EXPECT_DOUBLE_EQ(f[size_t(i)], base) << i;
      ++kept;
    } else if (wl > 8192) {
      EXPECT_DOUBLE_EQ(f[size_t(i)], base / 8) << i;
      ++divided;
    } else {
      EXPECT_LT(f[size_t(i)], base) << i;
      EXPECT_GT(f[size_t(i)], base / 8) << i;
      ++blended;
    }
  }
  EXPECT_GT(kept, 0);
  EXPECT_GT(divided, 0);
  EXPECT_GT(blended, 0);
  // Reports keep the scaling: model_to_json -> model_from_json gives the same frequencies.
  const ModelConfig back = model_from_json(model_to_json(c), "report");
  EXPECT_EQ(back.rope_inv_freq(), f);
}

TEST(ModelConfigFields, LatprofFormatRefusals) {
  auto with = [](const char* key, nlohmann::json v) {
    auto j = tiny_json();
    j[key] = std::move(v);
    return j;
  };
  auto refuses = [&](const nlohmann::json& j, std::vector<std::string> parts) {
    expect_usage([&] { model_from_json(j, "m.json"); }, parts);
  };
  refuses(with("sliding_windw", 4096), {"m.json", "'sliding_windw'", "not one latprof knows"});
  refuses(with("architecture", "gpt2"), {"'architecture'", "llama"});
  refuses(with("rope_theta", -1.0), {"'rope_theta'", "-1", "finite"});
  refuses(with("rope_theta", 0.0), {"'rope_theta'"});
  // JSON text cannot hold NaN, and 1e999 does not parse; a config built in code is checked too.
  for (double bad : {double(INFINITY), double(NAN), -0.0}) {
    ModelConfig c = model_from_json(tiny_json(), "m.json");
    c.rope_theta = bad;
    expect_usage([&] { c.validate(); }, {"'rope_theta'", "finite number > 0"});
  }
  {
    const std::string dir = temp_dir("cfg-json-inf");
    write_file(dir + "/m.json", R"({"dim": 64, "n_layers": 2, "n_heads": 4, "ffn_dim": 128,
        "vocab_size": 300, "max_seq_len": 256, "rope_theta": 1e999})");
    expect_usage([&] { find_model(dir + "/m.json"); }, {"m.json", "not valid JSON", "1e999"});
  }
  refuses(with("norm_eps", 0.0), {"'norm_eps'"});
  refuses(with("sliding_window", -5), {"'sliding_window'", "-5"});
  refuses(with("rope_scaling", {{"rope_type", "yarn"}, {"factor", 4.0}}), {"'yarn'", "linear"});
  refuses(with("rope_scaling", {{"rope_type", "dynamic"}, {"factor", 2.0}}), {"'dynamic'"});
  refuses(with("rope_scaling", {{"type", "linear"}}), {"'rope_scaling.factor'"});
  refuses(with("rope_scaling", {{"type", "linear"}, {"factor", 0.0}}), {"'rope_scaling.factor'"});
  refuses(with("rope_scaling", {{"type", "linear"}, {"factor", 2.0}, {"beta_fast", 32}}),
          {"'rope_scaling.beta_fast'"});
  refuses(with("rope_scaling", {{"rope_type", "llama3"}, {"factor", 8.0}}),
          {"'rope_scaling.low_freq_factor'"});
  refuses(with("rope_scaling", {{"rope_type", "llama3"},
                                {"factor", 8.0},
                                {"low_freq_factor", 4.0},
                                {"high_freq_factor", 1.0},
                                {"original_max_position_embeddings", 8192}}),
          {"'rope_scaling.high_freq_factor'"});
  refuses(with("rope_scaling", "linear"), {"'rope_scaling'"});
  // Accepted: a window, null fields, default rope type.
  EXPECT_EQ(model_from_json(with("sliding_window", 64), "m.json").sliding_window, 64);
  EXPECT_EQ(model_from_json(with("sliding_window", nullptr), "m.json").sliding_window, 0);
  EXPECT_FALSE(model_from_json(with("rope_scaling", {{"rope_type", "default"}}), "m.json")
                   .rope_scaling.active());
}

TEST(ModelConfigFields, BuiltinMistralHasItsWindow) {
  const ModelConfig m = find_model("mistral-7b");
  EXPECT_EQ(m.sliding_window, 4096);
  EXPECT_EQ(m.attended_keys(100), 101);
  EXPECT_EQ(m.attended_keys(10000), 4096);
  for (const auto& b : builtin_models())
    if (b.name != "mistral-7b") {
      EXPECT_EQ(b.sliding_window, 0) << b.name;
    }
}

// A Hugging Face checkpoint of the tiny model whose config.json is edited.
std::string hf_with(const std::string& name, const std::function<void(nlohmann::json&)>& edit,
                    TinyLlama m = make_tiny_llama(6)) {
  const std::string dir = temp_dir("cfg-" + name);
  write_tiny_hf(m, dir, "F16");
  nlohmann::json j = tiny_config_json(m);
  edit(j);
  write_file(dir + "/config.json", j.dump());
  return dir;
}

TEST(ModelConfigFields, HuggingFaceConfig) {
  auto refuses = [](const std::string& name, const std::function<void(nlohmann::json&)>& edit,
                    std::vector<std::string> parts) {
    const std::string dir = hf_with(name, edit);
    parts.push_back(dir);
    expect_usage([&] { open_model_file(dir); }, parts);
  };
  refuses("bias", [](auto& j) { j["attention_bias"] = true; }, {"'attention_bias'"});
  refuses("mlpbias", [](auto& j) { j["mlp_bias"] = true; }, {"'mlp_bias'"});
  refuses("dyn",
          [](auto& j) {
            j["rope_scaling"] = {{"type", "dynamic"}, {"factor", 2.0}};
          },
          {"'dynamic'"});
  refuses("yarn",
          [](auto& j) {
            j["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}};
          },
          {"'yarn'"});
  refuses("partial", [](auto& j) { j["partial_rotary_factor"] = 0.5; }, {"partial_rotary_factor"});
  refuses("quant",
          [](auto& j) {
            j["quantization_config"] = {{"quant_method", "gptq"}};
          },
          {"'quantization_config'"});
  refuses("llamawin", [](auto& j) { j["sliding_window"] = 16; }, {"'sliding_window'", "mistral"});
  refuses("theta", [](auto& j) { j["rope_theta"] = -10000.0; }, {"'rope_theta'"});
  refuses("act", [](auto& j) { j["hidden_act"] = "gelu"; }, {"'hidden_act'"});
  {  // infinity written as JSON text
    const std::string dir = hf_with("thetainf", [](auto&) {});
    std::string text = tiny_config_json(make_tiny_llama(6)).dump();
    const size_t at = text.find("\"rope_theta\":");
    text.replace(at, text.find(',', at) - at, "\"rope_theta\":1e999");
    write_file(dir + "/config.json", text);
    expect_usage([&] { open_model_file(dir); }, {"config.json", "not valid JSON"});
  }
  // Honoured: Mistral's window (null: none), rope scaling, explicit no-bias flags.
  TinyLlama m = make_tiny_llama(6);
  m.sliding_window = 16;
  m.rope_scaling = {{"rope_type", "linear"}, {"factor", 2.0}};
  OpenedModel om = open_model_file(hf_with(
      "mistral", [](auto& j) { j["attention_bias"] = false; }, m));
  EXPECT_EQ(om.config.sliding_window, 16);
  EXPECT_EQ(om.config.rope_scaling.type, "linear");
  EXPECT_EQ(om.config.rope_scaling.factor, 2.0);
  om = open_model_file(hf_with(
      "mistralnull", [](auto& j) { j["sliding_window"] = nullptr; }, m));
  EXPECT_EQ(om.config.sliding_window, 0);
}

TEST(ModelConfigFields, Gguf) {
  const std::string dir = temp_dir("cfg-gguf");
  const TinyLlama m = make_tiny_llama(7);
  auto path_of = [&](const std::string& name, const std::function<void(GgufWriter&)>& edit) {
    GgufWriter g = tiny_gguf(m, 1);
    edit(g);
    const std::string p = dir + "/" + name + ".gguf";
    write_file(p, g.bytes());
    return p;
  };
  auto refuses = [&](const std::string& name, const std::function<void(GgufWriter&)>& edit,
                     std::vector<std::string> parts) {
    const std::string p = path_of(name, edit);
    parts.push_back(p);
    expect_usage([&] { open_model_file(p); }, parts);
  };
  refuses("yarn", [](auto& g) { g.kv_str("llama.rope.scaling.type", "yarn"); },
          {"'llama.rope.scaling.type'", "yarn"});
  refuses("attn", [](auto& g) { g.kv_f32("llama.rope.scaling.attn_factor", 2.f); },
          {"'llama.rope.scaling.attn_factor'"});
  refuses("moe", [](auto& g) { g.kv_u32("llama.expert_count", 8); }, {"'llama.expert_count'"});
  refuses("keylen", [](auto& g) { g.kv_u32("llama.attention.key_length", 32); },
          {"'llama.attention.key_length'"});
  refuses(
      "bias",
      [&](auto& g) { g.tensor("blk.0.attn_q.bias", {64}, 0, encode_f32(std::vector<float>(64))); },
      {"blk.0.attn_q.bias", "biases"});
  refuses("extra",
          [&](auto& g) { g.tensor("blk.0.attn_sink", {4}, 0, encode_f32(std::vector<float>(4))); },
          {"blk.0.attn_sink"});
  refuses("nan",
          [](auto& g) {
            g.erase_kv("llama.rope.freq_base");
            g.kv_f32("llama.rope.freq_base", std::numeric_limits<float>::quiet_NaN());
          },
          {"'rope_theta'", "NaN"});
  refuses("inf",
          [](auto& g) {
            g.erase_kv("llama.rope.freq_base");
            g.kv_f32("llama.rope.freq_base", INFINITY);
          },
          {"'rope_theta'", "infinity"});
  refuses("freqshape",
          [](auto& g) {
            g.tensor("rope_freqs.weight", {5}, 0, encode_f32(std::vector<float>(5, 1.f)));
          },
          {"rope_freqs.weight", "[8]"});
  refuses("freqzero",
          [](auto& g) {
            g.tensor("rope_freqs.weight", {8}, 0, encode_f32(std::vector<float>(8, 0.f)));
          },
          {"rope_freqs"});
  // Honoured: a linear factor, a window, and llama3 as rope_freqs.weight (same frequencies as
  // the Hugging Face config gives).
  OpenedModel om = open_model_file(path_of("linear", [](auto& g) {
    g.kv_str("llama.rope.scaling.type", "linear");
    g.kv_f32("llama.rope.scaling.factor", 4.f);
    g.kv_u32("llama.attention.sliding_window", 32);
  }));
  EXPECT_EQ(om.config.rope_scaling.type, "linear");
  EXPECT_EQ(om.config.rope_scaling.factor, 4.0);
  EXPECT_EQ(om.config.sliding_window, 32);
  TinyLlama l3 = m;
  l3.rope_scaling = {{"rope_type", "llama3"},
                     {"factor", 8.0},
                     {"low_freq_factor", 1.0},
                     {"high_freq_factor", 4.0},
                     {"original_max_position_embeddings", 256}};
  write_file(dir + "/l3.gguf", tiny_gguf_bytes(l3, 1));
  write_tiny_hf(l3, dir + "/l3hf", "F16");
  const auto fg = open_model_file(dir + "/l3.gguf").config.rope_inv_freq();
  const auto fh = open_model_file(dir + "/l3hf").config.rope_inv_freq();
  ASSERT_EQ(fg.size(), fh.size());
  for (size_t i = 0; i < fg.size(); ++i) EXPECT_NEAR(fg[i], fh[i], 1e-6 * fh[i]) << i;
  EXPECT_NE(fh, open_model_file(path_of("plain", [](auto&) {})).config.rope_inv_freq());
}

TEST(ModelConfigFields, CliRefusesWithExitCode2) {
  const std::string dir = temp_dir("cfg-cli");
  auto j = tiny_json();
  j["rope_scaling"] = {{"rope_type", "longrope"}, {"factor", 4.0}};
  write_file(dir + "/m.json", j.dump());
  const auto r = cli_test::latprof("run --model " + dir + "/m.json --input 4 --output 2 -q");
  expect_refused(r, {"longrope", "rope_scaling"});
  const auto p = cli_test::latprof("roofline --model " + dir + "/m.json --hw a100-80gb-sxm");
  expect_refused(p, {"longrope"});
  // mistral-7b's window is in the roofline: decode attention reads at most 4096 positions.
  const auto ok = cli_test::latprof(
      "roofline --model mistral-7b --hw a100-80gb-sxm --input 8000 "
      "--output 2");
  EXPECT_EQ(ok.code, 0) << ok.err;
}

}  // namespace cfg_test
