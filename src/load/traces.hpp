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
// `hash_ids` (when given) receives each entry's Mooncake hash_ids (empty for Azure): the ids of
// its prompt's 512-token blocks, equal ids meaning equal blocks (shared prefixes).
std::vector<workload::DatasetEntry> read_trace(
    const std::string& path, int64_t max_entries,
    std::vector<std::vector<int64_t>>* hash_ids = nullptr);
inline constexpr int64_t kTraceBlockTokens = 512;

}  // namespace latprof::load
