#pragma once
// A progress bar on stderr, drawn only when stderr is a terminal and not silenced.
#include <chrono>
#include <cstdint>
#include <string>

namespace latprof {

class Progress {
 public:
  // total: units of work; label: what is being done.
  Progress(std::string label, int64_t total, bool enabled);
  ~Progress();
  void advance(int64_t units = 1);
  void set(int64_t done);
  void finish();
  static bool terminal();  // stderr is a tty

 private:
  void draw(bool force);
  std::string label_;
  int64_t total_, done_ = 0;
  bool enabled_, finished_ = false;
  std::chrono::steady_clock::time_point start_, last_;
};

}  // namespace latprof
