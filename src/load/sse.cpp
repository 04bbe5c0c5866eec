#include "load/sse.hpp"

#include <cstring>

namespace latprof::load {

void SseParser::line_done(std::vector<std::string>& events) {
  if (line_.empty()) {  // a blank line dispatches the event
    if (has_data_) events.push_back(std::move(data_));
    data_.clear();
    has_data_ = false;
    return;
  }
  if (line_[0] == ':') {  // comment
    line_.clear();
    return;
  }
  const size_t colon = line_.find(':');
  const std::string_view field(line_.data(), colon == std::string::npos ? line_.size() : colon);
  if (field == "data") {
    std::string_view value;
    if (colon != std::string::npos) {
      value = std::string_view(line_).substr(colon + 1);
      if (!value.empty() && value[0] == ' ') value.remove_prefix(1);
    }
    if (has_data_) data_ += '\n';
    data_.append(value);
    has_data_ = true;
  }
  line_.clear();
}

void SseParser::feed(const char* p, size_t n, std::vector<std::string>& events) {
  const char* end = p + n;
  while (p < end) {
    if (last_cr_ && *p == '\n') {  // the '\n' of a "\r\n"
      last_cr_ = false;
      ++p;
      continue;
    }
    last_cr_ = false;
    // copy up to the next line end in one go
    const char* q = p;
    while (q < end && *q != '\n' && *q != '\r') ++q;
    if (line_.size() + size_t(q - p) > kMaxLine) {
      overflowed_ = true;
      line_.clear();
      return;
    }
    line_.append(p, size_t(q - p));
    if (q == end) return;
    last_cr_ = *q == '\r';
    line_done(events);
    p = q + 1;
  }
}

}  // namespace latprof::load
