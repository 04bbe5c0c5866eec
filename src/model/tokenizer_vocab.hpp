#pragma once
// Vocabulary tokenizers of real model files:
//   * SentencePiece-style BPE (Llama 1/2, Mistral, TinyLlama): spaces become U+2581 "▁", a "▁" is
//     prefixed to the text, adjacent pieces are merged best-first (by the merged piece's score, or
//     by merge rank when the vocabulary comes with a merges list, as in tokenizer.json), and
//     characters outside the vocabulary fall back to byte tokens <0xNN>.
//   * byte-level BPE (GPT-2, Llama 3): UTF-8 bytes are mapped to printable code points, the text
//     is split by a hand-written pre-tokenizer equivalent to the GPT-2 or Llama 3 split regex, and
//     each piece is merged by merge rank.
// Both read their vocabulary from GGUF metadata or from a Hugging Face tokenizer.json.
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "model/tokenizer.hpp"

namespace latprof {

namespace gguf {
struct File;
}

enum class TokenKind : int32_t {
  normal = 1,
  unknown = 2,
  control = 3,
  user_defined = 4,
  unused = 5,
  byte = 6,
};

struct VocabData {
  std::string origin;               // for messages: the file
  std::vector<std::string> tokens;  // pieces as stored (with ▁, or byte-to-unicode form)
  std::vector<float> scores;        // SentencePiece scores (may be empty when merges are given)
  std::vector<TokenKind> kinds;     // empty: all normal
  std::vector<std::string> merges;  // "left right", best first
  int32_t bos = -1, eos = -1, unk = -1;
  bool add_bos = true;
  bool add_space_prefix = true;  // SentencePiece: prefix "▁"
  bool llama3_split = false;     // byte-level: Llama 3 split regex instead of GPT-2's
};

// Throw UsageError naming the origin on inconsistent vocabularies.
std::unique_ptr<Tokenizer> make_spm_tokenizer(VocabData v);
std::unique_ptr<Tokenizer> make_bpe_tokenizer(VocabData v);

// From GGUF metadata (tokenizer.ggml.*); nullptr when the file has no tokenizer.
std::unique_ptr<Tokenizer> tokenizer_from_gguf(const gguf::File& f);
// From a parsed tokenizer.json; `config` is tokenizer_config.json when present (may be null).
std::unique_ptr<Tokenizer> tokenizer_from_json(const nlohmann::json& tok,
                                               const nlohmann::json* config,
                                               const std::string& origin);

namespace tok_detail {
// UTF-8 helpers shared by both tokenizers.
// Length of the UTF-8 sequence starting at s[i] (1 for invalid bytes), never past the end.
size_t utf8_len(const std::string& s, size_t i);
// Decodes the code point at s[i] (invalid bytes decode to 0xFFFD with length 1).
uint32_t utf8_decode(const std::string& s, size_t i, size_t* len);
void utf8_append(std::string& out, uint32_t cp);

// Base of both tokenizers: special-token splitting and make_prompt.
class VocabTokenizer : public Tokenizer {
 public:
  int64_t vocab_size() const override { return int64_t(tokens_.size()); }
  int32_t bos_id() const override { return bos_; }
  int32_t eos_id() const override { return eos_; }
  std::vector<int32_t> encode(const std::string& text, bool add_bos) const override;
  std::string make_prompt(int64_t n_tokens, uint64_t seed) const override;

 protected:
  void init_common(const VocabData& v);
  // Encodes text without special tokens; at_start: the fragment begins the text.
  virtual void encode_fragment(const std::string& text, bool at_start,
                               std::vector<int32_t>& out) const = 0;
  // Words for make_prompt: texts that encode to one token after a space, e.g. " the".
  virtual std::vector<std::string> prompt_words() const = 0;

  std::string origin_;
  std::vector<std::string> tokens_;
  std::vector<TokenKind> kinds_;
  int32_t bos_ = -1, eos_ = -1, unk_ = -1;
  bool add_bos_ = true;
  std::vector<std::pair<std::string, int32_t>> specials_;  // matched in text, longest first
};
}  // namespace tok_detail

}  // namespace latprof
