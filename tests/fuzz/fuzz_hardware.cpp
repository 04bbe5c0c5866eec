// libFuzzer target: the hardware-file reader (--hw-file) and the ceilings it yields. Any input
// must either give figures in the documented range or raise UsageError.
// Built by scripts/fuzz.sh.
#include <cmath>
#include <cstdlib>

#include "core/error.hpp"
#include "fuzz_json_common.hpp"
#include "roofline/hardware.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace latprof;
  const auto j = fuzz::parse(data, size);
  if (!j) return 0;
  try {
    const HardwareSpec h = hardware_from_json(*j, "<fuzz>");
    (void)hardware_to_json(h).dump();
    if (h.measure) return 0;
    const Ceilings c = to_ceilings(h);
    for (double v : {c.mem_bw_bytes_per_s, c.matmul_flops_per_s, c.vector_flops_per_s,
                     c.memory_bytes, c.cache_bytes})
      if (!(v >= kMinHardwareFigure && v <= kMaxHardwareFigure)) std::abort();
  } catch (const UsageError&) {
  }
  return 0;
}
