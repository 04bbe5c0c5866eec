#pragma once
// The kernels' part of latprof's one checking helper: LP_CHECK(call) on a CUDA runtime call throws
// latprof::cuda::CudaError naming the call, file, line and the runtime's own message, and
// LP_CHECK_LAUNCH() checks the launch just issued (configuration errors surface there, not at the
// next sync). The CUDA backend's src/backend/cuda/check.hpp adds the cuBLAS/cuBLASLt and CUPTI
// overloads of check(); this header needs nothing above kernels/cuda.
#include <cuda_runtime_api.h>

#include <stdexcept>
#include <string>

namespace latprof::cuda {

class CudaError : public std::runtime_error {
 public:
  CudaError(const std::string& what, int code) : std::runtime_error(what), code_(code) {}
  int code() const { return code_; }

 private:
  int code_;
};

// "<call> failed at <file>:<line>: <text>"
[[noreturn]] inline void throw_error(const std::string& text, int code, const char* call,
                                     const char* file, int line) {
  throw CudaError(
      std::string(call) + " failed at " + file + ":" + std::to_string(line) + ": " + text, code);
}

// The runtime's name for the status and its description.
inline std::string error_text(cudaError_t e) {
  return std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e);
}

inline void check(cudaError_t e, const char* call, const char* file, int line) {
  if (e != cudaSuccess) throw_error(error_text(e), int(e), call, file, line);
}

}  // namespace latprof::cuda

#define LP_CHECK(call) ::latprof::cuda::check((call), #call, __FILE__, __LINE__)
#define LP_CHECK_LAUNCH() LP_CHECK(cudaGetLastError())
