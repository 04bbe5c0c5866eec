#pragma once
// Exports of a run report besides --json: Chrome/Perfetto trace, CSV, JSON Lines, HTML.
#include <string>

#include "report/report.hpp"

namespace latprof {

struct ExportOptions {
  std::string trace;  // Chrome trace event JSON (Perfetto, chrome://tracing)
  std::string csv;    // one row per stage and op (load mode: one per request)
  std::string jsonl;  // one flat line per run, appended
  std::string html;   // self-contained HTML report
};
// Checks before the run that every named path can be written (UsageError otherwise).
void check_export_paths(const ExportOptions& o);
// Writes each requested export (atomically: temporary file, then rename).
void write_exports(const RunReport& r, const ExportOptions& o);

}  // namespace latprof
