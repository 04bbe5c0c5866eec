#pragma once
// Value checks of a report or prediction read back from JSON (compare, plot, roofline --from):
// a field of the wrong type or a negative size, time or rate is a UsageError naming the file,
// the field and the value, instead of being read as 0 or wrapping.
#include <nlohmann/json_fwd.hpp>
#include <string>

namespace latprof {

// Throws UsageError "<origin>: <field> is <value>; <what it must be>" on the first bad field.
// Absent fields and nulls pass (report_from_json gives them their defaults).
void check_report_values(const nlohmann::json& j, const std::string& origin);

}  // namespace latprof
