#pragma once
// The one checking helper for CUDA runtime, cuBLAS/cuBLASLt and CUPTI calls: LP_CHECK(call)
// throws latprof::cuda::CudaError naming the call, file, line and the library's own message.
// Kernel launches are checked with LP_CHECK_LAUNCH() right after the launch. The CUDA runtime's
// part (CudaError, LP_CHECK, LP_CHECK_LAUNCH) lives with the kernels, in kernels/cuda/check.hpp;
// this header adds the libraries only the backend uses.
#include <cublasLt.h>
#include <cupti_result.h>

#include <string>

#include "kernels/cuda/check.hpp"

namespace latprof::cuda {

std::string error_text(cublasStatus_t s);
std::string error_text(CUptiResult r);

inline void check(cublasStatus_t s, const char* call, const char* file, int line) {
  if (s != CUBLAS_STATUS_SUCCESS) throw_error(error_text(s), int(s), call, file, line);
}
inline void check(CUptiResult r, const char* call, const char* file, int line) {
  if (r != CUPTI_SUCCESS) throw_error(error_text(r), int(r), call, file, line);
}

}  // namespace latprof::cuda
