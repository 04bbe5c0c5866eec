// Messages for LP_CHECK on cuBLAS and CUPTI calls: the library's name for the status and its own
// description (the CUDA runtime's are in kernels/cuda/check.hpp).
#include "backend/cuda/check.hpp"

#include <cupti_result.h>

namespace latprof::cuda {

std::string error_text(cublasStatus_t s) {
  switch (s) {
    case CUBLAS_STATUS_SUCCESS:
      return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED:
      return "CUBLAS_STATUS_NOT_INITIALIZED (no usable device or driver?)";
    case CUBLAS_STATUS_ALLOC_FAILED:
      return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE:
      return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH:
      return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR:
      return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED:
      return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR:
      return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED:
      return "CUBLAS_STATUS_NOT_SUPPORTED";
    case CUBLAS_STATUS_LICENSE_ERROR:
      return "CUBLAS_STATUS_LICENSE_ERROR";
  }
  return "cublasStatus " + std::to_string(int(s));
}

std::string error_text(CUptiResult r) {
  const char* name = nullptr;
  if (cuptiGetResultString(r, &name) != CUPTI_SUCCESS || !name) name = "CUPTI_ERROR_?";
  std::string text = name;
  const char* msg = nullptr;
  if (cuptiGetErrorMessage(r, &msg) == CUPTI_SUCCESS && msg && *msg)
    text += std::string(": ") + msg;
  return text;
}

}  // namespace latprof::cuda
