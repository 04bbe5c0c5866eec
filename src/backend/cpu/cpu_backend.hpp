#pragma once
#include <memory>

#include "backend/backend.hpp"

namespace latprof {
std::unique_ptr<Backend> make_cpu_backend(const BackendOptions& opt);
}  // namespace latprof
