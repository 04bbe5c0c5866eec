#pragma once
// Human formatting of quantities with units.
#include <string>

namespace latprof {
std::string fmt_bytes(double bytes);                   // "13.48 GB" (decimal units)
std::string fmt_rate(double per_s, const char* unit);  // "1.23 TFLOP/s" from 1.23e12, "FLOP/s"
std::string fmt_count(double n);                       // "6.74 B"
std::string fmt_ms(double ms);                         // "12.3 ms", "1.23 s"
std::string fmt_pct(double fraction);                  // "12.3%"
std::string fmt_fixed(double v, int decimals);
}  // namespace latprof

namespace latprof {
// "8GiB", "512MiB", "1.5GB", "4096" (bytes); binary (KiB, MiB, GiB, TiB) and decimal (KB, MB, GB,
// TB) units, B optional. Throws UsageError naming `flag` for anything else, zero, or over 2^62.
double parse_bytes(const std::string& text, const std::string& flag);
}  // namespace latprof
