// libFuzzer target: the run-report / prediction reader (compare, plot, roofline --from) and the
// roofline chart drawn from what it accepted (plot). Any input must either be read and drawn, in
// bounded time, or raise UsageError.
// Built by scripts/fuzz.sh.
#include "core/error.hpp"
#include "fuzz_json_common.hpp"
#include "report/plot.hpp"
#include "report/report.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace latprof;
  const auto j = fuzz::parse(data, size);
  if (!j) return 0;
  try {
    const RunReport r = report_from_json(*j, "<fuzz>");
    const std::string svg = roofline_svg(r, &r.ceilings);
    if (svg.empty()) __builtin_trap();
    (void)report_to_json(r).dump();
  } catch (const UsageError&) {
  }
  return 0;
}
