#pragma once
// Runs the latprof binary for end-to-end tests.
#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "support/temp_dirs.hpp"

namespace cli_test {

struct Result {
  int code = -1;
  std::string out, err;
};

inline std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// <temp>/latprof-test-<name>-<pid>, removed when the test process exits (support/temp_dirs.hpp).
inline std::filesystem::path temp_dir(const std::string& name) {
  return latprof::testing::scratch_dir(name + "-" + std::to_string(::getpid()));
}

// The binary under test: LATPROF_TEST_BIN when set (e.g. a sanitizer build's latprof), else the
// one this build made.
inline std::string bin() {
  const char* b = std::getenv("LATPROF_TEST_BIN");
  return b && *b ? b : LATPROF_BIN;
}

// args are appended to the binary path as given (shell syntax).
inline Result latprof(const std::string& args) {
  static int n = 0;
  const auto d = temp_dir("cli");
  const std::string o = (d / ("out" + std::to_string(n))).string();
  const std::string e = (d / ("err" + std::to_string(n++))).string();
  const std::string cmd = bin() + " " + args + " >" + o + " 2>" + e;
  const int st = std::system(cmd.c_str());
  Result r;
  r.code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  r.out = slurp(o);
  r.err = slurp(e);
  return r;
}

// Runs latprof in directory `cwd` under `timeout` (exit status 124 when it ran past timeout_s).
inline Result latprof_in(const std::string& cwd, int timeout_s, const std::string& args) {
  static int n = 0;
  const auto d = temp_dir("cli-in");
  const std::string o = (d / ("out" + std::to_string(n))).string();
  const std::string e = (d / ("err" + std::to_string(n++))).string();
  const std::string cmd = "cd '" + cwd + "' && timeout -k 5 " + std::to_string(timeout_s) + " " +
                          bin() + " " + args + " >" + o + " 2>" + e;
  const int st = std::system(cmd.c_str());
  Result r;
  r.code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  r.out = slurp(o);
  r.err = slurp(e);
  return r;
}

}  // namespace cli_test
