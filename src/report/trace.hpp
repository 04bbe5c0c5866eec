#pragma once
// Chrome trace event format (the JSON that Perfetto and chrome://tracing open) of a run report.
#include <nlohmann/json.hpp>
#include <string>

#include "report/report.hpp"

namespace latprof {

// {"traceEvents": [...], "displayTimeUnit": "ms", "otherData": {...}}. Track layout:
//  pid 1 "request": tid 1 holds the median repeat's timeline, nested by time:
//    stage (tokenize, prefill, sample, decode, detokenize, serialize)
//      > decode step ("decode_step" k, then its "sample")
//        > layer ("layer L", from its first op's start to its last op's end)
//          > op (qkv_proj, attention, ...; embed, the final norm and lm_head sit in the step)
//    The "decode" span is derived: from the first decode step's start to the last step's end.
//  pid 2 "GPU": kernels (and copies) from report.profile ("kernels" / "copies" arrays of
//    {name, start_ns, end_ns, ...}, at the top level or one level down), one tid per stream
//    when records name one. Those come from a separate profiling request: time 0 is its first
//    record, not the request start.
// Metadata events (ph "M") name every process and thread. Times: microseconds, ns resolution.
nlohmann::json trace_json(const RunReport& r);

}  // namespace latprof
