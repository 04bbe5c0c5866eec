// UTF-8-safe streaming detokenization: characters split across tokens (SentencePiece byte
// fallback and byte-level BPE), invalid bytes, the end of the stream; the UTF-8 helpers; and end
// to end, a GGUF whose vocabulary is mostly <0xNN> byte tokens, so random weights generate broken
// sequences, runs with a JSON report that parses.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "cli/cli_util.hpp"
#include "core/utf8.hpp"
#include "model/detokenizer.hpp"
#include "model/loaders.hpp"
#include "model/tokenizer_vocab.hpp"
#include "support/model_writer.hpp"

namespace {

using namespace latprof;
using namespace latprof::testing;

const std::string kZhong = "\xe4\xb8\xad";  // 中, three bytes
const std::string kFffd = "\xef\xbf\xbd";   // U+FFFD

TEST(Utf8, StepAndSanitize) {
  EXPECT_TRUE(utf8_valid("plain ascii"));
  EXPECT_TRUE(utf8_valid("caf\xc3\xa9 " + kZhong + " \xf0\x9f\x98\x80"));
  EXPECT_FALSE(utf8_valid("\xe4\xb8"));          // cut short
  EXPECT_FALSE(utf8_valid("\xc0\xaf"));          // overlong
  EXPECT_FALSE(utf8_valid("\xed\xa0\x80"));      // surrogate
  EXPECT_FALSE(utf8_valid("\xf4\x90\x80\x80"));  // above U+10FFFF
  EXPECT_EQ(utf8_step("\xe4\xb8", 0).kind, Utf8Step::incomplete);
  EXPECT_EQ(utf8_step("\xe4\xb8", 0).len, 2u);
  EXPECT_EQ(utf8_step("\xe4x", 0).kind, Utf8Step::invalid);
  // One U+FFFD per maximal subpart, as Python's bytes.decode(errors="replace").
  EXPECT_EQ(utf8_sanitize("a\xe4\xb8z"), "a" + kFffd + "z");
  EXPECT_EQ(utf8_sanitize("\xff\xfe"), kFffd + kFffd);
  EXPECT_EQ(utf8_sanitize("\xc0\xaf"), kFffd + kFffd);
  EXPECT_EQ(utf8_sanitize("\xf0\x9f\x98"), kFffd);
  EXPECT_EQ(utf8_sanitize("ok " + kZhong), "ok " + kZhong);
}

// Feeds ids one by one; returns the pieces returned by each push, then finish().
std::vector<std::string> stream(const Tokenizer& t, const std::vector<int32_t>& ids) {
  StreamingDetokenizer d(t);
  std::vector<std::string> out;
  for (int32_t id : ids) out.push_back(d.push(id));
  out.push_back(d.finish());
  return out;
}

TEST(StreamingDetokenizer, SentencePieceByteFallback) {
  const TinyLlama m = make_tiny_llama(1);
  const std::string dir = temp_dir("detok-spm");
  write_file(dir + "/t.gguf", tiny_gguf_bytes(m, 1));
  const auto tok = open_model_file(dir + "/t.gguf").tokenizer;
  const int32_t e4 = m.id("<0xE4>"), b8 = m.id("<0xB8>"), ad = m.id("<0xAD>");
  const int32_t hello = m.id("\xe2\x96\x81hello");
  ASSERT_GE(e4, 0);
  ASSERT_GE(hello, 0);
  // A byte token alone is not text: decode_token gives the raw, invalid byte.
  EXPECT_FALSE(utf8_valid(tok->decode_token(e4)));
  // 中 across three tokens: nothing until the last byte arrives.
  EXPECT_EQ(stream(*tok, {hello, e4, b8, ad, hello}),
            (std::vector<std::string>{" hello", "", "", kZhong, " hello", ""}));
  // Cut short at the end: finish() gives one U+FFFD.
  EXPECT_EQ(stream(*tok, {hello, e4, b8}), (std::vector<std::string>{" hello", "", "", kFffd}));
  // Interrupted by a complete token: the broken prefix becomes U+FFFD before it.
  EXPECT_EQ(stream(*tok, {e4, b8, hello, ad}),
            (std::vector<std::string>{"", "", kFffd + " hello", kFffd, ""}));
  // A byte that can never start a character is replaced at once.
  EXPECT_EQ(stream(*tok, {m.id("<0xFF>"), hello}), (std::vector<std::string>{kFffd, " hello", ""}));
}

std::string byte_piece(int b) {  // GPT-2's byte-to-unicode table
  int n = 0;
  auto keep = [](int x) {
    return (x >= 33 && x <= 126) || (x >= 161 && x <= 172) || (x >= 174 && x <= 255);
  };
  for (int x = 0; x < b; ++x) n += !keep(x);
  std::string s;
  tok_detail::utf8_append(s, keep(b) ? uint32_t(b) : uint32_t(256 + n));
  return s;
}

TEST(StreamingDetokenizer, ByteLevelBpe) {
  // 256 byte pieces, then "中" split as the two-byte piece E4 B8 and the byte AD, and " hi".
  nlohmann::json vocab = nlohmann::json::object();
  for (int b = 0; b < 256; ++b) vocab[byte_piece(b)] = b;
  const std::string e4b8 = byte_piece(0xe4) + byte_piece(0xb8);
  const std::string sp_hi = byte_piece(' ') + "h" + "i";
  vocab[e4b8] = 256;
  vocab[byte_piece(' ') + "h"] = 257;
  vocab[sp_hi] = 258;
  const nlohmann::json merges = {byte_piece(0xe4) + " " + byte_piece(0xb8), byte_piece(' ') + " h",
                                 byte_piece(' ') + "h i"};
  const nlohmann::json j = {{"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", merges}}},
                            {"pre_tokenizer", {{"type", "ByteLevel"}}},
                            {"decoder", {{"type", "ByteLevel"}}}};
  const auto tok = tokenizer_from_json(j, nullptr, "tokenizer.json");
  ASSERT_EQ(tok->encode(kZhong + " hi", false), (std::vector<int32_t>{256, 0xad, 258}));
  EXPECT_EQ(tok->decode_token(256), "\xe4\xb8");
  EXPECT_EQ(stream(*tok, {256, 0xad, 258}), (std::vector<std::string>{"", kZhong, " hi", ""}));
  EXPECT_EQ(stream(*tok, {258, 256}), (std::vector<std::string>{" hi", "", kFffd}));
  EXPECT_EQ(stream(*tok, {256, 258, 0xad}),
            (std::vector<std::string>{"", kFffd + " hi", kFffd, ""}));
  // Whatever the ids, the stream is valid UTF-8 and equals the sanitized bytes.
  std::string bytes, text;
  StreamingDetokenizer d(*tok);
  for (int k = 0; k < 2000; ++k) {
    const auto id = int32_t((k * 7919 + k * k * 31) % 259);
    bytes += tok->decode_token(id);
    text += d.push(id);
  }
  text += d.finish();
  EXPECT_TRUE(utf8_valid(text));
  EXPECT_EQ(text, utf8_sanitize(bytes));
}

// ---- end to end --------------------------------------------------------------------------------

bool any_high_byte_token(const TinyLlama& m, const std::vector<int32_t>& ids) {
  for (int32_t id : ids)
    if (id >= m.id("<0x80>") && id <= m.id("<0xFF>")) return true;
  return false;
}

TEST(StreamingDetokenizer, ByteTokenModelRunsAndItsJsonParses) {
  const TinyLlama m = make_tiny_llama(5);  // 256 of its 314 tokens are <0xNN>
  const std::string dir = temp_dir("detok-e2e");
  write_file(dir + "/bytes.gguf", tiny_gguf_bytes(m, 1));
  const std::string json = dir + "/out.json";
  // Sampling from near-uniform logits: mostly byte tokens, half of them >= 0x80.
  const auto r =
      cli_test::latprof("run --model " + dir + "/bytes.gguf --input 8 --output 48 " +
                        "--temperature 1 --seed 3 --repeat 1 --warmup 0 -q --json " + json);
  ASSERT_EQ(r.code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(cli_test::slurp(json));  // throws if not UTF-8
  const auto ids = j["run"]["output_token_ids"].get<std::vector<int32_t>>();
  ASSERT_EQ(ids.size(), 48u);
  ASSERT_TRUE(any_high_byte_token(m, ids)) << "the test needs broken sequences";
  const auto tok = open_model_file(dir + "/bytes.gguf").tokenizer;
  std::string bytes;
  for (int32_t id : ids) bytes += tok->decode_token(id);
  EXPECT_FALSE(utf8_valid(bytes));
  EXPECT_EQ(j["run"]["output_text"].get<std::string>(), utf8_sanitize(bytes));

  // A prompt that is not UTF-8, on the same model and on a built-in one.
  for (const std::string& model : {dir + "/bytes.gguf", std::string("tiny")}) {
    const auto p = cli_test::latprof("run --model " + model +
                                     " --prompt \"$(printf 'ab\\377\\376 \\344\\270')\" "
                                     "--output 4 --repeat 1 --warmup 0 -q --json " +
                                     json);
    ASSERT_EQ(p.code, 0) << p.err;
    EXPECT_TRUE(nlohmann::json::accept(cli_test::slurp(json))) << model;
  }
}

TEST(Utf8, CompareWithFileNameThatIsNotUtf8) {
  const std::string dir = temp_dir("detok-compare");
  const std::string a = dir + "/a.json";
  ASSERT_EQ(cli_test::latprof("run --model tiny --input 8 --output 4 --repeat 1 --warmup 0 -q "
                              "--json " +
                              a)
                .code,
            0);
  const std::string bad = dir + "/b\xff\xfe.json";
  std::filesystem::copy_file(a, bad);
  const auto r = cli_test::latprof("compare " + a + " '" + bad + "' --json " + dir + "/c.json");
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(cli_test::slurp(dir + "/c.json"));
  EXPECT_NE(j.dump().find("b\xef\xbf\xbd\xef\xbf\xbd.json"), std::string::npos);
}

}  // namespace
