#pragma once
// Stand-in for CUDA's cuda_runtime.h under the CUDA emulation (tests/cuemu/cuemu.hpp).
#include "../cuemu.hpp"
#include "cuda_fp16.h"
