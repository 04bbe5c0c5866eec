#include "roofline/hardware.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/embedded.hpp"
#include "core/error.hpp"
#include "core/input_file.hpp"

namespace latprof {

namespace {

// A figure that must be present and positive; `nullable`: an explicit null means "none".
double figure(const nlohmann::json& j, const char* key, const std::string& origin, bool nullable) {
  if (!j.contains(key))
    usage_error(origin + ": hardware field '" + key + "' is missing" +
                (nullable ? " (write null when the part has none)" : ""));
  const auto& v = j[key];
  if (v.is_null()) {
    if (nullable) return 0;
    usage_error(origin + ": hardware field '" + key + "' is null; it must be a positive number");
  }
  if (!v.is_number()) usage_error(origin + ": hardware field '" + key + "' is not a number");
  const double d = v.get<double>();
  if (!std::isfinite(d) || d <= 0)
    usage_error(origin + ": hardware field '" + key + "' is " + v.dump() +
                "; it must be a positive number");
  if (d < kMinHardwareFigure || d > kMaxHardwareFigure)
    usage_error(origin + ": hardware field '" + key + "' is " + v.dump() +
                ", outside the plausible range 1e3 to 1e19 (FLOP/s, bytes/s or bytes)");
  return d;
}

std::string text(const nlohmann::json& j, const char* key, const std::string& origin,
                 bool required) {
  if (!j.contains(key) || j[key].is_null()) {
    if (required) usage_error(origin + ": hardware field '" + key + "' is missing");
    return "";
  }
  if (!j[key].is_string()) usage_error(origin + ": hardware field '" + key + "' is not a string");
  const std::string s = j[key].get<std::string>();
  if (required && s.empty()) usage_error(origin + ": hardware field '" + key + "' is empty");
  return s;
}

nlohmann::json or_null(double v) {
  return v > 0 ? nlohmann::json(v) : nlohmann::json();
}

}  // namespace

HardwareSpec hardware_from_json(const nlohmann::json& j, const std::string& origin) {
  if (!j.is_object()) usage_error(origin + ": a hardware file must hold a JSON object");
  HardwareSpec h;
  h.origin = origin;
  h.name = text(j, "name", origin, true);
  h.description = text(j, "description", origin, true);
  h.source = text(j, "source", origin, true);
  h.kind = text(j, "kind", origin, false);
  if (h.kind.empty()) h.kind = "gpu";
  if (h.kind != "gpu" && h.kind != "cpu")
    usage_error(origin + ": hardware field 'kind' is '" + h.kind + "'; use gpu or cpu");
  h.notes = text(j, "notes", origin, false);
  if (j.contains("device_names")) {
    if (!j["device_names"].is_array())
      usage_error(origin + ": hardware field 'device_names' must be a list of strings");
    for (const auto& n : j["device_names"]) {
      if (!n.is_string())
        usage_error(origin + ": hardware field 'device_names' must be a list of strings");
      h.device_names.push_back(n.get<std::string>());
    }
  }
  if (j.contains("measure")) {
    if (!j["measure"].is_boolean())
      usage_error(origin + ": hardware field 'measure' must be true or false");
    h.measure = j["measure"].get<bool>();
  }
  if (h.measure) return h;  // figures come from the probe at run time
  h.fp16_tensor_flops_per_s = figure(j, "fp16_tensor_flops_per_s", origin, false);
  h.bf16_tensor_flops_per_s = figure(j, "bf16_tensor_flops_per_s", origin, true);
  h.fp8_tensor_flops_per_s = figure(j, "fp8_tensor_flops_per_s", origin, true);
  h.int8_tensor_ops_per_s = figure(j, "int8_tensor_ops_per_s", origin, true);
  h.fp32_flops_per_s = figure(j, "fp32_flops_per_s", origin, false);
  h.mem_bw_bytes_per_s = figure(j, "mem_bw_bytes_per_s", origin, false);
  h.memory_bytes = figure(j, "memory_bytes", origin, false);
  h.l2_bytes = figure(j, "l2_bytes", origin, false);
  h.interconnect = text(j, "interconnect", origin, false);
  h.interconnect_bytes_per_s = figure(j, "interconnect_bytes_per_s", origin, true);
  h.pcie_bytes_per_s =
      j.contains("pcie_bytes_per_s") ? figure(j, "pcie_bytes_per_s", origin, true) : 0;
  return h;
}

nlohmann::json hardware_to_json(const HardwareSpec& h) {
  nlohmann::json j = {{"name", h.name},
                      {"description", h.description},
                      {"kind", h.kind},
                      {"source", h.source},
                      {"device_names", h.device_names}};
  if (h.measure) {
    j["measure"] = true;
  } else {
    j["fp16_tensor_flops_per_s"] = h.fp16_tensor_flops_per_s;
    j["bf16_tensor_flops_per_s"] = or_null(h.bf16_tensor_flops_per_s);
    j["fp8_tensor_flops_per_s"] = or_null(h.fp8_tensor_flops_per_s);
    j["int8_tensor_ops_per_s"] = or_null(h.int8_tensor_ops_per_s);
    j["fp32_flops_per_s"] = h.fp32_flops_per_s;
    j["mem_bw_bytes_per_s"] = h.mem_bw_bytes_per_s;
    j["memory_bytes"] = h.memory_bytes;
    j["l2_bytes"] = h.l2_bytes;
    j["interconnect"] = h.interconnect;
    j["interconnect_bytes_per_s"] = or_null(h.interconnect_bytes_per_s);
    j["pcie_bytes_per_s"] = or_null(h.pcie_bytes_per_s);
  }
  j["notes"] = h.notes;
  return j;
}

const std::vector<HardwareSpec>& builtin_hardware() {
  static const std::vector<HardwareSpec> all = [] {
    std::vector<HardwareSpec> v;
    for (const auto& f : embedded::hardware())
      v.push_back(
          hardware_from_json(nlohmann::json::parse(f.text), "models/hardware/" + f.name + ".json"));
    std::sort(v.begin(), v.end(),
              [](const HardwareSpec& a, const HardwareSpec& b) { return a.name < b.name; });
    return v;
  }();
  return all;
}

HardwareSpec find_hardware(const std::string& name) {
  const std::string want = name == "local" ? "cpu-local" : name;
  for (const auto& h : builtin_hardware())
    if (h.name == want) return h;
  std::ostringstream names;
  for (const auto& h : builtin_hardware()) names << (names.tellp() ? ", " : "") << h.name;
  usage_error("unknown device '" + name + "' for --hw; known devices: " + names.str() +
              " (or --hw-file FILE); see 'latprof hw --list'");
}

HardwareSpec load_hardware_file(const std::string& path) {
  check_input_path(path, "--hw-file", false, /*allow_fifo=*/true);
  const std::string text = read_input_file(path, "--hw-file", size_t(1) << 20);
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    usage_error("--hw-file " + path + ": not valid JSON: " + e.what());
  }
  return hardware_from_json(j, path);
}

std::optional<HardwareSpec> match_hardware(const std::string& device_name) {
  for (const auto& h : builtin_hardware())
    for (const auto& n : h.device_names)
      if (!n.empty() && device_name.find(n) != std::string::npos) return h;
  return std::nullopt;
}

Ceilings to_ceilings(const HardwareSpec& h) {
  if (h.measure)
    usage_error("hardware '" + h.name + "' is measured on this machine; it has no stored figures");
  Ceilings c;
  c.device = h.description;
  c.source = "datasheet: " + h.source;
  c.mem_bw_bytes_per_s = h.mem_bw_bytes_per_s;
  c.matmul_flops_per_s = h.fp16_tensor_flops_per_s;
  c.vector_flops_per_s = h.fp32_flops_per_s;
  c.int8_ops_per_s = h.int8_tensor_ops_per_s;
  c.memory_bytes = h.memory_bytes;
  c.cache_bytes = h.l2_bytes;
  return c;
}

namespace {
LocalCeilingsFn g_local_ceilings = nullptr;
}  // namespace

void set_local_ceilings_source(LocalCeilingsFn fn) {
  g_local_ceilings = fn;
}

Ceilings resolve_ceilings(const std::string& hw, const std::string& hw_file,
                          HardwareSpec* spec_out) {
  if (!hw.empty() && !hw_file.empty()) usage_error("give either --hw or --hw-file, not both");
  if (hw.empty() && hw_file.empty())
    usage_error("no device: give --hw NAME (see 'latprof hw --list') or --hw-file FILE");
  const HardwareSpec h = hw_file.empty() ? find_hardware(hw) : load_hardware_file(hw_file);
  if (spec_out) *spec_out = h;
  if (!h.measure) return to_ceilings(h);
  // cpu-local: this machine's probe (cached), with all cores.
  if (!g_local_ceilings)
    usage_error("hardware '" + h.name +
                "' is measured on this machine, which this program cannot do");
  return g_local_ceilings();
}

}  // namespace latprof
