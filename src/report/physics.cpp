// Physics checks of a run report. A measured time cannot be below the roofline floor of the work
// the cost model says it did; when it is, the clock was read before the work finished (missing
// synchronization) or the bytes/FLOPs are wrong, so the row is flagged, not reported as a result.
#include "report/physics.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>

#include "core/error.hpp"
#include "core/format.hpp"
#include "model/config.hpp"

namespace latprof {

namespace {

// Measured ceilings are themselves measurements (a probe reaches a few percent less than the
// best kernel can): a time up to 10% below the floor is "at the roof", a warning, not an error.
constexpr double kFloorTolerance = 0.10;
// Two measurements of the same thing (tokens/s against step times) may differ by what each
// includes (sampling, detokenize, the first step): beyond 20% they contradict each other.
constexpr double kConsistencyTolerance = 0.20;

const char* kTimingHint = "likely timing error (missing synchronization, wrong byte count)";

std::string x_of(double ratio) {
  return fmt_fixed(ratio, ratio >= 10 ? 0 : 2) + "x";
}

// The highest read bandwidth measured for this run: the reads just before and just after the
// timed part (whose mean is the memory roof) and the machine's cached probe. A shared machine's
// memory bandwidth can change within seconds, so a memory-bound time below its floor at the roof
// but not at this bandwidth may have run in a faster window than either read saw.
double best_read_bandwidth(const RunReport& r) {
  double best = r.ceilings.mem_bw_bytes_per_s;
  const nlohmann::json& ci = r.ceilings_info;
  if (ci.is_object())
    for (const char* k : {"read_bandwidth_before", "read_bandwidth_after", "read_bandwidth_cached"})
      if (ci.contains(k) && ci[k].is_number()) best = std::max(best, ci[k].get<double>());
  return best;
}

// What a row's or the MBU's warning says when only the highest read explains it; the warning on
// ceilings.mem_bw_bytes_per_s (check_read_drift) says why, once.
constexpr const char* kDriftNote =
    "; the memory roof is uncertain (see the warning on ceilings.mem_bw_bytes_per_s)";

// The reads just before and just after the timed part disagree by more than this: the roof (their
// mean) is then a guess between two figures, and the report says so with MBU against each.
constexpr double kReadDrift = 0.20;

// One warning on the memory roof when the reads around the run disagree, or when a row or the MBU
// was judged at the highest read of the run (drift_used).
void check_read_drift(RunReport& r, bool drift_used) {
  const nlohmann::json& ci = r.ceilings_info;
  if (!ci.is_object()) return;
  const auto read = [&](const char* k) {
    return ci.contains(k) && ci[k].is_number() ? ci[k].get<double>() : 0.0;
  };
  const double before = read("read_bandwidth_before"), after = read("read_bandwidth_after");
  const double lo = std::min(before, after), hi = std::max(before, after);
  const bool apart = lo > 0 && hi > lo * (1 + kReadDrift);
  if (!apart && !drift_used) return;
  const double roof = r.ceilings.mem_bw_bytes_per_s;
  std::string msg;
  if (apart) {
    msg = "the memory bandwidth read " + fmt_rate(before, "B/s") +
          " just before the timed part and " + fmt_rate(after, "B/s") +
          " just after: this machine's memory bandwidth changed during the run (as a shared "
          "machine's does), so the memory roof (" +
          fmt_rate(roof, "B/s") +
          ", their mean) and every MBU and memory floor against it are uncertain";
    if (const double mbu = r.metrics.mbu; mbu > 0 && roof > 0)
      msg += "; MBU " + fmt_pct(mbu) + " would be " + fmt_pct(mbu * roof / hi) + " against the " +
             "faster read and " + fmt_pct(mbu * roof / lo) + " against the slower";
  } else {
    msg = "the memory roof " + fmt_rate(roof, "B/s") +
          " is the mean of the reads just before and just after the timed part, but this "
          "machine read up to " +
          fmt_rate(best_read_bandwidth(r), "B/s") +
          " (those reads and its cached probe): its memory bandwidth changes from one moment to "
          "the next (as a shared machine's does), so the roof and every MBU and memory floor "
          "against it are uncertain";
  }
  msg += "; rerun, or compare variants within one process";
  r.checks.push_back({"warning", "ceilings.mem_bw_bytes_per_s", msg});
}

// A single request's decode steps differ only by their context, a little more each step: where
// the median of kShiftSteps steps differs from that of the kShiftSteps before by more than
// kStepShift, the machine itself changed speed during the run (on a shared machine, usually its
// memory bandwidth), even when the reads before and after it agree.
constexpr int kShiftSteps = 8;
constexpr double kStepShift = 0.25;

void check_step_shift(RunReport& r) {
  const std::vector<double>& d = r.decode_step_ms;
  const int n = int(d.size()), w = kShiftSteps;
  if (n < 2 * w) return;
  int at = -1;
  double best = 1 + kStepShift, before = 0, after = 0;
  for (int k = w; k + w <= n; ++k) {
    const double a = percentiles({d.begin() + (k - w), d.begin() + k}).p50;
    const double b = percentiles({d.begin() + k, d.begin() + (k + w)}).p50;
    if (a > 0 && b > 0 && std::max(a, b) / std::min(a, b) > best) {
      best = std::max(a, b) / std::min(a, b);
      at = k;
      before = a;
      after = b;
    }
  }
  if (at < 0) return;
  // The medians place the change only to within a window: it is where the steps around it turn
  // from nearer the first speed to nearer the second (the split with the least deviation).
  double least = -1;
  int split = at;
  for (int k = at - w + 1; k < at + w; ++k) {
    double dev = 0;
    for (int i = at - w; i < at + w; ++i) dev += std::fabs(d[i] - (i < k ? before : after));
    if (least < 0 || dev < least) least = dev, split = k;
  }
  at = split;
  // Whether the time the thread pool spent off its CPUs (steps[].offcpu_ms, the pure decode
  // steps in decode_step_ms's order) explains the slower window: then the machine took the CPUs.
  const std::vector<double> off = decode_step_offcpu_ms(r);
  std::string why =
      "the machine's speed changed during the run (on a shared machine usually its memory "
      "bandwidth)";
  if (!off.empty()) {
    const int lo = std::max(0, at - w), hi = std::min(n, at + w);  // the windows around it
    const double off_before = percentiles({off.begin() + lo, off.begin() + at}).p50;
    const double off_after = percentiles({off.begin() + at, off.begin() + hi}).p50;
    const double slow_off = before > after ? off_before : off_after;
    const double fast_off = before > after ? off_after : off_before;
    if (slow_off - fast_off >= 0.5 * std::fabs(before - after))
      why = "the machine took the CPUs from latprof's threads: a median " + fmt_ms(slow_off) +
            " of each slower step off-CPU against " + fmt_ms(fast_off) +
            " of each faster one (steps[].offcpu_ms: the hypervisor's steal or other processes)";
    else
      why += "; not the time off the CPUs, a median " + fmt_ms(slow_off) + " a slower step and " +
             fmt_ms(fast_off) + " a faster one";
  }
  r.checks.push_back(
      {"warning", "decode_step_ms",
       "the decode steps ran at two speeds: a median " + fmt_ms(before) + " for the " +
           std::to_string(w) + " steps before decode step " + std::to_string(at + 1) + " and " +
           fmt_ms(after) + " for the " + std::to_string(w) + " from it (" + x_of(best) +
           "), more than their context's growth explains: " + why +
           ", so TPOT, MBU and the other figures that average the steps mix the two; rerun, or "
           "compare runs that ran at one speed"});
}

// MBU above 100% (`who` prefixes the message: a row's name, or nothing for the run's metric): an
// error, or a warning when the highest read of the run explains it.
void check_mbu(RunReport& r, const std::string& subject, const std::string& who, double mbu) {
  const double best = best_read_bandwidth(r);
  const std::string what = who + "MBU " + fmt_pct(mbu) + " is above 100%";
  if (mbu * r.ceilings.mem_bw_bytes_per_s / best <= 1 + 1e-9)
    r.checks.push_back({"warning", subject, what + kDriftNote});
  else
    r.checks.push_back({"error", subject, what + "; " + kTimingHint});
}

struct WorkingSet {
  bool known = false;
  double weights = 0, kv = 0;
  double total() const { return weights + kv; }
};

WorkingSet working_set(const RunReport& r) {
  WorkingSet ws;
  if (!r.model_config.is_object() || r.model_config.empty()) return ws;
  try {
    const ModelConfig m = model_from_json(r.model_config, "report model");
    const Precision p = run_precision(r.run);
    ws.weights = weight_bytes(m, p);
    ws.kv = kv_cache_bytes(m, p, std::max<int64_t>(1, r.run.batch),
                           r.run.input_tokens + r.run.output_tokens);
    ws.known = true;
  } catch (const UsageError&) {
  }
  return ws;
}

// cache_served: ops held to the DRAM roof for their weights only because their activations
// were cache-resident, and that ran faster than the full floor (listed in one info line).
// weights_cached_share: of each call's weights, the share the last-level cache may still hold
// from the previous step (cache / working set where the working set exceeds the cache; 0 when
// unknown or resident). weights_served: rows that beat the DRAM floor of all their weights but
// not the floor of the share beyond the cache (listed in one info line).
void check_row(RunReport& r, const Row& row, const std::string& subject, bool cache_resident,
               bool is_op, std::vector<std::string>* cache_served = nullptr,
               double weights_cached_share = 0,
               std::vector<std::string>* weights_served = nullptr) {
  const Ceilings& c = r.ceilings;
  if (!(row.time_ms > 0) || !std::isfinite(row.time_ms)) return;
  if (row.cost.flops <= 0 && row.cost.bytes() <= 0) return;
  double peak = c.matmul_flops_per_s;
  try {
    const Precision p = run_precision(r.run);
    peak = is_op ? c.peak_for(op_from_name(row.name), p) : c.matmul_peak(p);
  } catch (const UsageError&) {
  }
  const double compute_ms = peak > 0 ? row.cost.flops / peak * 1e3 : 0;
  const double memory_ms =
      c.mem_bw_bytes_per_s > 0 ? row.cost.bytes() / c.mem_bw_bytes_per_s * 1e3 : 0;
  // The runner's floor sums per-op floors for a stage (tighter than the stage total's); use it
  // when present.
  const double floor_ms = row.floor_ms > 0 ? row.floor_ms : std::max(compute_ms, memory_ms);
  const bool memory_bound = memory_ms > compute_ms;
  double applicable = cache_resident && memory_bound ? compute_ms : floor_ms;
  // An op's activations (and the KV rows it writes then reads) were just produced by the op
  // before it: up to the last-level cache's size of what it reads can still be there when it
  // starts, and up to as much of what it writes can stay there when it ends. So of one call's
  // activation bytes (reads and writes, which the cost model does not tell apart) at least
  // act - 2 x cache cross DRAM during the call (none when they fit, e.g. prefill residual adds
  // on a CPU with a large L3); only that and the weights are held to the DRAM roof. Weights are
  // streamed from DRAM unless the whole model is cache-resident.
  bool act_in_cache = false;
  double dram_bytes = row.cost.bytes();  // what the floor holds to the DRAM roof
  if (is_op && !cache_resident && c.cache_bytes > 0 && row.calls > 0 && memory_bound) {
    const double act = row.cost.act_bytes + row.cost.kv_bytes;
    const double spilled = std::max(0.0, act / double(row.calls) - 2 * c.cache_bytes) * row.calls;
    if (spilled < act) {
      act_in_cache = true;
      dram_bytes = row.cost.weight_bytes + spilled;
      applicable = std::max(compute_ms, dram_bytes / c.mem_bw_bytes_per_s * 1e3);
      // Listed when the cache is the whole explanation: below the floor with the activations
      // but not below the one without them (a decode GEMV below its weights' floor too did not
      // get there through its few KB of activations: the checks below say what did).
      if (cache_served && row.time_ms < floor_ms && row.time_ms >= applicable)
        cache_served->push_back(subject);
    }
  }
  // Weights: every step streams the working set W through the last-level cache C. Where W is
  // larger, an LRU cache keeps none of it for the next step, but the replacement policies of
  // large L3s keep part of a stream (on an Intel Xeon with a 480 MiB L3 and tinyllama-1.1b
  // INT8's 1.1 GB working set the decode LM head read 1.22x the DRAM rate): a row below the
  // floor of all its weights is credited its share, C / W of them, as possibly served from
  // there (a 7B model on a 32 MiB L3: 0.2%), and held to the DRAM roof for the rest.
  bool weights_in_cache = false, weights_credited = false;
  if (!cache_resident && weights_cached_share > 0 && memory_bound && row.cost.weight_bytes > 0 &&
      row.time_ms < applicable) {
    dram_bytes -= weights_cached_share * row.cost.weight_bytes;
    const double credited =
        std::min(applicable, std::max(compute_ms, dram_bytes / c.mem_bw_bytes_per_s * 1e3));
    if (row.time_ms >= credited && weights_served) weights_served->push_back(subject);
    weights_in_cache = row.time_ms >= credited;
    weights_credited = true;
    applicable = credited;
  }
  if (!(applicable > 0)) return;
  const double ratio = applicable / row.time_ms;  // > 1: faster than physics
  const std::string what = subject + " measured " + fmt_ms(row.time_ms) + " is below its " +
                           (cache_resident && memory_bound ? "compute" : "roofline") + " floor " +
                           fmt_ms(applicable);
  // The same floor at the highest read bandwidth of the run (memory-bound rows held to DRAM).
  const double best = best_read_bandwidth(r);
  const bool drift = memory_bound && !cache_resident && best > c.mem_bw_bytes_per_s;
  const double applicable_best =
      drift ? std::max(compute_ms, applicable * c.mem_bw_bytes_per_s / best) : applicable;
  if (ratio > 1 + kFloorTolerance && drift &&
      applicable_best / row.time_ms <= 1 + kFloorTolerance) {
    r.checks.push_back({"warning", subject,
                        what + " by " + fmt_pct(ratio - 1) + ", not below its floor " +
                            fmt_ms(applicable_best) + " at " + fmt_rate(best, "B/s") + kDriftNote});
  } else if (ratio > 1 + kFloorTolerance) {
    const bool dram_floor = memory_bound && !cache_resident && applicable > compute_ms;
    std::string why =
        dram_floor ? " (" + fmt_bytes(dram_bytes) +
                         (act_in_cache || weights_credited ? " from DRAM" : "") + " at " +
                         fmt_rate(c.mem_bw_bytes_per_s, "B/s") + ")"
                   : " (" + fmt_count(row.cost.flops) + "FLOP at " + fmt_rate(peak, "FLOP/s") + ")";
    r.checks.push_back(
        {"error", subject,
         what + why + ": " + x_of(ratio) + " faster than physics allows; " + kTimingHint});
  } else if (ratio > 1) {
    r.checks.push_back({"warning", subject,
                        what + " by " + fmt_pct(ratio - 1) +
                            ": at the roof, within the tolerance of the measured ceilings"});
  } else {
    // Within the floor. MFU counts model FLOPs, which for attention means every key of the
    // context for every query token (the causal mask executes about half of them): a good causal
    // attention kernel can show MFU over 100% while its executed FLOPs stay under the peak.
    if (row.mfu > 1 + 1e-9) {
      const double executed = row.cost.model_flops > row.cost.flops && row.cost.flops > 0
                                  ? row.mfu * row.cost.flops / row.cost.model_flops
                                  : row.mfu;
      if (executed > 1 + 1e-9)
        r.checks.push_back(
            {"error", subject + ".mfu",
             subject + " MFU " + fmt_pct(row.mfu) + " is above 100%; " + kTimingHint});
      else
        r.checks.push_back(
            {"info", subject + ".mfu",
             subject + " MFU " + fmt_pct(row.mfu) +
                 " is above 100% only by the MFU convention, which counts every key of the "
                 "context for every query token (" +
                 fmt_count(row.cost.model_flops) + "FLOP); the " + fmt_count(row.cost.flops) +
                 "FLOP it executes ran at " + fmt_pct(executed) + " of the peak"});
    }
    if (row.mbu > 1 + 1e-9 && !cache_resident && !act_in_cache && !weights_in_cache)
      check_mbu(r, subject + ".mbu", subject + " ", row.mbu);
  }
}

void check_consistent(RunReport& r, const std::string& subject, const std::string& a_name, double a,
                      const std::string& b_name, double b) {
  if (!(a > 0) || !(b > 0) || !std::isfinite(a) || !std::isfinite(b)) return;
  const double rel = std::fabs(a - b) / std::min(a, b);
  if (rel > kConsistencyTolerance)
    r.checks.push_back({"error", subject,
                        a_name + " " + fmt_fixed(a, 2) + " and " + b_name + " " + fmt_fixed(b, 2) +
                            " disagree by " + fmt_pct(rel) + "; " + kTimingHint});
}

}  // namespace

void add_physics_checks(RunReport& r) {
  const Ceilings& c = r.ceilings;
  if (!(c.mem_bw_bytes_per_s > 0) || !(c.matmul_flops_per_s > 0)) {
    r.checks.push_back({"warning", "ceilings",
                        "no memory bandwidth or compute peak for " + c.device +
                            ": the physics checks were skipped"});
    return;
  }
  const WorkingSet ws = working_set(r);
  const bool cache_resident = ws.known && c.cache_bytes > 0 && ws.total() <= c.cache_bytes;
  if (cache_resident)
    r.checks.push_back(
        {"info", "ceilings.cache_bytes",
         "the working set (weights " + fmt_bytes(ws.weights) + " + KV cache " + fmt_bytes(ws.kv) +
             ") fits in the " + fmt_bytes(c.cache_bytes) + " last-level cache of " + c.device +
             ": the memory roof (" + fmt_rate(c.mem_bw_bytes_per_s, "B/s") +
             ") does not apply; memory-bound rows are checked against the compute roof only"});

  const double weights_share = ws.known && !cache_resident && c.cache_bytes > 0 && ws.total() > 0
                                   ? std::min(1.0, c.cache_bytes / ws.total())
                                   : 0.0;
  std::vector<std::string> weights_served;
  for (const Row& s : r.stages)
    check_row(r, s, s.name, cache_resident, false, nullptr, weights_share, &weights_served);
  std::vector<std::string> cache_served;
  for (const Row& o : r.ops)
    check_row(r, o, o.stage + "." + o.name, cache_resident, true, &cache_served, weights_share,
              &weights_served);
  if (!weights_served.empty()) {
    std::string list;
    for (const auto& s : weights_served) list += (list.empty() ? "" : ", ") + s;
    r.checks.push_back({"info", "ceilings.cache_bytes",
                        list +
                            " read their weights faster than DRAM bandwidth allows: part of them "
                            "was still in the " +
                            fmt_bytes(c.cache_bytes) +
                            " last-level cache from the step before (the working set, " +
                            fmt_bytes(ws.total()) + ", is " +
                            fmt_fixed(ws.total() / c.cache_bytes, 1) +
                            "x the cache); each row is held to the DRAM roof for all but its share "
                            "of the cache, " +
                            fmt_pct(weights_share) + " of its weights"});
  }
  if (!cache_served.empty()) {
    std::string list;
    for (const auto& s : cache_served) list += (list.empty() ? "" : ", ") + s;
    r.checks.push_back(
        {"info", "ceilings.cache_bytes",
         list +
             " ran faster than DRAM bandwidth allows for their activation bytes: they were "
             "served from the " +
             fmt_bytes(c.cache_bytes) +
             " last-level cache (what one call reads can be there from the op before, what it "
             "writes can stay there); those ops are held to the DRAM roof for their weights and "
             "for the activation bytes of a call beyond twice the cache only"});
  }

  const Metrics& m = r.metrics;
  if (m.mfu > 1 + 1e-9)
    r.checks.push_back(
        {"error", "metrics.mfu", "MFU " + fmt_pct(m.mfu) + " is above 100%; " + kTimingHint});
  if (m.mbu > 1 + 1e-9 && !cache_resident) check_mbu(r, "metrics.mbu", "", m.mbu);
  if (!cache_resident)
    check_read_drift(r, std::any_of(r.checks.begin(), r.checks.end(), [](const Check& k) {
                       return k.message.ends_with(kDriftNote);
                     }));
  if (!r.load.is_object()) check_step_shift(r);  // (under load the batch sets a step's time)

  if (r.load.is_object()) {
    // Under load the metrics are medians over requests, not one request's: check each request.
    for (const auto& q : r.requests) {
      const double ttft = q.value("ttft_ms", 0.0), e2e = q.value("e2e_ms", 0.0);
      const double queue = q["queue_ms"].is_number() ? q["queue_ms"].get<double>() : 0.0;
      const std::string who = "requests[" + std::to_string(q.value("id", int64_t(-1))) + "]";
      if (queue > ttft * 1.001 + 1e-6)
        r.checks.push_back({"error", who + ".ttft_ms",
                            "TTFT " + fmt_ms(ttft) + " is shorter than the queue time " +
                                fmt_ms(queue) + " inside it; " + kTimingHint});
      if (ttft > e2e * 1.001 + 1e-6)
        r.checks.push_back(
            {"error", who + ".e2e_ms",
             "E2E " + fmt_ms(e2e) + " is shorter than TTFT " + fmt_ms(ttft) + "; " + kTimingHint});
    }
    return;
  }
  // tokens/s against the step times they are derived from
  const double batch = double(std::max<int64_t>(1, r.run.batch));
  if (m.tpot_ms > 0)
    check_consistent(r, "metrics.decode_tokens_per_s", "decode tokens/s", m.decode_tokens_per_s,
                     "batch x 1000 / TPOT", batch * 1e3 / m.tpot_ms);
  if (const auto& t = r.token_times_ms; t.size() >= 2)
    check_consistent(r, "metrics.tpot_ms", "TPOT ms", m.tpot_ms,
                     "(last token - first token) / (tokens - 1) ms",
                     (t.back() - t.front()) / double(t.size() - 1));
  // Each token after the first waits for one decode forward pass: TPOT cannot be shorter.
  if (!r.decode_step_ms.empty() && m.tpot_ms > 0) {
    const double mean = std::accumulate(r.decode_step_ms.begin(), r.decode_step_ms.end(), 0.0) /
                        double(r.decode_step_ms.size());
    if (mean > m.tpot_ms * 1.01)
      r.checks.push_back({"error", "metrics.tpot_ms",
                          "TPOT " + fmt_ms(m.tpot_ms) +
                              " is shorter than the mean decode forward pass it contains (" +
                              fmt_ms(mean) + "); " + kTimingHint});
  }
  for (const Row& s : r.stages) {
    if (s.name == "prefill" && s.time_ms > 0 && r.run.input_tokens > 0)
      check_consistent(r, "metrics.prefill_tokens_per_s", "prefill tokens/s",
                       m.prefill_tokens_per_s, "batch x input / prefill time",
                       batch * double(r.run.input_tokens) / (s.time_ms / 1e3));
    if (s.name == "prefill" && s.time_ms > 0 && m.ttft_ms > 0 && m.ttft_ms < s.time_ms * 0.99)
      r.checks.push_back({"error", "metrics.ttft_ms",
                          "TTFT " + fmt_ms(m.ttft_ms) +
                              " is shorter than the prefill it contains (" + fmt_ms(s.time_ms) +
                              "); " + kTimingHint});
  }
  if (m.e2e_ms > 0 && m.ttft_ms > m.e2e_ms * 1.01)
    r.checks.push_back({"error", "metrics.e2e_ms",
                        "E2E " + fmt_ms(m.e2e_ms) + " is shorter than TTFT " + fmt_ms(m.ttft_ms) +
                            "; " + kTimingHint});
}

}  // namespace latprof
