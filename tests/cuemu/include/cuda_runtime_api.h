#pragma once
// Stand-in for CUDA's cuda_runtime_api.h under the CUDA emulation (tests/cuemu/cuemu.hpp).
#include "../cuemu.hpp"
