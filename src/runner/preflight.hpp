#pragma once
// Checks that need the model and the device but no run: made once for a `latprof run` that runs
// several dtypes or KV-cache types, so that the last is never refused after the first has run.
#include <string>
#include <vector>

#include "runner/runner.hpp"

namespace latprof {

// Opens the model, validates the options against it and checks that every variant (o with its
// dtype and kv_dtype) runs on the backend and fits in its memory (weights, KV cache,
// activations); throws UsageError naming the first that does not. Allocates nothing.
void check_variants_fit(const std::vector<RunOptions>& variants);

}  // namespace latprof
