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
//  Load mode (`run --requests`; time 0 = the first arrival, the clock of steps and requests):
//  pid 1 "engine": tid 1 holds the engine steps (each a span, its tokens and seqs in args), and
//    counter events (ph "C") "running sequences", "step tokens" {prefill, decode} (from each
//    step's start; 0 while the engine idles) and "KV usage" (after each step, at its end).
//  pid 3 "requests": one thread per request (tid = id + 1): the span "request <id>" from arrival
//    to the last token with the request's figures in args, holding "queued" [arrival, arrival +
//    queue_ms], "prefill" [.., arrival + ttft_ms] and "decode" [.., arrival + e2e_ms], which add
//    up to e2e_ms; each token an instant event (ph "i") at arrival + ttft + the gaps before it.
// Metadata events (ph "M") name every process and thread. Times: microseconds, ns resolution.
nlohmann::json trace_json(const RunReport& r);

}  // namespace latprof
