// The two functions of src/backend/cuda/check.hpp that LP_CHECK needs, for the emulated kernels
// (the real ones, in src/backend/cuda/check.cpp, need cuBLASLt and CUPTI).
#include "backend/cuda/check.hpp"

namespace latprof::cuda {

std::string error_text(cudaError_t e) {
  return std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e);
}

void throw_error(const std::string& text, int code, const char* call, const char* file, int line) {
  throw CudaError(
      std::string(call) + " failed at " + file + ":" + std::to_string(line) + ": " + text, code);
}

}  // namespace latprof::cuda
