// The exports of `latprof run`: each printer formats the same RunReport.
#include "report/exports.hpp"

#include "core/atomic_file.hpp"
#include "report/csv.hpp"
#include "report/html.hpp"
#include "report/trace.hpp"

namespace latprof {

void check_export_paths(const ExportOptions& o) {
  if (!o.trace.empty()) check_writable(o.trace, "--trace");
  if (!o.csv.empty()) check_writable(o.csv, "--csv");
  if (!o.jsonl.empty()) check_writable(o.jsonl, "--jsonl");
  if (!o.html.empty()) check_writable(o.html, "--html");
}

void write_exports(const RunReport& r, const ExportOptions& o) {
  if (!o.trace.empty()) write_file_atomic(o.trace, trace_json(r).dump() + "\n");
  if (!o.csv.empty()) write_file_atomic(o.csv, csv_export(r));
  if (!o.jsonl.empty()) append_line_atomic(o.jsonl, jsonl_record(r).dump());
  if (!o.html.empty()) write_file_atomic(o.html, report_html(r));
}

}  // namespace latprof
