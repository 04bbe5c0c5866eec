#pragma once
// The CUDA backend (see cuda_backend.cpp). Made only through the module's C entry points
// (module.cpp), which latprof reaches with dlopen.
#include <memory>

#include "backend/backend.hpp"

namespace latprof::cuda {
std::unique_ptr<Backend> make_cuda_backend(const BackendOptions& opt);
}  // namespace latprof::cuda
