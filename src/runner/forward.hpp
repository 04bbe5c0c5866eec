#pragma once
// The Llama forward pass, written once against the backend interface.
#include <functional>

#include "runner/model.hpp"
#include "runner/profiler.hpp"

namespace latprof {

// Runs n_seq sequences of n_new tokens each (token ids in m.tokens, sequence-major; the position
// of the first new token in m.pos) through the model and leaves the logits of each sequence's
// last token in m.logits [n_seq, vocab]. Every op is a profiler scope. on_layer(l) is called
// after layer l has been issued (progress).
void forward(LoadedModel& m, Profiler& prof, int64_t n_seq, int64_t n_new,
             const std::function<void(int)>& on_layer = {});

}  // namespace latprof
