#pragma once
// The run report's JSON Schema and README field table, generated from the one description of
// its fields (report_fields.hpp). reports/schema/run-report.schema.json is
// run_report_schema().dump(2) + "\n" (`latprof schema`); README.md's "JSON report" table is
// run_report_markdown() (`latprof schema --markdown`). The tests check both files are current.
#include <nlohmann/json.hpp>
#include <string>

namespace latprof {

nlohmann::json run_report_schema();
std::string run_report_schema_text();  // run_report_schema().dump(2) + "\n"
std::string run_report_markdown();

}  // namespace latprof
