#pragma once
// The roofline chart as a self-contained SVG (log-log, Nsight Compute style).
#include <string>

#include "report/report.hpp"

namespace latprof {
// Roofs from r.ceilings (and datasheet roofs when `datasheet` is given), one labelled point per
// op for prefill and decode. Returns the SVG document text.
std::string roofline_svg(const RunReport& r, const Ceilings* datasheet = nullptr);
}  // namespace latprof
