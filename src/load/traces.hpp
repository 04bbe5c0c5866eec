#pragma once
// Public LLM serving traces, replayed by `latprof load --trace-replay`:
//   Mooncake (JSON Lines): {"timestamp": ms, "input_length": N, "output_length": M, "hash_ids":
//   [...]} Azure LLM inference (CSV): TIMESTAMP,ContextTokens,GeneratedTokens with TIMESTAMP as
//   "2023-11-16 18:15:46.6805900" (UTC).
// The format is told by the first byte ('{': Mooncake). Entries come back with arrival_ms set.
#include <cstdint>
#include <string>
#include <vector>

#include "core/workload.hpp"

namespace latprof::load {

// Throws UsageError naming the file, the line and the problem. At most max_entries entries.
std::vector<workload::DatasetEntry> read_trace(const std::string& path, int64_t max_entries);

}  // namespace latprof::load
