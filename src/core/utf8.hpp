#pragma once
// UTF-8 checks shared by everything that puts outside text (prompts, file names, model metadata,
// generated text) into the JSON documents latprof writes: JSON must be valid UTF-8.
#include <cstddef>
#include <string>
#include <string_view>

namespace latprof {

// One step of a UTF-8 decoder (Unicode 15, table 3-7: no overlong forms, no surrogates, nothing
// above U+10FFFF).
struct Utf8Step {
  enum Kind { complete, incomplete, invalid };
  Kind kind;
  // complete: the sequence's length; incomplete: the bytes present (a valid prefix cut short by
  // the end of the text); invalid: the length of the maximal valid prefix to replace (>= 1).
  size_t len;
};
Utf8Step utf8_step(std::string_view s, size_t i);

bool utf8_valid(std::string_view s);

// s with each ill-formed or truncated sequence replaced by U+FFFD, one per maximal subpart (as
// Python's errors="replace" and WHATWG decoders do). Valid text is returned unchanged.
std::string utf8_sanitize(std::string_view s);

inline constexpr const char* kReplacementChar = "\xef\xbf\xbd";  // U+FFFD

}  // namespace latprof
