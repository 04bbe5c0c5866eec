#pragma once
// The hardware database: one JSON file per device in models/hardware/ (embedded in the binary),
// each with the datasheet it comes from. `--hw NAME` picks one, `--hw-file FILE` loads a user's.
// A file with "measure": true (cpu-local) holds no figures: it means "probe this machine".
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <vector>

#include "roofline/ceilings.hpp"

namespace latprof {

struct HardwareSpec {
  std::string name;         // "a100-80gb-sxm"
  std::string description;  // "NVIDIA A100 80GB SXM4"
  std::string kind;         // "gpu" | "cpu"
  std::string source;       // datasheet title and URL, or "measured ..."
  std::string notes;
  std::string origin;                     // "models/hardware/h100-sxm.json" or the user's path
  bool measure = false;                   // true: no figures, probe this machine (cpu-local)
  std::vector<std::string> device_names;  // substrings of the name a backend reports

  // Dense peaks. 0 means "the part has none" (written as null in the file).
  double fp16_tensor_flops_per_s = 0;
  double bf16_tensor_flops_per_s = 0;
  double fp8_tensor_flops_per_s = 0;
  double int8_tensor_ops_per_s = 0;
  double fp32_flops_per_s = 0;
  double mem_bw_bytes_per_s = 0;
  double memory_bytes = 0;
  double l2_bytes = 0;  // last-level cache (L3 on a CPU)
  std::string interconnect;
  double interconnect_bytes_per_s = 0;  // 0: none (null in the file)
  double pcie_bytes_per_s = 0;          // 0: not stated
};

// The range every hardware figure must lie in (FLOP/s, OP/s, bytes/s, bytes): far outside any real
// part on both sides, and small enough that charts and sums of them stay finite.
inline constexpr double kMinHardwareFigure = 1e3;
inline constexpr double kMaxHardwareFigure = 1e19;

// Validates every field: a missing figure, or a non-positive one, is a UsageError naming the
// field and the file. fp8/int8/interconnect/pcie may be null (the part has none).
HardwareSpec hardware_from_json(const nlohmann::json& j, const std::string& origin);
nlohmann::json hardware_to_json(const HardwareSpec& h);

// Built-in devices, in file-name order.
const std::vector<HardwareSpec>& builtin_hardware();
// A built-in name ("local" is an alias of "cpu-local"); throws UsageError listing the names.
HardwareSpec find_hardware(const std::string& name);
// A user's hardware file; throws UsageError on a missing file, bad JSON or a bad field.
HardwareSpec load_hardware_file(const std::string& path);
// The built-in device whose device_names match a backend's device name (e.g. "NVIDIA H200").
std::optional<HardwareSpec> match_hardware(const std::string& device_name);

// The roofs the roofline uses: fp16 tensor peak for matmuls, fp32 for elementwise ops, the INT8
// tensor peak for W8A8, HBM bandwidth, capacity and L2. Throws UsageError for a "measure" entry.
Ceilings to_ceilings(const HardwareSpec& h);

// The local machine's measured ceilings, for the "cpu-local" entry. The roofline depends only on
// model shapes and hardware data, so the program registers how to measure them (the CLI: the host
// probe of the CPU backend) before any command runs; without one, "cpu-local" is refused.
using LocalCeilingsFn = Ceilings (*)();
void set_local_ceilings_source(LocalCeilingsFn fn);

// Resolves --hw / --hw-file for a command: exactly one of them; "cpu-local"/"local" measures this
// machine (set_local_ceilings_source). `spec_out` (optional) receives the entry.
Ceilings resolve_ceilings(const std::string& hw, const std::string& hw_file,
                          HardwareSpec* spec_out = nullptr);

}  // namespace latprof
