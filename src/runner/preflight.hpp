#pragma once
// Checks that need the model and the device but no run: made once for a `latprof run` that runs
// several dtypes, so that the last dtype is never refused after the first has run.
#include <string>
#include <vector>

#include "runner/runner.hpp"

namespace latprof {

// Opens the model, validates the options against it and checks that every dtype in `dtypes`
// (weights, KV cache, activations) fits in the backend's memory; throws UsageError naming the
// first that does not. Allocates nothing.
void check_dtypes_fit(const RunOptions& o, const std::vector<std::string>& dtypes);

}  // namespace latprof
