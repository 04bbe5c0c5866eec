#pragma once
// Support for the GPU tests: loads liblatprof_cuda.so the way latprof does (dlopen + the C ABI of
// src/backend/cuda_module.hpp) and hands out a CUDA backend, or the reason there is none so the
// test can GTEST_SKIP() with "no CUDA device: <reason>". Also device-buffer helpers: uploads of
// fp32 host data as fp16 activations, downloads, and poisoned output buffers. Random inputs and
// tolerances are those of the emulated tests too, from one place: tests/support/tolerance.hpp.
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "tests/support/tolerance.hpp"

namespace latprof::gputest {

// The shared host helpers (to_half, round_f16, random_vector, rms, all_close, normalized_error).
using namespace ::latprof::test;

// The module's entry points; nullptr members when it cannot be loaded (error says why).
struct Module {
  void* handle = nullptr;
  const char* (*abi_id)() = nullptr;
  int (*device_count)(char*, int) = nullptr;
  Backend* (*create)(const BackendOptions*, char*, int) = nullptr;
  std::string error;
};
const Module& module();

// The shared CUDA backend of this test process, or nullptr with *why set.
Backend* cuda_backend(std::string* why);

// Skips the current test when there is no usable CUDA device.
#define LATPROF_REQUIRE_GPU(b)                                            \
  std::string why_no_gpu_;                                                \
  ::latprof::Backend* b = ::latprof::gputest::cuda_backend(&why_no_gpu_); \
  if (!b) GTEST_SKIP() << "no CUDA device: " << why_no_gpu_

// Device buffer owned by the test, released through the backend.
class DevBuf {
 public:
  DevBuf(Backend* b, size_t bytes, const char* what = "test buffer");
  ~DevBuf();
  DevBuf(const DevBuf&) = delete;
  DevBuf& operator=(const DevBuf&) = delete;
  void* get() const { return p_; }
  template <class T>
  T* as() const {
    return static_cast<T*>(p_);
  }
  size_t bytes() const { return bytes_; }

 private:
  Backend* b_;
  void* p_ = nullptr;
  size_t bytes_ = 0;
};

// fp32 host values -> fp16 device activations (rounded to nearest even), and back.
std::unique_ptr<DevBuf> upload_act(Backend* b, const std::vector<float>& host);
std::vector<float> download_act(Backend* b, const void* dev, int64_t n);
// Fills a device buffer with a poison pattern (fp16 NaN 0x7e7e) so unwritten outputs show up.
void poison(Backend* b, DevBuf& buf);

}  // namespace latprof::gputest
