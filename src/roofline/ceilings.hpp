#pragma once
// Hardware ceilings: the roofs of the roofline. Each figure carries where it came from.
#include <nlohmann/json_fwd.hpp>
#include <string>

#include "model/cost_model.hpp"

namespace latprof {

struct Ceilings {
  std::string device;               // "Intel(R) Xeon(R) Processor", "NVIDIA H200 SXM"
  std::string source;               // "measured: built-in probe ..." or a datasheet reference
  double mem_bw_bytes_per_s = 0;    // main-memory read bandwidth (DRAM / HBM)
  double matmul_flops_per_s = 0;    // dense peak for the matmul ops in fp16/bf16 (tensor cores);
                                    // on a CPU: the fp32 FMA peak the kernels run on
  double vector_flops_per_s = 0;    // peak for elementwise ops (fp32 FMA)
  double int8_ops_per_s = 0;        // dense INT8 peak (W8A8 matmuls); 0 when the part has none
  double bf16_flops_per_s = 0;      // CPU: the bf16 dot-product peak (vdpbf16ps), the attention's
                                    // roof on a bf16 KV cache; 0 when not measured or none
  double int16_ops_per_s = 0;       // CPU: the int16 dot-product peak (vpdpwssd), the W8A16
                                    // matmuls' roof where measured; 0 when not measured or none
  double f16_tile_flops_per_s = 0;  // CPU: the FP16 matmuls' roof where the GEMM runs them on the
                                    // AMX-BF16 tiles (a quarter of their peak: four bf16
                                    // products per fp16 one); 0 otherwise
  double memory_bytes = 0;          // capacity
  double cache_bytes = 0;           // last-level cache (L2 on a GPU, L3 on a CPU)

  // The compute roof for an op at a precision (attention on a bf16 KV cache: bf16_flops_per_s
  // where it is known; on an fp16 cache where the AMX-BF16 tiles run it, 4/5 of
  // f16_tile_flops_per_s).
  double peak_for(Op op, const Precision& p) const;
  // The matmul roof at a precision: the INT8 peak for W8A8 where the part has one, the int16
  // dot-product peak for W8A16 where it was measured (a CPU with VNNI), the better of the AMX
  // tiles' FP16 roof and the matmul peak for FP16 where the tiles run them, else the matmul (FP16 /
  // FP32 FMA) peak. MFU at every level (op, stage, step, request) divides by it.
  double matmul_peak(const Precision& p) const;
  // Intensity (FLOP/byte) where the roofs meet, for the matmul roof.
  double ridge(const Precision& p) const;
};

nlohmann::json ceilings_to_json(const Ceilings& c);
Ceilings ceilings_from_json(const nlohmann::json& j, const std::string& origin);

// Roofline verdict for one measured or predicted piece of work.
struct RooflinePoint {
  double floor_ms = 0;    // max(FLOPs / peak, bytes / bandwidth)
  double compute_ms = 0;  // FLOPs / peak
  double memory_ms = 0;   // bytes / bandwidth
  std::string bound;      // "compute" or "memory" (which floor is larger)
};
RooflinePoint roofline_point(const Cost& c, double peak_flops, double bw);
// Sums the floors of ops (each op bounded on its own roof).
RooflinePoint roofline_ops(const OpCosts& ops, const Ceilings& c, const Precision& p);

}  // namespace latprof
