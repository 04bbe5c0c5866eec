#pragma once
// Value checks of a report or prediction read back from JSON (compare, plot, roofline --from): a
// negative size, time or rate, a non-finite number, a count or token id out of range is a
// UsageError naming the file, the field and the value, instead of being read as is or wrapping.
// Types are the field-table reader's business (report.cpp): this runs after it, so it checks the
// ranges of the fields the table describes, and the types too only of the few it does not read
// (kind, model, a row's bytes and a prediction's expected_ms, compute_ms, memory_ms).
#include <nlohmann/json_fwd.hpp>
#include <string>

namespace latprof {

// Throws UsageError "<origin>: <field> is <value>; <what it must be>" on the first bad field.
// Absent fields and nulls pass (report_from_json gives them their defaults), except nulls in the
// lists of samples. Call it only on JSON the field-table reader has accepted.
void check_report_values(const nlohmann::json& j, const std::string& origin);

}  // namespace latprof
