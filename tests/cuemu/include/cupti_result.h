#pragma once
// Stand-in for cupti_result.h under the CUDA emulation (tests/cuemu/cuemu.hpp): the result type
// that src/backend/cuda/check.hpp names; CUPTI itself is not emulated.
enum CUptiResult {
  CUPTI_SUCCESS = 0,
  CUPTI_ERROR_NOT_INITIALIZED = 15,
  CUPTI_ERROR_UNKNOWN = 999,
};
inline CUptiResult cuptiGetResultString(CUptiResult r, const char** s) {
  *s = r == CUPTI_SUCCESS ? "CUPTI_SUCCESS" : "CUPTI_ERROR (not available under the CPU emulation)";
  return CUPTI_SUCCESS;
}
inline CUptiResult cuptiGetErrorMessage(CUptiResult, const char** s) {
  *s = "";
  return CUPTI_SUCCESS;
}
