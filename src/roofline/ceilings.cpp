#include "roofline/ceilings.hpp"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "core/error.hpp"

namespace latprof {

double Ceilings::matmul_peak(const Precision& p) const {
  if (p.weights == WeightFormat::int8_w8a8 && int8_ops_per_s > 0) return int8_ops_per_s;
  if (p.weights == WeightFormat::int8_w8a16 && int16_ops_per_s > 0) return int16_ops_per_s;
  if (p.weights == WeightFormat::f16 && f16_tile_flops_per_s > 0)
    return std::max(f16_tile_flops_per_s, matmul_flops_per_s);
  return matmul_flops_per_s;
}

double Ceilings::peak_for(Op op, const Precision& p) const {
  if (op_is_matmul(op) && op != Op::attention) return matmul_peak(p);
  // bf16 data: the better of the bf16 dot products and FP32 multiply-adds on the widened values
  // (on the Intel Xeon of reports/cpu-kernels.md vdpbf16ps does half the FMAs' multiply-adds).
  if (op == Op::attention) {
    if (p.kv_bf16) return std::max(bf16_flops_per_s, matmul_flops_per_s);
    // An fp16 cache where the AMX-BF16 tiles run the FP16 GEMM runs its prefill attention there
    // too (kernels/cpu/attention_amx_bf16_avx512.cpp, head sizes that are multiples of 32): five
    // tile products a product (Q and P in three bf16, K and V in two), 4/5 of the GEMM's roof.
    if (p.kv_bytes == 2 && f16_tile_flops_per_s > 0)  // fp16 (bf16 above)
      return std::max(0.8 * f16_tile_flops_per_s, matmul_flops_per_s);
    return matmul_flops_per_s;
  }
  return vector_flops_per_s > 0 ? vector_flops_per_s : matmul_flops_per_s;
}

double Ceilings::ridge(const Precision& p) const {
  return mem_bw_bytes_per_s > 0 ? matmul_peak(p) / mem_bw_bytes_per_s : 0;
}

nlohmann::json ceilings_to_json(const Ceilings& c) {
  return {{"device", c.device},
          {"source", c.source},
          {"mem_bw_bytes_per_s", c.mem_bw_bytes_per_s},
          {"matmul_flops_per_s", c.matmul_flops_per_s},
          {"vector_flops_per_s", c.vector_flops_per_s},
          {"int8_ops_per_s", c.int8_ops_per_s},
          {"bf16_flops_per_s", c.bf16_flops_per_s},
          {"int16_ops_per_s", c.int16_ops_per_s},
          {"f16_tile_flops_per_s", c.f16_tile_flops_per_s},
          {"memory_bytes", c.memory_bytes},
          {"cache_bytes", c.cache_bytes}};
}

Ceilings ceilings_from_json(const nlohmann::json& j, const std::string& origin) {
  Ceilings c;
  auto num = [&](const char* k, bool required) {
    if (!j.contains(k) || j[k].is_null()) {
      if (required) usage_error(origin + ": ceilings field '" + k + "' is missing");
      return 0.0;
    }
    if (!j[k].is_number()) usage_error(origin + ": ceilings field '" + k + "' is not a number");
    const double v = j[k].get<double>();
    if (required && !(v > 0)) usage_error(origin + ": ceilings field '" + k + "' must be positive");
    // Measured or datasheet figures; anything beyond 1e19 (or below 0) is not a real device.
    if (!(v >= 0 && v <= 1e19))
      usage_error(origin + ": ceilings field '" + k + "' is " + j[k].dump() +
                  ", outside 0 to 1e19");
    return v;
  };
  // Absent or null: the default (as the report's reader reads a null string).
  auto text = [&](const char* k, const std::string& fallback) {
    if (!j.contains(k) || j[k].is_null()) return fallback;
    if (!j[k].is_string()) usage_error(origin + ": ceilings field '" + k + "' is not a string");
    return j[k].get<std::string>();
  };
  c.device = text("device", "unknown");
  c.source = text("source", origin);
  c.mem_bw_bytes_per_s = num("mem_bw_bytes_per_s", true);
  c.matmul_flops_per_s = num("matmul_flops_per_s", true);
  c.vector_flops_per_s = num("vector_flops_per_s", false);
  c.int8_ops_per_s = num("int8_ops_per_s", false);
  c.bf16_flops_per_s = num("bf16_flops_per_s", false);
  c.int16_ops_per_s = num("int16_ops_per_s", false);
  c.f16_tile_flops_per_s = num("f16_tile_flops_per_s", false);
  c.memory_bytes = num("memory_bytes", false);
  c.cache_bytes = num("cache_bytes", false);
  return c;
}

RooflinePoint roofline_point(const Cost& c, double peak_flops, double bw) {
  RooflinePoint r;
  r.compute_ms = peak_flops > 0 ? c.flops / peak_flops * 1e3 : 0;
  r.memory_ms = bw > 0 ? c.bytes() / bw * 1e3 : 0;
  r.floor_ms = std::max(r.compute_ms, r.memory_ms);
  r.bound = r.compute_ms >= r.memory_ms ? "compute" : "memory";
  return r;
}

RooflinePoint roofline_ops(const OpCosts& ops, const Ceilings& c, const Precision& p) {
  RooflinePoint sum;
  for (int i = 0; i < kNumOps; ++i) {
    const RooflinePoint r =
        roofline_point(ops[i], c.peak_for(static_cast<Op>(i), p), c.mem_bw_bytes_per_s);
    sum.floor_ms += r.floor_ms;
    sum.compute_ms += r.compute_ms;
    sum.memory_ms += r.memory_ms;
  }
  sum.bound = sum.compute_ms >= sum.memory_ms ? "compute" : "memory";
  return sum;
}

}  // namespace latprof
