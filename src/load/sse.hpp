#pragma once
// Server-sent events, parsed as the bytes arrive: each complete event's `data` (its data: lines
// joined by "\n") is handed out at once, so a chunk's time is the time its last byte was read.
// Lines end in "\n", "\r\n" or "\r"; comments (":...") and fields other than data are skipped.
#include <cstddef>
#include <string>
#include <vector>

namespace latprof::load {

class SseParser {
 public:
  // Feeds bytes; appends the data of each event completed by them to `events`.
  void feed(const char* data, size_t n, std::vector<std::string>& events);
  // Bytes of an event begun but not completed (a stream cut mid-event), for error reports.
  bool pending() const { return !line_.empty() || has_data_; }
  // A line longer than this (16 MiB) marks the stream malformed rather than growing forever.
  static constexpr size_t kMaxLine = size_t(16) << 20;
  bool overflowed() const { return overflowed_; }

 private:
  void line_done(std::vector<std::string>& events);
  std::string line_, data_;
  bool has_data_ = false;
  bool last_cr_ = false;  // the previous byte was '\r' (a following '\n' ends nothing new)
  bool overflowed_ = false;
};

}  // namespace latprof::load
