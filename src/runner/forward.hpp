#pragma once
// The Llama forward pass, written once against the backend interface.
#include <functional>

#include "runner/model.hpp"
#include "runner/profiler.hpp"

namespace latprof {

// Runs one engine step (the step's arrays uploaded to m.step_buf, described by st) through the
// model: writes every token's K and V to its cache slot and leaves the logits of the rows
// st.logits_rows in m.logits [n_logits, vocab]. Every op is a profiler scope. on_layer(l) is
// called after layer l has been issued (progress).
void forward(LoadedModel& m, Profiler& prof, const StepDesc& st,
             const std::function<void(int)>& on_layer = {});

}  // namespace latprof
