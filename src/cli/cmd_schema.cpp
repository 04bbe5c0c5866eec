// latprof schema: the run report's JSON Schema, or its field table for README.md, generated from
// the one description of the report's fields (src/report/report_fields.hpp).
#include <cstdio>
#include <memory>

#include "cli/commands.hpp"
#include "report/report_schema.hpp"

namespace latprof::cli {

CommandFn add_schema_command(CLI::App& app) {
  auto markdown = std::make_shared<bool>(false);
  CLI::App* sub = app.add_subcommand(
      "schema", "Print the JSON Schema of 'latprof run --json' reports (or its field table)");
  sub->add_flag("--markdown", *markdown, "Print the field table of README.md instead");
  return [=]() -> int {
    std::fputs((*markdown ? run_report_markdown() : run_report_schema_text()).c_str(), stdout);
    return 0;
  };
}

}  // namespace latprof::cli
