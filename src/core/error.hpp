#pragma once
// Errors. UsageError is the user's mistake (bad flag, bad file, too little memory): main prints
// its one-line message and exits with code 2. Anything else is a bug or a system failure: exit 1.
#include <stdexcept>
#include <string>

namespace latprof {

class UsageError : public std::runtime_error {
 public:
  explicit UsageError(const std::string& what) : std::runtime_error(what) {}
};

// A result that does not hold, e.g. a physics check that fails: exit code 1 with a message.
class CheckFailed : public std::runtime_error {
 public:
  explicit CheckFailed(const std::string& what) : std::runtime_error(what) {}
};

[[noreturn]] inline void usage_error(const std::string& what) {
  throw UsageError(what);
}

// Internal invariant; throws std::logic_error naming the file and line.
#define LATPROF_ASSERT(cond, msg)                                                     \
  do {                                                                                \
    if (!(cond))                                                                      \
      throw std::logic_error(std::string(__FILE__) + ":" + std::to_string(__LINE__) + \
                             ": " #cond ": " + (msg));                                \
  } while (0)

}  // namespace latprof
