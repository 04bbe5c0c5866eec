#include "runner/host_ceilings.hpp"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>

#include "backend/host_probe.hpp"
#include "core/atomic_file.hpp"
#include "core/checked.hpp"
#include "core/host.hpp"

namespace latprof {

namespace {

namespace fs = std::filesystem;

// Bump when the probe changes so old cached figures are not reused.
constexpr int kProbeVersion = 7;  // 3: the bf16 dot-product peak; 4: the int16 one; 5: the read
                                  // prefetched as well; 6: the AMX-INT8 tiles; 7: AMX-BF16

double llc_bytes() {
  double best = 0;
  for (int i = 0; i < 8; ++i) {
    std::ifstream in("/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(i) + "/size");
    std::string s;
    if (!(in >> s)) continue;
    double v = std::atof(s.c_str());
    if (s.find('K') != std::string::npos) v *= 1024;
    if (s.find('M') != std::string::npos) v *= 1024 * 1024;
    best = std::max(best, v);
  }
  return best;
}

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

fs::path cache_file(int threads) {
  fs::path dir;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x)
    dir = fs::path(x) / "latprof";
  else if (const char* h = std::getenv("HOME"); h && *h)
    dir = fs::path(h) / ".cache" / "latprof";
  else
    dir = fs::temp_directory_path() / "latprof";
  std::string cpu = host_cpu_name();
  for (char& ch : cpu)
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return dir / ("ceilings-" + cpu + "-t" + std::to_string(threads) + "-v" +
                std::to_string(kProbeVersion) + (host_gemm_uses_amx() ? "-amx" : "") + ".json");
}

HostCeilings from_json(const nlohmann::json& j) {
  HostCeilings h;
  h.ceilings = ceilings_from_json(j.at("ceilings"), "probe cache");
  h.info = j.at("info");
  h.triad_bytes_per_s = j.value("triad_bytes_per_s", 0.0);
  return h;
}

}  // namespace

HostCeilings host_ceilings(int threads, bool reprobe, bool quiet) {
  check_threads(threads, "--threads");
  if (threads <= 0) threads = int(sysconf(_SC_NPROCESSORS_ONLN));
  const fs::path file = cache_file(threads);
  // Figures measured while other processes hold the cores are too low. They are cached marked
  // as such (measured_busy), reused while the machine is still busy, and measured again by the
  // first run that finds it quiet.
  double load = -1;
  {
    std::ifstream la("/proc/loadavg");
    la >> load;
  }
  const long cores = sysconf(_SC_NPROCESSORS_ONLN);
  const bool busy = load >= 0 && cores > 0 && load > 0.5 * double(cores);
  if (!reprobe && fs::exists(file)) {
    try {
      std::ifstream in(file);
      const nlohmann::json cached = nlohmann::json::parse(in);
      const bool cached_busy =
          cached.contains("info") && cached["info"].value("measured_busy", false);
      if (cached_busy && !busy)
        throw std::runtime_error("measured while busy; the machine is quiet now");
      HostCeilings h = from_json(cached);
      h.info["cached"] = true;
      h.info["cache_file"] = file.string();
      return h;
    } catch (const std::exception&) {
      // A damaged cache is measured again.
    }
  }
  if (!quiet)
    std::fprintf(stderr, "latprof: measuring this machine's ceilings (%d threads; cached in %s)\n",
                 threads, file.c_str());
  constexpr size_t kStreamBytes = size_t(1) << 30;  // 1 GiB: far past any last-level cache
  constexpr int kReps = 5;
  const HostProbe probe = probe_host(threads, kStreamBytes, kReps);

  HostCeilings h;
  Ceilings& c = h.ceilings;
  c.device = host_cpu_name();
  c.source = "measured by latprof's built-in probe";
  c.mem_bw_bytes_per_s = probe.read_bandwidth.best;
  c.matmul_flops_per_s = probe.fp32_fma_peak.best;
  c.vector_flops_per_s = probe.fp32_fma_peak.best;
  c.int8_ops_per_s = probe.int8_peak.best;
  c.bf16_flops_per_s = probe.bf16_peak.best;
  c.int16_ops_per_s = probe.int16_peak.best;
  // Where the GEMM runs INT8 weights on the AMX tiles, the matmul roofs are the tiles': W8A8 at
  // the tile peak, W8A16 at half of it (two tile products, hi and lo bytes, per int16
  // activation; gemm_amx_avx512.cpp). The GEMVs of a decode step still use the vector units, far
  // below either roof's ridge.
  if (probe.amx_int8_peak.best > 0) {
    c.int8_ops_per_s = std::max(c.int8_ops_per_s, probe.amx_int8_peak.best);
    c.int16_ops_per_s = std::max(c.int16_ops_per_s, 0.5 * probe.amx_int8_peak.best);
  }
  // FP16 weights on the AMX-BF16 tiles: four tile products (hi and lo bf16 halves of each fp16
  // weight and activation) per fp16 product (gemm_f16_amx_bf16_avx512.cpp).
  c.f16_tile_flops_per_s = 0.25 * probe.amx_bf16_peak.best;
  c.memory_bytes = host_memory_total_bytes();
  c.cache_bytes = llc_bytes();
  h.triad_bytes_per_s = probe.triad_bandwidth.best;
  auto probe_json = [](const HostProbeFigure& p, const char* what, const char* method) {
    return nlohmann::json{{"best", p.best},
                          {"median", p.median},
                          {"repetitions", p.repetitions},
                          {"work_per_repetition", p.work_per_repetition},
                          {"unit", what},
                          {"method", method}};
  };
  h.info = {
      {"method", "built-in probe: best of " + std::to_string(kReps) + " repetitions"},
      {"threads", threads},
      {"isa", probe.isa},
      {"measured_utc", utc_now()},
      {"probe_seconds", probe.seconds},
      {"cached", false},
      {"cache_file", file.string()},
      {"read_bandwidth",
       probe_json(probe.read_bandwidth, "bytes/s", "sum-reduction over a 1 GiB buffer")},
      {"triad_bandwidth",
       probe_json(probe.triad_bandwidth, "bytes/s", "STREAM triad a=b+s*c, 3 arrays counted")},
      {"fp32_fma_peak",
       probe_json(probe.fp32_fma_peak, "FLOP/s", "independent FMA chains in registers")},
      {"int8_peak",
       probe_json(probe.int8_peak, "op/s", "int8 dot-product chains (VNNI when present)")},
      {"bf16_peak",
       probe_json(probe.bf16_peak, "FLOP/s", "bf16 dot-product chains (vdpbf16ps; 0: none)")},
      {"int16_peak",
       probe_json(probe.int16_peak, "op/s", "int16 dot-product chains (vpdpwssd; 0: none)")},
      {"amx_int8_peak",
       probe_json(probe.amx_int8_peak, "op/s",
                  "AMX-INT8 tile products in registers (tdpbssd; 0: the GEMM does not use "
                  "them); the INT8 roof, and half of it the W8A16 roof, where the GEMM does")},
      {"amx_bf16_peak",
       probe_json(probe.amx_bf16_peak, "FLOP/s",
                  "AMX-BF16 tile products in registers (tdpbf16ps; 0: the GEMM does not use "
                  "them); a quarter of it the FP16 matmuls' roof (f16_tile_flops_per_s) where "
                  "the GEMM does")},
      {"cache_bytes_source", "/sys/devices/system/cpu/cpu0/cache"},
      {"load_average_1min_before", load},
  };
  h.info["measured_busy"] = busy;
  try {
    fs::create_directories(file.parent_path());
    nlohmann::json j = {{"ceilings", ceilings_to_json(c)},
                        {"info", h.info},
                        {"triad_bytes_per_s", h.triad_bytes_per_s}};
    write_file_atomic(file.string(), j.dump(2));
  } catch (const std::exception&) {
    h.info["cache_file"] = nullptr;  // not cached; still measured
  }
  return h;
}

double read_bandwidth_now(int threads) {
  if (threads <= 0) threads = int(sysconf(_SC_NPROCESSORS_ONLN));
  const size_t bytes = std::max<size_t>(size_t(256) << 20, size_t(8 * llc_bytes()));
  return probe_host_read_bandwidth(threads, bytes, 3).best;
}

double core_to_core_ns_now(int threads) {
  // Only where the two threads can run at once: sharing a core they would hand the line over
  // once per scheduler tick.
  cpu_set_t allowed;
  const int cpus = sched_getaffinity(0, sizeof allowed, &allowed) == 0
                       ? CPU_COUNT(&allowed)
                       : int(sysconf(_SC_NPROCESSORS_ONLN));
  if (threads <= 0) threads = cpus;
  return threads < 2 || threads > cpus ? 0.0 : probe_host_core_to_core(threads, 5).median;
}

}  // namespace latprof
