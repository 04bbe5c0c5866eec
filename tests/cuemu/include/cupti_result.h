#pragma once
// Stand-in for cupti_result.h under the CUDA emulation (tests/cuemu/cuemu.hpp): the result type
// that src/backend/cuda/check.hpp names.
enum CUptiResult {
  CUPTI_SUCCESS = 0,
  CUPTI_ERROR_UNKNOWN = 999,
};
