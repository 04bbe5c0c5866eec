#include "core/format.hpp"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <utility>

#include "core/error.hpp"

namespace latprof {

namespace {
std::string scaled(double v, const char* unit, const char* const* prefixes, int n, double base) {
  int i = 0;
  double a = std::fabs(v);
  while (i + 1 < n && a >= base) {
    a /= base;
    v /= base;
    ++i;
  }
  char buf[64];
  std::snprintf(buf, sizeof buf,
                a >= 100  ? "%.0f %s%s"
                : a >= 10 ? "%.1f %s%s"
                          : "%.2f %s%s",
                v, prefixes[i], unit);
  return buf;
}
const char* const kSi[] = {"", "K", "M", "G", "T", "P", "E"};
}  // namespace

std::string fmt_bytes(double bytes) {
  return scaled(bytes, "B", kSi, 7, 1000.0);
}
std::string fmt_rate(double per_s, const char* unit) {
  return scaled(per_s, unit, kSi, 7, 1000.0);
}
std::string fmt_count(double n) {
  const char* const p[] = {"", "K", "M", "B", "T"};
  std::string s = scaled(n, "", p, 5, 1000.0);
  while (!s.empty() && s.back() == ' ') s.pop_back();
  return s;
}
std::string fmt_ms(double ms) {
  char buf[64];
  if (!std::isfinite(ms)) return "n/a";
  if (ms >= 10000)
    std::snprintf(buf, sizeof buf, "%.2f s", ms / 1000);
  else if (ms >= 100)
    std::snprintf(buf, sizeof buf, "%.0f ms", ms);
  else if (ms >= 1)
    std::snprintf(buf, sizeof buf, "%.2f ms", ms);
  else
    std::snprintf(buf, sizeof buf, "%.1f us", ms * 1000);
  return buf;
}
std::string fmt_pct(double f) {
  char buf[32];
  if (!std::isfinite(f)) return "n/a";
  std::snprintf(buf, sizeof buf, std::fabs(f) < 0.001 ? "%.3f%%" : "%.1f%%", f * 100);
  return buf;
}
std::string fmt_fixed(double v, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

}  // namespace latprof

namespace latprof {
double parse_bytes(const std::string& text, const std::string& flag) {
  const std::string hint = "; use bytes with a unit, e.g. 8GiB, 512MiB or 2GB";
  size_t i = 0;
  while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.'))
    ++i;
  const std::string num = text.substr(0, i), unit = text.substr(i);
  char* end = nullptr;
  const double v = num.empty() ? -1 : std::strtod(num.c_str(), &end);
  if (num.empty() || end != num.c_str() + num.size())
    usage_error(flag + " '" + text + "' is not an amount of memory" + hint);
  static const std::pair<const char*, double> units[] = {
      {"", 1},         {"B", 1},    {"KiB", 0x1p10}, {"MiB", 0x1p20}, {"GiB", 0x1p30},
      {"TiB", 0x1p40}, {"KB", 1e3}, {"MB", 1e6},     {"GB", 1e9},     {"TB", 1e12},
      {"K", 1e3},      {"M", 1e6},  {"G", 1e9},      {"T", 1e12}};
  for (const auto& [name, scale] : units)
    if (unit == name) {
      const double bytes = v * scale;
      if (!(bytes >= 1) || bytes > 0x1p62)
        usage_error(flag + " '" + text + "' must be between 1 byte and 4 EiB" + hint);
      return bytes;
    }
  usage_error(flag + " '" + text + "': unknown unit '" + unit + "'" + hint);
}
}  // namespace latprof
