// The host probe (backend/host_probe.hpp) on the CPU backend's kernels.
#include "backend/host_probe.hpp"

#include <omp.h>

#include <chrono>

#include "kernels/cpu/kernels.hpp"

namespace latprof {

namespace {

HostProbeFigure figure(const cpu::ProbeResult& p) {
  return {p.value, p.median, p.repetitions, p.bytes_or_ops};
}

}  // namespace

HostProbe probe_host(int threads, size_t stream_bytes, int repetitions) {
  const int saved = omp_get_max_threads();
  omp_set_num_threads(threads);
  HostProbe h;
  const auto t0 = std::chrono::steady_clock::now();
  h.read_bandwidth = figure(cpu::probe_read_bandwidth(stream_bytes, repetitions));
  h.triad_bandwidth = figure(cpu::probe_triad_bandwidth(stream_bytes / 2, repetitions));
  h.fp32_fma_peak = figure(cpu::probe_fma_peak(repetitions));
  h.int8_peak = figure(cpu::probe_int8_peak(repetitions));
  h.bf16_peak = figure(cpu::probe_bf16_peak(repetitions));
  h.int16_peak = figure(cpu::probe_int16_peak(repetitions));
  h.amx_int8_peak = figure(cpu::probe_amx_int8_peak(repetitions));
  h.amx_bf16_peak = figure(cpu::probe_amx_bf16_peak(repetitions));
  h.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  omp_set_num_threads(saved);
  h.isa = cpu::isa_name(cpu::active_isa());
  return h;
}

bool host_gemm_uses_amx() {
  return cpu::amx_int8_active() || cpu::amx_f16_active();
}

HostProbeFigure probe_host_read_bandwidth(int threads, size_t stream_bytes, int repetitions) {
  const int saved = omp_get_max_threads();
  omp_set_num_threads(threads);
  const HostProbeFigure f = figure(cpu::probe_read_bandwidth(stream_bytes, repetitions));
  omp_set_num_threads(saved);
  return f;
}

HostProbeFigure probe_host_core_to_core(int threads, int repetitions) {
  const int saved = omp_get_max_threads();
  omp_set_num_threads(threads);
  const HostProbeFigure f = figure(cpu::probe_core_to_core(repetitions));
  omp_set_num_threads(saved);
  return f;
}

}  // namespace latprof
