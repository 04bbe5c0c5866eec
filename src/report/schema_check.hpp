#pragma once
// A small JSON Schema validator for the subset that reports/schema/*.schema.json use:
// type, required, properties, additionalProperties, items, enum, const, minimum,
// exclusiveMinimum, maximum, minItems, minLength, pattern (ECMAScript regex) and local $ref
// ("#/$defs/name"). Annotations ($schema, $id, $comment, title, description, x-*) are ignored.
// A schema that uses any other keyword is rejected (std::invalid_argument), so the validator never
// silently passes a rule it does not check. Debian ships no C++ JSON Schema validator.
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace latprof {

// The violations of `doc` against `schema`, each "<JSON pointer>: <what is wrong>"; empty when
// the document is valid. Stops after `max_errors`.
std::vector<std::string> schema_violations(const nlohmann::json& doc, const nlohmann::json& schema,
                                           size_t max_errors = 20);

// reports/schema/run-report.schema.json: from $LATPROF_SCHEMA_DIR when set, else from the source
// tree latprof was built from. Throws UsageError naming the path when it cannot be read.
std::string run_report_schema_path();
nlohmann::json load_run_report_schema();

}  // namespace latprof
