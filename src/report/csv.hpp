#pragma once
// Flat exports of a run report: CSV (one row per stage and op) and JSON Lines (one object per run).
#include <nlohmann/json.hpp>
#include <string>

#include "report/report.hpp"

namespace latprof {

// Header: kind,model,dtype,backend,device,stage,op,<row_fields() names>,bound; then one row per
// stage (kind "stage", op empty) and per op (kind "op"). RFC 4180 quoting; numbers that cannot
// be computed are empty cells.
std::string report_csv(const RunReport& r);
std::vector<std::string> csv_header();
// Splits one CSV record (RFC 4180: quoted fields, "" inside quotes). For tests and readers.
std::vector<std::string> csv_split(const std::string& line);

// One flat object: timestamp, commit, dirty, tool version, schema version, hostname, model,
// dtype, backend, device, input_tokens, output_tokens, batch, threads, repeat, then every
// metric_fields() value and e2e_stddev_ms.
nlohmann::json jsonl_record(const RunReport& r);

}  // namespace latprof
