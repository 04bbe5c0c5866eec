#include "core/utf8.hpp"

namespace latprof {

Utf8Step utf8_step(std::string_view s, size_t i) {
  const auto c = static_cast<unsigned char>(s[i]);
  if (c < 0x80) return {Utf8Step::complete, 1};
  size_t n;
  unsigned char lo = 0x80, hi = 0xbf;  // range of the second byte; later bytes are 80..BF
  if (c >= 0xc2 && c <= 0xdf) {
    n = 2;
  } else if (c >= 0xe0 && c <= 0xef) {
    n = 3;
    if (c == 0xe0) lo = 0xa0;  // no overlong forms
    if (c == 0xed) hi = 0x9f;  // no surrogates
  } else if (c >= 0xf0 && c <= 0xf4) {
    n = 4;
    if (c == 0xf0) lo = 0x90;  // no overlong forms
    if (c == 0xf4) hi = 0x8f;  // nothing above U+10FFFF
  } else {
    return {Utf8Step::invalid, 1};  // 80..C1, F5..FF never start a sequence
  }
  for (size_t k = 1; k < n; ++k) {
    if (i + k >= s.size()) return {Utf8Step::incomplete, k};
    const auto d = static_cast<unsigned char>(s[i + k]);
    if (d < lo || d > hi) return {Utf8Step::invalid, k};
    lo = 0x80;
    hi = 0xbf;
  }
  return {Utf8Step::complete, n};
}

bool utf8_valid(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const Utf8Step st = utf8_step(s, i);
    if (st.kind != Utf8Step::complete) return false;
    i += st.len;
  }
  return true;
}

std::string utf8_sanitize(std::string_view s) {
  if (utf8_valid(s)) return std::string(s);
  std::string out;
  out.reserve(s.size() + 8);
  for (size_t i = 0; i < s.size();) {
    const Utf8Step st = utf8_step(s, i);
    if (st.kind == Utf8Step::complete)
      out.append(s.substr(i, st.len));
    else
      out += kReplacementChar;
    i += st.len;
  }
  return out;
}

}  // namespace latprof
