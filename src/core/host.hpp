#pragma once
// Facts about the host machine, read from /proc: for the CPU backend, the run report's machine
// section and the ceilings probe.
#include <string>

namespace latprof {
// Memory the OS can give this process now (MemAvailable), and the total; 0 when unknown.
double host_memory_available_bytes();
double host_memory_total_bytes();
std::string host_cpu_name();  // /proc/cpuinfo "model name", "unknown CPU" when absent
}  // namespace latprof
