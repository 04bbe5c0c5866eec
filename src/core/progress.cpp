#include "core/progress.hpp"

#include <unistd.h>

#include <cstdio>

namespace latprof {

Progress::Progress(std::string label, int64_t total, bool enabled)
    : label_(std::move(label)), total_(total > 0 ? total : 1), enabled_(enabled && terminal()) {
  start_ = last_ = std::chrono::steady_clock::now();
  draw(true);
}

Progress::~Progress() {
  finish();
}

bool Progress::terminal() {
  return isatty(STDERR_FILENO) == 1;
}

void Progress::advance(int64_t units) {
  set(done_ + units);
}

void Progress::set(int64_t done) {
  done_ = done > total_ ? total_ : done;
  draw(false);
}

void Progress::finish() {
  if (finished_) return;
  finished_ = true;
  if (!enabled_) return;
  done_ = total_;
  draw(true);
  std::fputc('\n', stderr);
}

void Progress::draw(bool force) {
  if (!enabled_) return;
  const auto now = std::chrono::steady_clock::now();
  if (!force && now - last_ < std::chrono::milliseconds(100) && done_ < total_) return;
  last_ = now;
  const double frac = double(done_) / double(total_);
  const double secs = std::chrono::duration<double>(now - start_).count();
  constexpr int kWidth = 30;
  const int fill = int(frac * kWidth);
  char bar[kWidth + 1];
  for (int i = 0; i < kWidth; ++i) bar[i] = i < fill ? '#' : '.';
  bar[kWidth] = 0;
  std::fprintf(stderr, "\r%-18s [%s] %5.1f%%  %6.1f s", label_.c_str(), bar, frac * 100, secs);
  std::fflush(stderr);
}

}  // namespace latprof
