#pragma once
// Shared by the JSON-reader fuzz targets: the input is parsed as JSON (bad JSON is the parser's
// own business and is skipped); the reader under test must then succeed or throw UsageError.
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>

namespace fuzz {
inline std::optional<nlohmann::json> parse(const uint8_t* data, size_t size) {
  nlohmann::json j = nlohmann::json::parse(data, data + size, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return std::nullopt;
  return j;
}
}  // namespace fuzz
