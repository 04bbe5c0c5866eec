#pragma once
// The host CPU's ceilings probe: what the CPU backend's kernels (kernels/cpu/probe*.cpp) reach on
// this machine. It is the CPU's counterpart of Backend::measure_ceilings_json(), which a device
// backend answers from its device; a free function because the probe needs no backend instance
// (`latprof hw`, --hw cpu-local). Implemented by the CPU backend (backend/cpu/host_probe.cpp), so
// callers (runner/host_ceilings.cpp, which caches the figures) need nothing from kernels/.
#include <cstddef>
#include <string>

namespace latprof {

struct HostProbeFigure {
  double best = 0;    // the best of the repetitions
  double median = 0;  // median of the repetitions
  int repetitions = 0;
  double work_per_repetition = 0;  // working set (bytes) or operations per repetition
};

struct HostProbe {
  HostProbeFigure read_bandwidth;   // bytes/s, sum-reduction over stream_bytes
  HostProbeFigure triad_bandwidth;  // bytes/s, STREAM triad over stream_bytes / 2, 3 arrays
  HostProbeFigure fp32_fma_peak;    // FLOP/s, independent FMA chains in registers
  HostProbeFigure int8_peak;        // op/s, int8 dot-product chains (VNNI when present)
  HostProbeFigure bf16_peak;        // FLOP/s, bf16 dot-product chains (0: no AVX512-BF16)
  HostProbeFigure int16_peak;       // op/s, int16 dot-product chains (0: no AVX512-VNNI)
  HostProbeFigure amx_int8_peak;    // op/s, AMX-INT8 tile products (0: the GEMM does not use them)
  HostProbeFigure amx_bf16_peak;  // FLOP/s, AMX-BF16 tile products (0: the GEMM does not use them)
  std::string isa;                // the instruction set the kernels use
  double seconds = 0;             // the probe's wall time
};

// Whether the CPU backend's prefill GEMM multiplies INT8 or FP16 weights on the AMX tiles here
// (those matmuls' roofs are then the tiles'; the probe's cache is kept apart).
bool host_gemm_uses_amx();
// Runs the probe on `threads` OpenMP threads (restoring the previous count), each figure the best
// of `repetitions`.
HostProbe probe_host(int threads, size_t stream_bytes, int repetitions);
// Only the read bandwidth (bytes/s), on `threads` threads: the quick check a run makes just
// before and just after its timed part.
HostProbeFigure probe_host_read_bandwidth(int threads, size_t stream_bytes, int repetitions);
// One-way latency (ns) of a cache line between the first two of `threads` threads (best: the
// lowest repetition); all zero below 2 threads. Measured with the read bandwidth around a run: it
// is what the thread pool's forks, joins and barriers wait for, and it changes over time on a VM.
HostProbeFigure probe_host_core_to_core(int threads, int repetitions);

}  // namespace latprof
