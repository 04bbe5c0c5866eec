// Placeholder until the exports land: asking for one is a usage error.
#include "report/exports.hpp"

#include "core/error.hpp"

namespace latprof {
void check_export_paths(const ExportOptions& o) {
  if (!o.trace.empty() || !o.csv.empty() || !o.jsonl.empty() || !o.html.empty())
    usage_error("--trace, --csv, --jsonl and --html are not available in this build yet");
}
void write_exports(const RunReport&, const ExportOptions&) {}
}  // namespace latprof
