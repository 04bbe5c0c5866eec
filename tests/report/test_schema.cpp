// The run report's JSON Schema (reports/schema/run-report.schema.json) and latprof's validator:
// the validator's rules, the schema against reports built here, and the schema against Python's
// jsonschema where that is installed.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>

#include "cli/cli_util.hpp"
#include "report/report_fixture.hpp"
#include "report/schema_check.hpp"

namespace {

using namespace latprof;
using nlohmann::json;

json schema() {
  std::ifstream in(std::string(LATPROF_TEST_DIR) + "/../reports/schema/run-report.schema.json");
  EXPECT_TRUE(in.good());
  return json::parse(in);
}

std::string joined(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += x + "\n";
  return s;
}

TEST(SchemaValidator, Types) {
  const json s = {{"type", "object"},
                  {"required", {"a", "b"}},
                  {"properties",
                   {{"a", {{"type", "integer"}, {"minimum", 1}}},
                    {"b", {{"type", json::array({"number", "null"})}}},
                    {"c", {{"enum", {"x", "y"}}}},
                    {"d", {{"type", "array"}, {"items", {{"type", "string"}}}, {"minItems", 1}}},
                    {"e", {{"type", "string"}, {"pattern", "^1\\.[0-9]+$"}}},
                    {"f", {{"exclusiveMinimum", 0}}},
                    {"g", {{"const", "latprof"}}}}}};
  EXPECT_TRUE(schema_violations({{"a", 1}, {"b", nullptr}}, s).empty());
  EXPECT_TRUE(schema_violations({{"a", 2.0},
                                 {"b", 1.5},
                                 {"c", "y"},
                                 {"d", {"s"}},
                                 {"e", "1.12"},
                                 {"f", 0.5},
                                 {"g", "latprof"}},
                                s)
                  .empty());
  auto one = [&](const json& doc, const std::string& want) {
    const auto v = schema_violations(doc, s);
    ASSERT_EQ(v.size(), 1u) << joined(v);
    EXPECT_NE(v[0].find(want), std::string::npos) << v[0];
  };
  one({{"b", 1}}, "missing required field 'a'");
  one({{"a", 1.5}, {"b", 1}}, "/a: is number, expected integer");
  one({{"a", 0}, {"b", 1}}, "/a: 0 violates minimum 1");
  one({{"a", 1}, {"b", "x"}}, "/b: is string, expected number or null");
  one({{"a", 1}, {"b", 1}, {"c", "z"}}, "/c: is \"z\", expected one of");
  one({{"a", 1}, {"b", 1}, {"d", json::array()}}, "/d: has 0 items");
  one({{"a", 1}, {"b", 1}, {"d", {1}}}, "/d/0: is number, expected string");
  one({{"a", 1}, {"b", 1}, {"e", "2.0"}}, "does not match");
  one({{"a", 1}, {"b", 1}, {"f", 0}}, "violates exclusiveMinimum");
  one({{"a", 1}, {"b", 1}, {"g", "other"}}, "expected \"latprof\"");
  EXPECT_FALSE(schema_violations(json::array(), s).empty());
}

TEST(SchemaValidator, RefsAndUnknownKeywords) {
  const json s = {{"$defs", {{"pos", {{"type", "number"}, {"minimum", 0}}}}},
                  {"type", "array"},
                  {"items", {{"$ref", "#/$defs/pos"}}}};
  EXPECT_TRUE(schema_violations(json::array({1, 2}), s).empty());
  EXPECT_EQ(schema_violations(json::array({1, -2}), s).size(), 1u);
  // A keyword the validator does not implement is an error, never silently passed.
  EXPECT_THROW(schema_violations(1, {{"not", json::object()}}), std::invalid_argument);
  EXPECT_THROW(schema_violations(1, {{"$ref", "other.json#/x"}}), std::invalid_argument);
}

TEST(SchemaValidator, OneOfAndAnyOf) {
  const json s = {
      {"oneOf", json::array({json{{"type", "number"}, {"minimum", 0}}, json{{"type", "null"}}})}};
  EXPECT_TRUE(schema_violations(1, s).empty());
  EXPECT_TRUE(schema_violations(nullptr, s).empty());
  EXPECT_EQ(schema_violations(-1, s).size(), 1u);
  EXPECT_EQ(schema_violations("x", s).size(), 1u);
  // Both alternatives match: not exactly one.
  const json both = {{"oneOf", json::array({json{{"type", "number"}}, json{{"minimum", 0}}})}};
  EXPECT_EQ(schema_violations(2, both).size(), 1u);
  const json any = {{"anyOf", json::array({json{{"type", "number"}}, json{{"minimum", 0}}})}};
  EXPECT_TRUE(schema_violations(2, any).empty());
  EXPECT_TRUE(schema_violations("x", any).empty());  // minimum says nothing of a string
  const json num = {{"anyOf", json::array({json{{"type", "number"}}, json{{"type", "null"}}})}};
  EXPECT_EQ(schema_violations("x", num).size(), 1u);
}

TEST(RunReportSchema, AcceptsReportsBuiltHere) {
  const json s = schema();
  EXPECT_EQ(s["x-latprof-schema-version"], kSchemaVersion);
  for (const char* dtype : {"fp16", "int8"}) {
    report_test::Fixture f;
    f.dtype = dtype;
    const json j = report_to_json(report_test::make_report(f));
    const auto v = schema_violations(j, s);
    EXPECT_TRUE(v.empty()) << joined(v);
  }
}

TEST(RunReportSchema, RejectsBrokenReports) {
  const json s = schema();
  const json good = report_to_json(report_test::make_report());
  json j = good;
  j.erase("metrics");
  EXPECT_NE(joined(schema_violations(j, s)).find("missing required field 'metrics'"),
            std::string::npos);
  j = good;
  j["schema_version"] = "2.0";
  EXPECT_NE(joined(schema_violations(j, s)).find("/schema_version"), std::string::npos);
  j = good;
  j["stages"][1]["bound"] = "latency";
  EXPECT_NE(joined(schema_violations(j, s)).find("/stages/1/bound"), std::string::npos);
  j = good;
  j["metrics"]["itl_ms"].erase("p99");
  EXPECT_NE(joined(schema_violations(j, s)).find("/metrics/itl_ms: missing required field 'p99'"),
            std::string::npos);
  j = good;
  j["ops"][0].erase("stage");
  EXPECT_NE(joined(schema_violations(j, s)).find("/ops/0: missing required field 'stage'"),
            std::string::npos);
  j = good;
  j["run"]["input_tokens"] = 0;
  EXPECT_FALSE(schema_violations(j, s).empty());
}

TEST(RunReportSchema, MinorVersionsAndUnknownFieldsAreAccepted) {
  json j = report_to_json(report_test::make_report());
  j["schema_version"] = "1.7";
  j["a_field_from_1_7"] = {{"x", 1}};
  j["metrics"]["new_metric_ms"] = 3.0;
  const auto v = schema_violations(j, schema());
  EXPECT_TRUE(v.empty()) << joined(v);
}

TEST(RunReportSchema, DescribesEveryRowField) {
  const json s = schema();
  const json& props = s["$defs"]["row"]["properties"];
  for (const auto& f : row_fields()) {
    ASSERT_TRUE(props.contains(f.name)) << f.name;
    EXPECT_TRUE(props[f.name].contains("description")) << f.name;
  }
  for (const auto& [name, p] : props.items()) EXPECT_TRUE(p.contains("description")) << name;
}

TEST(RunReportSchema, LocatedAtRunTime) {
  const json s = load_run_report_schema();
  EXPECT_EQ(s["title"], schema()["title"]);
}

// latprof run's own --json output, validated.
TEST(RunReportSchema, AcceptsLatprofRunOutput) {
  const auto path = cli_test::temp_dir("schema") / "run.json";
  const auto r = cli_test::latprof(
      "run --model tiny --input 8 --output 4 --repeat 2 --quiet --json " + path.string());
  ASSERT_EQ(r.code, 0) << r.err;
  const json j = json::parse(cli_test::slurp(path.string()));
  const auto v = schema_violations(j, schema());
  EXPECT_TRUE(v.empty()) << joined(v);
}

// The schema is valid draft 2020-12 and an independent validator agrees (skipped without
// python3 and its jsonschema module).
TEST(RunReportSchema, PythonJsonschemaAgrees) {
  if (std::system("python3 -c 'import jsonschema' >/dev/null 2>&1") != 0)
    GTEST_SKIP() << "python3 with the jsonschema module is not installed "
                    "(apt-get install python3-jsonschema)";
  const auto dir = cli_test::temp_dir("schema-py");
  const auto good = dir / "good.json", bad = dir / "bad.json";
  json j = report_to_json(report_test::make_report());
  report_test::write_text(good, j.dump());
  j["stages"][0]["time_ms"] = "fast";
  report_test::write_text(bad, j.dump());
  const std::string schema_path =
      std::string(LATPROF_TEST_DIR) + "/../reports/schema/run-report.schema.json";
  const std::string py =
      "import json,sys,jsonschema\n"
      "s=json.load(open(sys.argv[1]))\n"
      "jsonschema.Draft202012Validator.check_schema(s)\n"
      "v=jsonschema.Draft202012Validator(s)\n"
      "g=list(v.iter_errors(json.load(open(sys.argv[2]))))\n"
      "b=list(v.iter_errors(json.load(open(sys.argv[3]))))\n"
      "sys.exit(0 if not g and b else 1)\n";
  report_test::write_text(dir / "check.py", py);
  const std::string cmd = "python3 " + (dir / "check.py").string() + " " + schema_path + " " +
                          good.string() + " " + bad.string();
  EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
}

}  // namespace
