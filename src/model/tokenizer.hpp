#pragma once
// Tokenizers. Built-in (synthetic) models use SyntheticTokenizer; real model files bring their
// own vocabulary (src/model/loaders.hpp).
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace latprof {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  virtual std::string name() const = 0;
  virtual int64_t vocab_size() const = 0;
  virtual std::vector<int32_t> encode(const std::string& text, bool add_bos) const = 0;
  virtual std::string decode(const std::vector<int32_t>& ids) const = 0;
  // Text of one token as it appears when streamed (may be a partial UTF-8 sequence).
  virtual std::string decode_token(int32_t id) const = 0;
  virtual int32_t bos_id() const = 0;  // -1 when none
  virtual int32_t eos_id() const = 0;
  // A text that encodes (with BOS, if the model uses one) to exactly n_tokens tokens.
  virtual std::string make_prompt(int64_t n_tokens, uint64_t seed) const = 0;
};

// The synthetic tokenizer of built-in models: a vocabulary of vocab_size pronounceable
// pseudo-words ("ba", "keto", ...) separated by spaces. Encoding splits on whitespace and looks
// each word up in a hash table (unknown words map to id 0), so the tokenize stage does real
// string work that scales with the prompt; id 1 is BOS.
std::unique_ptr<Tokenizer> make_synthetic_tokenizer(int64_t vocab_size);

}  // namespace latprof
