#pragma once
// Physics checks of a run report: a measured time below its roofline floor, an MFU or MBU above
// 100%, or tokens/s inconsistent with step times is a likely timing error, not a result.
#include "report/report.hpp"

namespace latprof {
// Appends Check entries to r.checks (and may mark rows); never throws on a well-formed report.
void add_physics_checks(RunReport& r);
}  // namespace latprof
