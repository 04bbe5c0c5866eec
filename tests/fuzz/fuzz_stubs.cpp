// Link stand-ins for the JSON-reader fuzz targets, which are built from a few sources rather
// than the whole library: no embedded model/hardware files, and no machine probe (the readers
// under test never call it; reaching it is a bug the trap reports).
#include "core/embedded.hpp"
#include "runner/host_ceilings.hpp"

namespace latprof {
namespace embedded {
const std::vector<File>& models() {
  static const std::vector<File> none;
  return none;
}
const std::vector<File>& hardware() {
  static const std::vector<File> none;
  return none;
}
}  // namespace embedded
HostCeilings host_ceilings(int, bool, bool) {
  __builtin_trap();
}
}  // namespace latprof
