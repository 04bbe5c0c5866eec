#pragma once
// The one checking helper for CUDA runtime, cuBLAS/cuBLASLt and CUPTI calls: LP_CHECK(call)
// throws latprof::cuda::CudaError naming the call, file, line and the library's own message.
// Kernel launches are checked with LP_CHECK(cudaGetLastError()) right after the launch.
#include <cublasLt.h>
#include <cuda_runtime_api.h>
#include <cupti_result.h>

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

std::string error_text(cudaError_t e);
std::string error_text(cublasStatus_t s);
std::string error_text(CUptiResult r);

inline bool failed(cudaError_t e) {
  return e != cudaSuccess;
}
inline bool failed(cublasStatus_t s) {
  return s != CUBLAS_STATUS_SUCCESS;
}
inline bool failed(CUptiResult r) {
  return r != CUPTI_SUCCESS;
}

[[noreturn]] void throw_error(const std::string& text, int code, const char* call, const char* file,
                              int line);

template <class Status>
inline void check(Status s, const char* call, const char* file, int line) {
  if (failed(s)) throw_error(error_text(s), int(s), call, file, line);
}

}  // namespace latprof::cuda

#define LP_CHECK(call) ::latprof::cuda::check((call), #call, __FILE__, __LINE__)
