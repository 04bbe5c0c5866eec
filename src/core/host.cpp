#include "core/host.hpp"

#include <fstream>

namespace latprof {

namespace {
double meminfo_bytes(const char* key) {
  std::ifstream in("/proc/meminfo");
  std::string k;
  double kb = 0;
  std::string unit;
  while (in >> k >> kb >> unit)
    if (k == key) return kb * 1024.0;
  return 0;
}
}  // namespace

double host_memory_available_bytes() {
  return meminfo_bytes("MemAvailable:");
}
double host_memory_total_bytes() {
  return meminfo_bytes("MemTotal:");
}

std::string host_cpu_name() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      auto pos = line.find(':');
      if (pos != std::string::npos) return line.substr(pos + 2);
    }
  }
  return "unknown CPU";
}

}  // namespace latprof
