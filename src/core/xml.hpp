#pragma once
// Escaping text for XML and HTML (SVG plots, the HTML report).
#include <string>

namespace latprof {
// &, <, >, " and ' escaped; control characters that XML 1.0 forbids dropped.
inline std::string xml_escape(const std::string& s) {
  std::string o;
  o.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&':
        o += "&amp;";
        break;
      case '<':
        o += "&lt;";
        break;
      case '>':
        o += "&gt;";
        break;
      case '"':
        o += "&quot;";
        break;
      case '\'':
        o += "&#39;";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20 && c != '\n' && c != '\t' && c != '\r') break;
        o += c;
    }
  }
  return o;
}
}  // namespace latprof
