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
}  // namespace latprof
