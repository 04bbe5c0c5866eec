#pragma once
// The human-readable run report: stage table, operation table, metrics and verdict lines.
#include <string>

#include "report/report.hpp"

namespace latprof {
std::string format_run_table(const RunReport& r);
// Two or three plain sentences: which stage dominates, what bounds it, how close to its roof.
std::vector<std::string> verdict_lines(const RunReport& r);
}  // namespace latprof
