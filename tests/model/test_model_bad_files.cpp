// Bad model files: every problem is a UsageError (exit code 2) whose one-line message names the
// file and the field or tensor; never a crash or an allocation of garbage size.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "model/gguf.hpp"
#include "model/loaders.hpp"
#include "model/open.hpp"
#include "model/safetensors.hpp"
#include "support/model_writer.hpp"

namespace {

using namespace latprof;
using namespace latprof::testing;
namespace fs = std::filesystem;

// Runs f, expects a UsageError whose message contains every one of `parts`, on one line.
#define expect_usage(...)       \
  do {                          \
    SCOPED_TRACE("here");       \
    expect_usage_(__VA_ARGS__); \
  } while (0)
void expect_usage_(const std::function<void()>& f, const std::vector<std::string>& parts) {
  try {
    f();
    ADD_FAILURE() << "no error; expected one mentioning '" << parts.front() << "'";
  } catch (const UsageError& e) {
    const std::string m = e.what();
    EXPECT_EQ(m.find('\n'), std::string::npos) << m;
    for (const auto& p : parts)
      EXPECT_NE(m.find(p), std::string::npos) << "'" << p << "' not in: " << m;
  }
}

struct Fixture {
  TinyLlama m = make_tiny_llama(3);
  std::string dir = temp_dir("bad");
  std::string write(const std::string& name, const std::string& bytes) {
    const std::string p = dir + "/" + name;
    write_file(p, bytes);
    return p;
  }
  // A GGUF file after `edit`.
  std::string gguf(const std::string& name, const std::function<void(GgufWriter&)>& edit,
                   uint32_t type = 1) {
    GgufWriter g = tiny_gguf(m, type);
    edit(g);
    return write(name, g.bytes());
  }
  std::string hf(const std::string& name) {
    const std::string p = dir + "/" + name;
    write_tiny_hf(m, p, "F16");
    return p;
  }
};

Fixture& fx() {
  static Fixture f;
  return f;
}

TEST(BadModelFiles, MissingPath) {
  expect_usage([] { open_model("/no/such/dir/model.gguf", 0); },
               {"/no/such/dir/model.gguf", "does not exist"});
  expect_usage([] { open_model("./missing-dir/", 0); }, {"./missing-dir/", "does not exist"});
}

TEST(BadModelFiles, NotAModelFile) {
  auto& f = fx();
  const std::string p = f.write("notes.txt", "just some text, not a model\n");
  expect_usage([&] { open_model(p, 0); }, {p, "is not a model file"});
  const std::string empty = f.write("empty.gguf", "");
  expect_usage([&] { open_model(empty, 0); }, {empty, "not a model file"});
  const std::string d = f.dir + "/emptydir";
  fs::create_directories(d);
  expect_usage([&] { open_model(d, 0); }, {d, "config.json"});
}

TEST(BadModelFiles, TruncatedGgufAtEveryRegion) {
  auto& f = fx();
  const std::string full = tiny_gguf_bytes(f.m, 1);
  // Cut inside the header, the metadata, the tensor infos and the data.
  for (size_t cut = 0; cut < full.size(); cut += full.size() / 61 + 1) {
    const std::string p = f.write("cut.gguf", full.substr(0, cut));
    SCOPED_TRACE(cut);
    expect_usage([&] { open_model_file(p); }, {p});
  }
  const std::string p = f.write("cut1.gguf", full.substr(0, full.size() - 1));
  expect_usage([&] { open_model_file(p); }, {p, "past the end of the file"});
  const std::string q = f.write("cut2.gguf", full.substr(0, 40));
  expect_usage([&] { open_model_file(q); }, {q, "tensor_count", "truncated or corrupt"});
}

TEST(BadModelFiles, GgufOffsetsPastTheEnd) {
  auto& f = fx();
  // A tensor's data offset far past the end.
  GgufWriter g = tiny_gguf(f.m, 1);
  const std::string good = g.bytes();
  // Rewrite the first tensor's offset field: it follows its type; find by re-serialising a copy
  // with a huge string length instead, which is simpler to place: the first metadata key.
  std::string bad = good;
  const uint64_t huge = uint64_t(1) << 60;
  std::memcpy(&bad[24], &huge, 8);  // length of the first key string
  const std::string p = f.write("keylen.gguf", bad);
  expect_usage([&] { open_model_file(p); }, {p, "past the end"});
  // tensor_count and metadata_kv_count that cannot fit.
  bad = good;
  std::memcpy(&bad[8], &huge, 8);
  const std::string q = f.write("count.gguf", bad);
  expect_usage([&] { open_model_file(q); }, {q, "tensor_count", "absurd"});
  bad = good;
  std::memcpy(&bad[16], &huge, 8);
  const std::string r = f.write("kvcount.gguf", bad);
  expect_usage([&] { open_model_file(r); }, {r, "metadata_kv_count"});
  // An array claiming more elements than the file holds.
  const std::string s = f.gguf("array.gguf", [&](GgufWriter& w) {
    w.kv_raw("tokenizer.ggml.scores", 9,
             GgufWriter::pod<uint32_t>(6) + GgufWriter::pod<uint64_t>(huge));
  });
  expect_usage([&] { open_model_file(s); },
               {s, "tokenizer.ggml.scores", "more than the file can hold"});
}

TEST(BadModelFiles, GgufWrongShapeOrType) {
  auto& f = fx();
  const std::string p = f.gguf("shape.gguf", [](GgufWriter& w) {
    auto* t = w.find_tensor("blk.1.attn_k.weight");
    t->dims = {64, 16};  // needs [64, 32]
    t->data.resize(64 * 16 * 2);
  });
  expect_usage([&] { open_model_file(p); },
               {p, "tensor blk.1.attn_k.weight has shape [16, 64]", "[32, 64]"});
  const std::string q =
      f.gguf("q5k.gguf", [](GgufWriter& w) { w.find_tensor("blk.0.attn_q.weight")->type = 13; });
  expect_usage([&] { open_model_file(q); },
               {q, "tensor blk.0.attn_q.weight has type Q5_K; supported: F32, F16, BF16, Q8_0"});
  const std::string r =
      f.gguf("missing.gguf", [](GgufWriter& w) { w.erase_tensor("blk.1.ffn_up.weight"); });
  expect_usage([&] { open_model_file(r); }, {r, "missing tensor blk.1.ffn_up.weight"});
  const std::string s =
      f.gguf("vocab.gguf", [](GgufWriter& w) { w.kv_u32("llama.vocab_size", 999); });
  expect_usage([&] { open_model_file(s); }, {s, "llama.vocab_size", "token_embd.weight"});
  const std::string t =
      f.gguf("type.gguf", [](GgufWriter& w) { w.kv_str("llama.block_count", "two"); });
  expect_usage([&] { open_model_file(t); }, {t, "llama.block_count", "expected an integer"});
}

TEST(BadModelFiles, GgufMetadataProblems) {
  auto& f = fx();
  const std::string a =
      f.gguf("arch.gguf", [](GgufWriter& w) { w.kv_str("general.architecture", "gpt2"); });
  expect_usage([&] { open_model_file(a); }, {a, "general.architecture", "supported: llama"});
  const std::string b =
      f.gguf("nokey.gguf", [](GgufWriter& w) { w.erase_kv("llama.block_count"); });
  expect_usage([&] { open_model_file(b); }, {b, "missing metadata key 'llama.block_count'"});
  const std::string c =
      f.gguf("dim.gguf", [](GgufWriter& w) { w.kv_u32("llama.embedding_length", 1u << 30); });
  expect_usage([&] { open_model_file(c); }, {c, "dim"});
  const std::string d =
      f.gguf("heads.gguf", [](GgufWriter& w) { w.kv_u32("llama.attention.head_count_kv", 3); });
  expect_usage([&] { open_model_file(d); }, {d, "n_kv_heads"});
  const std::string e =
      f.gguf("tok.gguf", [](GgufWriter& w) { w.kv_str("tokenizer.ggml.model", "t5"); });
  expect_usage([&] { open_model_file(e); }, {e, "tokenizer.ggml.model", "t5"});
  const std::string g =
      f.gguf("bos.gguf", [](GgufWriter& w) { w.kv_u32("tokenizer.ggml.bos_token_id", 100000); });
  expect_usage([&] { open_model_file(g); }, {g, "tokenizer.ggml.bos_token_id"});
  const std::string h =
      f.gguf("align.gguf", [](GgufWriter& w) { w.kv_u32("general.alignment", 3); });
  expect_usage([&] { open_model_file(h); }, {h, "general.alignment"});
  const std::string v = f.write("v1.gguf", tiny_gguf(f.m, 1).bytes(1));
  expect_usage([&] { open_model_file(v); }, {v, "version 1"});
}

std::string read_all(const std::string& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

TEST(BadModelFiles, SafetensorsHeaderProblems) {
  auto& f = fx();
  const std::string dir = f.hf("st");
  const std::string st = dir + "/model.safetensors";
  const std::string good = read_all(st);
  auto with = [&](const std::string& bytes) { write_file(st, bytes); };
  const uint64_t huge = uint64_t(1) << 40;
  std::string bad = good;
  std::memcpy(&bad[0], &huge, 8);
  with(bad);
  expect_usage([&] { open_model_file(dir); }, {st, "header length", "absurd"});
  uint64_t past = good.size();
  bad = good;
  std::memcpy(&bad[0], &past, 8);
  with(bad);
  expect_usage([&] { open_model_file(dir); }, {st, "points past the end"});
  with(good.substr(0, good.size() - 10));
  expect_usage([&] { open_model_file(dir); }, {st, "outside the data buffer"});
  with(good.substr(0, 5));
  expect_usage([&] { open_model_file(dir); }, {st, "truncated"});
  // A tensor whose shape disagrees with its byte range, and an unsupported dtype.
  auto header_edit = [&](const std::function<void(nlohmann::json&)>& edit) {
    uint64_t n;
    std::memcpy(&n, good.data(), 8);
    nlohmann::json h = nlohmann::json::parse(good.substr(8, n));
    edit(h);
    std::string hs = h.dump();
    while (hs.size() % 8) hs += ' ';
    with(GgufWriter::pod<uint64_t>(hs.size()) + hs + good.substr(8 + n));
  };
  header_edit([](nlohmann::json& h) { h["model.norm.weight"]["shape"] = {63}; });
  expect_usage([&] { open_model_file(dir); }, {st, "tensor model.norm.weight", "span"});
  header_edit([](nlohmann::json& h) { h["model.norm.weight"]["dtype"] = "I16"; });
  expect_usage([&] { open_model_file(dir); }, {st, "tensor model.norm.weight has dtype I16"});
  header_edit([](nlohmann::json& h) {
    h["model.norm.weight"]["shape"] = {uint64_t(1) << 35, uint64_t(1) << 35};
  });
  expect_usage([&] { open_model_file(dir); }, {st, "model.norm.weight", "absurd"});
  header_edit([](nlohmann::json& h) { h["model.norm.weight"].erase("data_offsets"); });
  expect_usage([&] { open_model_file(dir); }, {st, "data_offsets"});
  with(good);
  EXPECT_NO_THROW(open_model_file(dir));
}

TEST(BadModelFiles, HuggingFaceConfigProblems) {
  auto& f = fx();
  const std::string dir = f.hf("cfg");
  const std::string cfg = dir + "/config.json";
  auto edit = [&](const std::function<void(nlohmann::json&)>& e) {
    nlohmann::json c = tiny_config_json(f.m);
    e(c);
    write_file(cfg, c.dump());
  };
  edit([](nlohmann::json& c) { c["intermediate_size"] = 96; });
  expect_usage([&] { open_model_file(dir); },
               {dir, "tensor model.layers.0.mlp.gate_proj.weight has shape [128, 64]", "[96, 64]"});
  edit([](nlohmann::json& c) { c.erase("hidden_size"); });
  expect_usage([&] { open_model_file(dir); }, {cfg, "missing field 'hidden_size'"});
  edit([](nlohmann::json& c) { c["num_hidden_layers"] = "2"; });
  expect_usage([&] { open_model_file(dir); }, {cfg, "num_hidden_layers"});
  edit([](nlohmann::json& c) { c["model_type"] = "bert"; });
  expect_usage([&] { open_model_file(dir); }, {cfg, "model_type", "bert"});
  edit([](nlohmann::json& c) { c["num_hidden_layers"] = 1 << 30; });
  expect_usage([&] { open_model_file(dir); }, {cfg, "n_layers"});
  edit([](nlohmann::json& c) { c["num_hidden_layers"] = 3; });
  expect_usage([&] { open_model_file(dir); }, {dir, "missing tensor model.layers.2."});
  write_file(cfg, "{ not json");
  expect_usage([&] { open_model_file(dir); }, {cfg, "not valid JSON"});
  edit([](nlohmann::json&) {});
  fs::remove(dir + "/tokenizer.json");
  expect_usage([&] { open_model_file(dir); }, {dir, "tokenizer.json"});
  fs::remove(dir + "/model.safetensors");
  expect_usage([&] { open_model_file(dir); }, {dir, "no *.safetensors"});
}

TEST(BadModelFiles, ShardIndexProblems) {
  auto& f = fx();
  const std::string dir = f.dir + "/sharded";
  write_tiny_hf(f.m, dir, "F16", 2);
  const std::string idx = dir + "/model.safetensors.index.json";
  nlohmann::json j = nlohmann::json::parse(read_all(idx));
  j["weight_map"]["model.norm.weight"] = "model-00009-of-00009.safetensors";
  write_file(idx, j.dump());
  expect_usage([&] { open_model_file(dir); }, {"model-00009-of-00009.safetensors"});
  j["weight_map"]["model.norm.weight"] = "../../etc/passwd";
  write_file(idx, j.dump());
  expect_usage([&] { open_model_file(dir); }, {idx, "outside the directory"});
}

}  // namespace
