// Known encodings for two small hand-made vocabularies: the tiny model's SentencePiece-style one
// (from GGUF scores and from tokenizer.json merges) and a byte-level BPE one (GPT-2 and Llama 3
// splits, from tokenizer.json and from GGUF). Byte fallback, spaces, unicode, special tokens,
// round trips and exact-length prompts.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "model/gguf.hpp"
#include "model/loaders.hpp"
#include "model/tokenizer_vocab.hpp"
#include "support/model_writer.hpp"

namespace {

using namespace latprof;
using namespace latprof::testing;

const std::string S = "\xe2\x96\x81";  // ▁

const std::vector<std::string> kTexts = {
    "hello world",
    "the cat is a test",
    " hello",
    "  two leading spaces",
    "trailing spaces  ",
    "a  b   c",
    "Hello, World! caf\xc3\xa9 \xe4\xb8\xad\xe6\x96\x87 \xf0\x9f\x98\x80",
    "tabs\tand\nnew\r\nlines\n\n",
    "12345 it's 3.14",
    "",
    " ",
    "\xff\xfe invalid utf-8 \xc3",
};

struct Spm {
  TinyLlama m = make_tiny_llama(1);
  std::unique_ptr<Tokenizer> gguf, json;
  Spm() {
    const std::string dir = temp_dir("tok");
    write_file(dir + "/t.gguf", tiny_gguf_bytes(m, 1));
    write_tiny_hf(m, dir + "/hf", "F16");
    gguf = open_model_file(dir + "/t.gguf").tokenizer;
    json = open_model_file(dir + "/hf").tokenizer;
  }
  std::vector<int32_t> ids(std::vector<std::string> pieces) const {
    std::vector<int32_t> out = {1};
    for (auto& p : pieces) {
      const int32_t id = m.id(p);
      EXPECT_GE(id, 0) << p;
      out.push_back(id);
    }
    return out;
  }
};

Spm& spm() {
  static Spm s;
  return s;
}

TEST(SpmTokenizer, KnownEncodings) {
  auto& s = spm();
  for (Tokenizer* t : {s.gguf.get(), s.json.get()}) {
    SCOPED_TRACE(t->name());
    EXPECT_EQ(t->bos_id(), 1);
    EXPECT_EQ(t->eos_id(), 2);
    EXPECT_EQ(t->vocab_size(), s.m.vocab());
    EXPECT_EQ(t->encode("hello world", true), s.ids({S + "hello", S + "world"}));
    EXPECT_EQ(t->encode("the latency model", true), s.ids({S + "the", S + "latency", S + "model"}));
    // Leading and repeated spaces: each extra space is a lone ▁.
    EXPECT_EQ(t->encode(" hello", true), s.ids({S, S + "hello"}));
    // Byte fallback for characters outside the vocabulary ('b', 'H'); é is a piece.
    EXPECT_EQ(t->encode("a  b", true), s.ids({S + "a", S, S, "<0x62>"}));
    EXPECT_EQ(t->encode("caf\xc3\xa9", true), s.ids({S + "c", "a", "f", "\xc3\xa9"}));
    EXPECT_EQ(t->encode("\xe4\xb8\xad", true), s.ids({S, "<0xE4>", "<0xB8>", "<0xAD>"}));
    EXPECT_EQ(t->encode("\xf0\x9f\x98\x80", true),
              s.ids({S, "<0xF0>", "<0x9F>", "<0x98>", "<0x80>"}));
    // Special tokens in text.
    EXPECT_EQ(t->encode("the cat</s>", true), s.ids({S + "the", S + "cat", "</s>"}));
    EXPECT_EQ(t->encode("hello", false), std::vector<int32_t>{s.m.id(S + "hello")});
    EXPECT_EQ(t->decode_token(s.m.id(S + "world")), " world");
    EXPECT_EQ(t->decode_token(s.m.id("<0x41>")), "A");
    EXPECT_EQ(t->decode_token(1), "");
  }
}

TEST(SpmTokenizer, RoundTripAndFormatsAgree) {
  auto& s = spm();
  for (const auto& x : kTexts) {
    SCOPED_TRACE(x);
    const auto a = s.gguf->encode(x, true);
    EXPECT_EQ(a, s.json->encode(x, true));
    EXPECT_EQ(s.gguf->decode(a), x);
    EXPECT_EQ(s.json->decode(a), x);
  }
}

TEST(SpmTokenizer, PromptOfExactLength) {
  auto& s = spm();
  for (int64_t n : {1, 2, 3, 17, 128, 1000}) {
    const std::string p = s.gguf->make_prompt(n, 42);
    EXPECT_EQ(int64_t(s.gguf->encode(p, true).size()), n) << p;
    EXPECT_EQ(int64_t(s.json->encode(s.json->make_prompt(n, 7), true).size()), n);
  }
  EXPECT_EQ(s.gguf->make_prompt(20, 1), s.gguf->make_prompt(20, 1));
  EXPECT_NE(s.gguf->make_prompt(20, 1), s.gguf->make_prompt(20, 2));
}

// ---- byte-level BPE ------------------------------------------------------------------------

std::string byte_piece(int b) {
  // GPT-2's byte-to-unicode table, written from its definition.
  int n = 0;
  for (int x = 0; x < b; ++x) {
    const bool keep = (x >= 33 && x <= 126) || (x >= 161 && x <= 172) || (x >= 174 && x <= 255);
    n += !keep;
  }
  const bool keep = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
  std::string s;
  tok_detail::utf8_append(s, keep ? uint32_t(b) : uint32_t(256 + n));
  return s;
}

struct Bpe {
  std::vector<std::string> tokens;
  std::vector<std::string> merges = {"Ġ Ġ",   "3 4",     "1 2",     "12 3", "h e", "l l",
                                     "he ll", "hell o",  "Ġ hello", "Ġ w",  "o r", "Ġw or",
                                     "l d",   "Ġwor ld", "Ġ b",     "i t",  "' s"};
  nlohmann::json tokenizer_json(bool llama3) const {
    nlohmann::json vocab = nlohmann::json::object();
    for (size_t i = 0; i + 1 < tokens.size(); ++i) vocab[tokens[i]] = i;
    nlohmann::json pre = {{"type", "ByteLevel"}, {"add_prefix_space", false}};
    if (llama3)
      pre = {{"type", "Sequence"},
             {"pretokenizers",
              {{{"type", "Split"},
                {"pattern", {{"Regex", "(?i:'s|'t)|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+"}}}},
               {{"type", "ByteLevel"}}}}};
    return {{"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", merges}}},
            {"pre_tokenizer", pre},
            {"decoder", {{"type", "ByteLevel"}}},
            {"added_tokens",
             {{{"id", tokens.size() - 1}, {"content", tokens.back()}, {"special", true}}}}};
  }
  Bpe() {
    for (int b = 0; b < 256; ++b) tokens.push_back(byte_piece(b));
    for (auto& m : merges) {
      // "Ġ" in the merges above is U+0120, the mapped space.
      std::string l = m.substr(0, m.find(' ')), r = m.substr(m.find(' ') + 1);
      tokens.push_back(l + r);
    }
    tokens.push_back("<|endoftext|>");
  }
  int32_t id(const std::string& p) const {
    for (size_t i = 0; i < tokens.size(); ++i)
      if (tokens[i] == p) return int32_t(i);
    ADD_FAILURE() << "no piece " << p;
    return -1;
  }
  std::vector<int32_t> ids(std::vector<std::string> pieces) const {
    std::vector<int32_t> out;
    for (auto& p : pieces) out.push_back(id(p));
    return out;
  }
  std::unique_ptr<Tokenizer> from_gguf(bool llama3) const {
    GgufWriter g;
    g.kv_str("tokenizer.ggml.model", "gpt2");
    g.kv_str("tokenizer.ggml.pre", llama3 ? "llama-bpe" : "gpt2");
    g.kv_str_array("tokenizer.ggml.tokens", tokens);
    std::vector<int32_t> types(tokens.size(), 1);
    types.back() = 3;
    g.kv_i32_array("tokenizer.ggml.token_type", types);
    g.kv_str_array("tokenizer.ggml.merges", merges);
    g.kv_u32("tokenizer.ggml.eos_token_id", uint32_t(tokens.size() - 1));
    const std::string bytes = g.bytes();
    const auto f = gguf::parse(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), "mem");
    return tokenizer_from_gguf(f);
  }
};

TEST(BpeTokenizer, KnownEncodings) {
  Bpe v;
  for (bool from_json : {true, false}) {
    auto t = from_json ? tokenizer_from_json(v.tokenizer_json(false), nullptr, "tokenizer.json")
                       : v.from_gguf(false);
    SCOPED_TRACE(t->name());
    EXPECT_EQ(t->bos_id(), -1);
    EXPECT_EQ(t->eos_id(), int32_t(v.tokens.size() - 1));
    EXPECT_EQ(t->encode("hello world", true), v.ids({"hello", "Ġworld"}));
    EXPECT_EQ(t->encode(" hello", false), v.ids({"Ġhello"}));
    // \s+(?!\S): the last space of a run goes with the next word; at the end, the run stays.
    EXPECT_EQ(t->encode("  hello", false), v.ids({"Ġ", "Ġhello"}));
    EXPECT_EQ(t->encode("a  b", false), v.ids({"a", "Ġ", "Ġb"}));
    EXPECT_EQ(t->encode("a   ", false), v.ids({"a", "ĠĠ", "Ġ"}));
    // Numbers are one GPT-2 piece: "34" merges first.
    EXPECT_EQ(t->encode("12345", false), v.ids({"12", "34", "5"}));
    EXPECT_EQ(t->encode("it's", false), v.ids({"it", "'s"}));
    // é is two bytes, each its own token here; 中 three.
    EXPECT_EQ(t->encode("\xc3\xa9", false), v.ids({byte_piece(0xc3), byte_piece(0xa9)}));
    EXPECT_EQ(t->encode("hello<|endoftext|>", false), v.ids({"hello", "<|endoftext|>"}));
    EXPECT_EQ(t->decode_token(v.id("Ġworld")), " world");
    EXPECT_EQ(t->decode_token(v.id("<|endoftext|>")), "");
    for (const auto& x : kTexts) EXPECT_EQ(t->decode(t->encode(x, false)), x) << x;
    for (int64_t n : {1, 5, 64, 500}) {
      const std::string p = t->make_prompt(n, 3);
      EXPECT_EQ(int64_t(t->encode(p, true).size()), n) << p;
    }
  }
}

TEST(BpeTokenizer, Llama3Split) {
  Bpe v;
  for (bool from_json : {true, false}) {
    auto t = from_json ? tokenizer_from_json(v.tokenizer_json(true), nullptr, "tokenizer.json")
                       : v.from_gguf(true);
    SCOPED_TRACE(t->name());
    EXPECT_NE(t->name().find("Llama 3"), std::string::npos);
    // Digits in groups of three: "123" then "45".
    EXPECT_EQ(t->encode("12345", false), v.ids({"123", "4", "5"}));
    EXPECT_EQ(t->encode("hello world", false), v.ids({"hello", "Ġworld"}));
    EXPECT_EQ(t->encode("a  b", false), v.ids({"a", "Ġ", "Ġb"}));
    for (const auto& x : kTexts) EXPECT_EQ(t->decode(t->encode(x, false)), x) << x;
  }
}

TEST(Tokenizers, BadVocabularies) {
  Bpe v;
  auto j = v.tokenizer_json(false);
  j["model"]["type"] = "Unigram";
  try {
    tokenizer_from_json(j, nullptr, "x/tokenizer.json");
    FAIL();
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("x/tokenizer.json"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("Unigram"), std::string::npos);
  }
  j = v.tokenizer_json(false);
  j["model"]["vocab"]["zzz"] = -4;
  EXPECT_THROW(tokenizer_from_json(j, nullptr, "t.json"), UsageError);
  j = v.tokenizer_json(false);
  j["model"]["merges"] = 5;
  j["model"].erase("merges");
  EXPECT_THROW(tokenizer_from_json(j, nullptr, "t.json"), UsageError);
}

}  // namespace
