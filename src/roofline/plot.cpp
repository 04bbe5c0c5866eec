// Placeholder: the roofline plot lands with the roofline analyzer.
#include "roofline/plot.hpp"

namespace latprof {
std::string roofline_svg(const RunReport&, const Ceilings*) {
  return "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"10\" height=\"10\"></svg>";
}
}  // namespace latprof
