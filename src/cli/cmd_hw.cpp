// latprof hw: the backends compiled in and the devices seen, this machine's measured ceilings
// next to datasheet values when the database knows the part, and the hardware database.
#include <unistd.h>

#include <cstdio>
#include <ctime>
#include <memory>
#include <nlohmann/json.hpp>

#include "backend/backend.hpp"
#include "cli/commands.hpp"
#include "core/atomic_file.hpp"
#include "core/checked.hpp"
#include "core/error.hpp"
#include "core/format.hpp"
#include "roofline/hardware.hpp"
#include "runner/host_ceilings.hpp"

namespace latprof::cli {

namespace {

struct HwArgs {
  bool list = false, reprobe = false, quiet = false;
  std::string json, save;
  int threads = 0;
};

std::string rate_or(double v, const char* unit, const char* none = "none") {
  return v > 0 ? fmt_rate(v, unit) : none;
}

int list_database() {
  std::printf("%-15s %-30s %12s %12s %12s %12s %10s %9s %9s %12s\n", "name", "description",
              "fp16 tensor", "int8 tensor", "fp8 tensor", "fp32", "memory bw", "memory", "L2",
              "interconnect");
  for (const auto& h : builtin_hardware()) {
    if (h.measure) {
      std::printf("%-15s %-30s %s\n", h.name.c_str(), h.description.substr(0, 30).c_str(),
                  "(measured on this machine at run time)");
      continue;
    }
    std::printf("%-15s %-30s %12s %12s %12s %12s %10s %9s %9s %12s\n", h.name.c_str(),
                h.description.substr(0, 30).c_str(),
                fmt_rate(h.fp16_tensor_flops_per_s, "FLOP/s").c_str(),
                rate_or(h.int8_tensor_ops_per_s, "OP/s").c_str(),
                rate_or(h.fp8_tensor_flops_per_s, "FLOP/s").c_str(),
                fmt_rate(h.fp32_flops_per_s, "FLOP/s").c_str(),
                fmt_rate(h.mem_bw_bytes_per_s, "B/s").c_str(), fmt_bytes(h.memory_bytes).c_str(),
                fmt_bytes(h.l2_bytes).c_str(), rate_or(h.interconnect_bytes_per_s, "B/s").c_str());
  }
  std::printf("\nDense peaks (no sparsity); GeForce FP16 with FP32 accumulate. Sources:\n");
  for (const auto& h : builtin_hardware())
    std::printf("  %-15s %s\n", h.name.c_str(), h.source.c_str());
  return 0;
}

void row(const char* what, double measured, const char* unit, double datasheet) {
  std::printf("  %-26s %14s %14s %10s\n", what, rate_or(measured, unit, "-").c_str(),
              datasheet > 0 ? fmt_rate(datasheet, unit).c_str() : "unknown",
              measured > 0 && datasheet > 0 ? fmt_pct(measured / datasheet).c_str() : "");
}

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

}  // namespace

CommandFn add_hw_command(CLI::App& app) {
  auto a = std::make_shared<HwArgs>();
  CLI::App* sub = app.add_subcommand(
      "hw",
      "Backends and devices, this machine's measured ceilings next to datasheet values, "
      "and the hardware database (--list)");
  sub->add_flag("--list", a->list, "List the hardware database (latprof roofline --hw NAME)");
  sub->add_flag("--reprobe", a->reprobe, "Measure again instead of using the cached figures");
  sub->add_option("--threads,-t", a->threads, "CPU threads for the probe (0: all cores)")
      ->capture_default_str();
  sub->add_option("--json", a->json, "Write the measured ceilings as JSON");
  sub->add_option("--save", a->save,
                  "Write a hardware file of the measured ceilings, usable "
                  "with --hw-file");
  sub->add_flag("--quiet,-q", a->quiet, "No progress messages on stderr");
  return [a]() -> int {
    check_threads(a->threads, "--threads");
    if (a->list) return list_database();
    if (!a->json.empty()) check_writable(a->json, "--json");
    if (!a->save.empty()) check_writable(a->save, "--save");
    check_distinct_outputs({{"--json", a->json}, {"--save", a->save}});

    std::printf("backends:\n");
    const std::vector<std::string> backends = describe_backends();
    for (const auto& b : backends) std::printf("  %s\n", b.c_str());

    // ---- the host CPU
    const HostCeilings h = host_ceilings(a->threads, a->reprobe, a->quiet);
    const Ceilings& c = h.ceilings;
    auto cpu_ds = match_hardware(c.device);
    if (cpu_ds && cpu_ds->kind != "cpu") cpu_ds.reset();
    const Ceilings ds = cpu_ds && !cpu_ds->measure ? to_ceilings(*cpu_ds) : Ceilings{};
    std::printf("\nCPU: %s (%s%s)\n", c.device.c_str(), c.source.c_str(),
                h.info.value("cached", false) ? ", cached; --reprobe to measure again" : "");
    std::printf("  %-26s %14s %14s %10s\n", "", "measured", "datasheet", "of sheet");
    row("memory read bandwidth", c.mem_bw_bytes_per_s, "B/s", ds.mem_bw_bytes_per_s);
    row("memory triad bandwidth", h.triad_bytes_per_s, "B/s", ds.mem_bw_bytes_per_s);
    row("FP32 FMA peak", c.vector_flops_per_s, "FLOP/s", ds.vector_flops_per_s);
    // Where the GEMM takes INT8 weights on the AMX tiles, the INT8 and INT16 roofs are the tiles'
    // (host_ceilings.cpp): say so beside the figures.
    const bool amx =
        h.info.contains("amx_int8_peak") && h.info["amx_int8_peak"].value("best", 0.0) > 0;
    row(amx ? "INT8 peak (AMX tiles)" : "INT8 dot-product peak", c.int8_ops_per_s, "OP/s",
        ds.int8_ops_per_s);
    if (c.int16_ops_per_s > 0)
      row(amx ? "INT16 peak (AMX, hi + lo)" : "INT16 dot-product peak", c.int16_ops_per_s, "OP/s",
          0);
    if (c.bf16_flops_per_s > 0) row("BF16 dot-product peak", c.bf16_flops_per_s, "FLOP/s", 0);
    if (c.f16_tile_flops_per_s > 0)
      row("FP16 peak (AMX-BF16, 4x)", c.f16_tile_flops_per_s, "FLOP/s", 0);
    std::printf("  %-26s %14s\n  %-26s %14s\n", "memory", fmt_bytes(c.memory_bytes).c_str(),
                "last-level cache", fmt_bytes(c.cache_bytes).c_str());
    // Not cached: on a VM it changes as the host moves the threads between core complexes.
    const double core_to_core_ns = core_to_core_ns_now(a->threads);
    if (core_to_core_ns > 0)
      std::printf(
          "  %-26s %11.0f ns  (measured now, not cached: one cache line's trip between two "
          "threads' cores)\n",
          "core-to-core latency", core_to_core_ns);
    if (!cpu_ds)
      std::printf("  (no datasheet for this CPU in the database: reported as unknown)\n");

    // ---- a GPU, through its backend
    nlohmann::json gpu;  // null when there is none
    HardwareSpec save_spec;
    std::string why;
    std::unique_ptr<Backend> be;
    try {
      BackendOptions opt;
      opt.kind = "auto";
      opt.threads = a->threads;
      be = create_backend(opt, &why);
    } catch (const UsageError& e) {
      why = e.what();
    }
    if (be && be->device().backend != "cpu") {
      const DeviceInfo d = be->device();
      std::printf("\nGPU: %s (%s backend; %s)\n", d.name.c_str(), d.backend.c_str(),
                  d.details.c_str());
      const std::string text = be->measure_ceilings_json();
      const auto gds = match_hardware(d.name);
      const Ceilings gs = gds ? to_ceilings(*gds) : Ceilings{};
      if (!text.empty()) {
        gpu = nlohmann::json::parse(text);
        gpu["device"] = d.name;
        gpu["memory_bytes"] = d.memory_total_bytes;
        std::printf("  %-26s %14s %14s %10s\n", "", "measured",
                    gds ? gds->name.c_str() : "datasheet", "of sheet");
        row("device copy bandwidth", gpu.value("memory_bandwidth_bytes_per_s", 0.0), "B/s",
            gs.mem_bw_bytes_per_s);
        row("FP16 GEMM (tensor)", gpu.value("fp16_flops_per_s", 0.0), "FLOP/s",
            gs.matmul_flops_per_s);
        row("INT8 GEMM (tensor)", gpu.value("int8_ops_per_s", 0.0), "OP/s", gs.int8_ops_per_s);
        row("FP32", gpu.value("fp32_flops_per_s", 0.0), "FLOP/s", gs.vector_flops_per_s);
        std::printf("  %-26s %14s %14s\n", "memory", fmt_bytes(d.memory_total_bytes).c_str(),
                    gds ? fmt_bytes(gs.memory_bytes).c_str() : "unknown");
        if (gds) gpu["datasheet"] = hardware_to_json(*gds);
      } else {
        std::printf("  the backend measured no ceilings\n");
      }
    } else if (!why.empty()) {
      std::printf("\nGPU: none used (%s)\n", why.c_str());
    }

    // ---- the hardware file of what was measured (GPU when there is one, else the CPU)
    char host[256] = "host";
    gethostname(host, sizeof host - 1);
    if (!gpu.is_null() && gpu.value("memory_bandwidth_bytes_per_s", 0.0) > 0) {
      save_spec.name = "measured-gpu";
      save_spec.description = gpu.value("device", std::string("GPU"));
      save_spec.kind = "gpu";
      save_spec.mem_bw_bytes_per_s = gpu.value("memory_bandwidth_bytes_per_s", 0.0);
      save_spec.fp16_tensor_flops_per_s = gpu.value("fp16_flops_per_s", 0.0);
      save_spec.int8_tensor_ops_per_s = gpu.value("int8_ops_per_s", 0.0);
      save_spec.fp32_flops_per_s = gpu.value("fp32_flops_per_s", 0.0);
      save_spec.memory_bytes = gpu.value("memory_bytes", 0.0);
      save_spec.l2_bytes = gpu.value("l2_bytes", 0.0);
    } else {
      save_spec.name = "measured-cpu";
      save_spec.description = c.device;
      save_spec.kind = "cpu";
      save_spec.mem_bw_bytes_per_s = c.mem_bw_bytes_per_s;
      save_spec.fp16_tensor_flops_per_s = c.matmul_flops_per_s;  // the kernels' fp32 FMA peak
      save_spec.int8_tensor_ops_per_s = c.int8_ops_per_s;
      save_spec.fp32_flops_per_s = c.vector_flops_per_s;
      save_spec.memory_bytes = c.memory_bytes;
      save_spec.l2_bytes = c.cache_bytes;
    }
    save_spec.source = "measured by latprof hw on " + std::string(host) + " at " + utc_now();
    save_spec.notes = save_spec.kind == "cpu"
                          ? "fp16_tensor_flops_per_s holds the FP32 FMA peak the CPU kernels "
                            "run their matmuls at; l2_bytes holds the last-level cache"
                          : "measured by the GPU backend's probe (copy bandwidth, cuBLAS GEMM)";
    if (!a->json.empty()) {
      nlohmann::json j = {{"backends", backends},
                          {"host",
                           {{"ceilings", ceilings_to_json(c)},
                            {"triad_bytes_per_s", h.triad_bytes_per_s},
                            {"core_to_core_ns", core_to_core_ns},
                            {"info", h.info}}},
                          {"gpu", gpu},
                          {"hardware_file", hardware_to_json(save_spec)}};
      write_file_atomic(a->json, j.dump(2) + "\n");
      std::printf("\nwrote %s\n", a->json.c_str());
    }
    if (!a->save.empty()) {
      // validate what we write the same way --hw-file will read it
      const nlohmann::json hj = hardware_to_json(save_spec);
      hardware_from_json(hj, a->save);
      write_file_atomic(a->save, hj.dump(2) + "\n");
      std::printf("wrote %s (use it with --hw-file %s)\n", a->save.c_str(), a->save.c_str());
    }
    return 0;
  };
}

}  // namespace latprof::cli
