#pragma once
#include <memory>

#include "backend/backend.hpp"

namespace latprof {
std::unique_ptr<Backend> make_cpu_backend(const BackendOptions& opt);
// Memory the OS can give this process now (MemAvailable), and the total.
double host_memory_available_bytes();
double host_memory_total_bytes();
std::string host_cpu_name();
}  // namespace latprof
