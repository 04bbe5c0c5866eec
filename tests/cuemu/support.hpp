#pragma once
// Support for the emulated CUDA kernel tests (tests/cuemu): device buffers through the emulated
// runtime, fp16 uploads and downloads, poisoned outputs, and running a case under several thread
// schedules with the emulation's faults turned into test failures. Random inputs and tolerances
// are those of tests/gpu, from one place: tests/support/tolerance.hpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "cuemu.hpp"
#include "tests/support/tolerance.hpp"

namespace latprof::cuemutest {

// The shared host helpers (to_half, round_f16, random_vector, rms, all_close, normalized_error).
using namespace ::latprof::test;

// A device buffer (cudaMalloc of the emulation: guard zones around it, never-reused addresses).
class DevBuf {
 public:
  explicit DevBuf(size_t bytes);
  ~DevBuf();
  DevBuf(const DevBuf&) = delete;
  DevBuf& operator=(const DevBuf&) = delete;
  void* get() const { return p_; }
  template <class T>
  T* as() const {
    return static_cast<T*>(p_);
  }
  size_t bytes() const { return bytes_; }
  void upload(const void* src) const;
  void download(void* dst) const;

 private:
  void* p_ = nullptr;
  size_t bytes_ = 0;
};

// fp32 host values -> fp16 device buffer (round to nearest even) and back.
std::unique_ptr<DevBuf> upload_act(const std::vector<float>& host);
std::vector<float> download_act(const DevBuf& b, int64_t n);
template <class T>
std::unique_ptr<DevBuf> upload(const std::vector<T>& host) {
  auto b = std::make_unique<DevBuf>(std::max<size_t>(host.size() * sizeof(T), 1));
  if (!host.empty()) b->upload(host.data());
  return b;
}
template <class T>
std::vector<T> download(const DevBuf& b, size_t n) {
  std::vector<T> v(n);
  if (n) b.download(v.data());
  return v;
}
// fp16 NaN 0x7e7e everywhere, as tests/gpu does: an unwritten output fails.
void poison(DevBuf& b);

// The schedules every case runs under: ascending, descending, and one shuffled order.
std::vector<uint64_t> schedules(uint64_t seed);
std::string schedule_name(uint64_t s);

// Runs `body` once per schedule (SCOPED_TRACE names it); after each run the emulation's faults
// (races, out-of-bounds, divergent barriers) fail the test.
void under_schedules(uint64_t seed, const std::function<void()>& body);
// Fails the test with every fault the emulation found since the last call.
void expect_no_faults();

}  // namespace latprof::cuemutest
