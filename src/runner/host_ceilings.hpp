#pragma once
// This machine's CPU ceilings, measured by the CPU backend's probe (backend/host_probe.hpp) and
// cached in $XDG_CACHE_HOME/latprof (or ~/.cache/latprof) keyed by CPU model and thread count.
#include <nlohmann/json.hpp>

#include "roofline/ceilings.hpp"

namespace latprof {
struct HostCeilings {
  Ceilings ceilings;
  nlohmann::json info;  // method, repetitions, raw probe figures, cache file, measured_utc
  double triad_bytes_per_s = 0;
};
// threads: the thread count the run uses. reprobe: ignore the cache. quick: a shorter probe.
HostCeilings host_ceilings(int threads, bool reprobe, bool quiet);
// The read bandwidth now (bytes/s, best of 3 reads of max(256 MiB, 8x the last-level cache)):
// on a shared machine it drifts by tens of percent within minutes (45-73 GB/s on one 2-core VM
// in a day), so a run measures it just before and just after its timed part and judges MBU
// against their mean, not against the cached figure. Takes ~0.1-0.3 s.
double read_bandwidth_now(int threads);
// The one-way latency of a cache line between two of the run's threads now (ns, median of 5
// repetitions of up to 2,000 round trips or 20 ms, ~1-10 ms); 0 below 2 threads or above the
// CPUs the process may use. Measured with the read bandwidth: on a VM it changes as the host
// moves the vCPUs (AMD Zen 4: ~30 ns on one core complex, ~180 across two), and with it what the
// thread pool's synchronisation costs.
double core_to_core_ns_now(int threads);
}  // namespace latprof
