#pragma once
// Scratch directories of a test process, removed when it exits: every test binary runs each test
// in a process of its own (ctest), so a run of the suite leaves nothing under the temporary
// directory. LATPROF_KEEP_TEST_TMP=1 keeps them (to look at what a failing test wrote).
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <string>
#include <system_error>
#include <vector>

namespace latprof::testing {

class TempDirs {
 public:
  static TempDirs& instance() {
    static TempDirs t;
    return t;
  }
  void add(const std::filesystem::path& p) {
    const std::lock_guard<std::mutex> lock(mu_);
    for (const auto& d : dirs_)
      if (d == p) return;
    dirs_.push_back(p);
  }
  ~TempDirs() {
    // A child forked from the test process (a server under test) exits through here too: only
    // the process that made the directories removes them.
    if (::getpid() != owner_) return;
    const char* keep = std::getenv("LATPROF_KEEP_TEST_TMP");
    if (keep && *keep && std::string(keep) != "0") return;
    for (const auto& d : dirs_) {
      std::error_code ec;
      std::filesystem::remove_all(d, ec);
    }
  }

 private:
  TempDirs() : owner_(::getpid()) {}
  std::mutex mu_;
  std::vector<std::filesystem::path> dirs_;
  pid_t owner_;
};

// <temp>/latprof-test-<leaf>, created (with its parents) if missing and removed when the process
// exits. With fresh, whatever an earlier process of the same id left there is removed first.
inline std::filesystem::path scratch_dir(const std::string& leaf, bool fresh = false) {
  const std::filesystem::path p = std::filesystem::temp_directory_path() / ("latprof-test-" + leaf);
  TempDirs::instance().add(p);
  if (fresh) std::filesystem::remove_all(p);
  std::filesystem::create_directories(p);
  return p;
}

}  // namespace latprof::testing
