#include "model/detokenizer.hpp"

#include "core/utf8.hpp"

namespace latprof {

std::string StreamingDetokenizer::push(int32_t id) {
  pending_ += tok_.decode_token(id);
  std::string out;
  size_t i = 0;
  while (i < pending_.size()) {
    const Utf8Step st = utf8_step(pending_, i);
    if (st.kind == Utf8Step::incomplete) break;  // keep the tail for the next token
    if (st.kind == Utf8Step::complete)
      out.append(pending_, i, st.len);
    else
      out += kReplacementChar;
    i += st.len;
  }
  pending_.erase(0, i);
  return out;
}

std::string StreamingDetokenizer::finish() {
  std::string out = utf8_sanitize(pending_);
  pending_.clear();
  return out;
}

}  // namespace latprof
