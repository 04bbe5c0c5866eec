#pragma once
// Streaming detokenization, as streaming servers do it. A token's text may be part of a UTF-8
// character (SentencePiece byte-fallback tokens <0xE4>, byte-level BPE pieces that end inside a
// character): push() returns only text that is complete so far and holds back an incomplete tail
// until a later token completes it; finish() turns what can never be completed into U+FFFD. Bytes
// that cannot be part of any character become U+FFFD at once. The concatenation of everything
// returned is valid UTF-8, and equals the tokens' bytes when those are valid UTF-8.
#include <cstdint>
#include <string>

#include "model/tokenizer.hpp"

namespace latprof {

class StreamingDetokenizer {
 public:
  explicit StreamingDetokenizer(const Tokenizer& tok) : tok_(tok) {}
  // Appends token id's bytes; returns the text completed by them (may be empty).
  std::string push(int32_t id);
  // The end of the stream: the held-back tail, each maximal part as U+FFFD. Resets the stream.
  std::string finish();
  // Bytes held back, waiting for the rest of a character (0..3).
  size_t pending_bytes() const { return pending_.size(); }

 private:
  const Tokenizer& tok_;
  std::string pending_;  // an incomplete UTF-8 sequence, at most 3 bytes
};

}  // namespace latprof
