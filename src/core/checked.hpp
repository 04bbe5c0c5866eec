#pragma once
// Overflow-checked size arithmetic. Sizes that come from the user (token counts, batch) or from a
// file (shapes, lengths) are combined here, never with a bare + or *, so a huge value is refused
// with a message instead of wrapping into a small or negative number.
#include <cstdint>
#include <string>
#include <thread>

#include "core/error.hpp"

namespace latprof {

// a + b, or UsageError "<what> is too large (overflow)".
inline int64_t checked_add(int64_t a, int64_t b, const std::string& what) {
  int64_t r = 0;
  if (__builtin_add_overflow(a, b, &r)) usage_error(what + " is too large (integer overflow)");
  return r;
}

// a * b, or UsageError "<what> is too large (overflow)".
inline int64_t checked_mul(int64_t a, int64_t b, const std::string& what) {
  int64_t r = 0;
  if (__builtin_mul_overflow(a, b, &r)) usage_error(what + " is too large (integer overflow)");
  return r;
}

// The most tokens per sequence (prompt or generated) any command accepts: 2^20. Far above the
// context of the models latprof runs; it bounds per-step loops and prompt building before any
// model-specific check.
inline constexpr int64_t kMaxTokens = int64_t(1) << 20;

// Thread counts: 0 means "all cores"; at most the machine's online cores. More threads than cores
// measure nothing useful and make OpenMP's spinning barriers crawl (1024 threads on 2 cores take
// minutes for a tiny run); absurd counts abort the OpenMP runtime.
inline int max_threads() {
  const unsigned cores = std::thread::hardware_concurrency();
  return cores > 0 ? int(cores) : 1024;
}

// UsageError unless 0 <= threads <= max_threads().
inline void check_threads(int64_t threads, const char* flag) {
  if (threads < 0 || threads > max_threads())
    usage_error(std::string(flag) + " must be between 0 (all cores) and " +
                std::to_string(max_threads()) + ", this machine's cores (got " +
                std::to_string(threads) + ")");
}

}  // namespace latprof
