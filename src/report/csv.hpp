#pragma once
// Flat exports of a run report: CSV (one row per stage and op, or in load mode one per request)
// and JSON Lines (one object per run).
#include <functional>
#include <nlohmann/json.hpp>
#include <string>

#include "report/load_view.hpp"
#include "report/report.hpp"

namespace latprof {

// Header: kind,model,dtype,backend,device,stage,op,<row_fields() names>,bound; then one row per
// stage (kind "stage", op empty) and per op (kind "op"). RFC 4180 quoting; numbers that cannot
// be computed are empty cells.
std::string report_csv(const RunReport& r);
std::vector<std::string> csv_header();
// Splits one CSV record (RFC 4180: quoted fields, "" inside quotes). For tests and readers.
std::vector<std::string> csv_split(const std::string& line);

// Load mode (`run --requests`): one row per request, by id, with these columns, each named and
// described once here (README's --csv section lists them). Cells are the report's figures;
// itl_p50/p99/max_ms summarize the request's own gaps with percentiles(), the report's one
// definition. Nulls (a figure the producer could not see) are empty cells.
struct RequestColumn {
  const char* name;
  const char* unit;  // as in report_fields.hpp: "ms", "token", "count", "" (none)
  const char* description;
  std::function<std::string(const RequestView&)> cell;
};
const std::vector<RequestColumn>& request_columns();
std::vector<std::string> requests_csv_header();
std::string requests_csv(const RunReport& r);
// What --csv writes: requests_csv() for a load-mode report, report_csv() otherwise.
std::string csv_export(const RunReport& r);

// One flat object: timestamp, commit, dirty, tool version, schema version, hostname, model,
// dtype, backend, device, input_tokens, output_tokens, batch, threads, repeat, then every
// metric_fields() value and e2e_stddev_ms. In load mode also the load (requests, rate) and the
// summary's headline figures, flat: load_summary_fields() below.
nlohmann::json jsonl_record(const RunReport& r);
// The summary figures a load-mode JSON Lines record adds, by flat name: (name, summary key,
// distribution field or nullptr for a plain number).
struct SummaryField {
  const char* name;
  const char* key;
  const char* stat;
};
const std::vector<SummaryField>& load_summary_fields();

}  // namespace latprof
