#pragma once
// Measured ceilings of the device: device-to-device copy bandwidth and cuBLASLt GEMM rates.
#include <cuda_runtime_api.h>

#include <string>

namespace latprof::cuda {
class LtGemm;
// JSON object {"memory_bandwidth_bytes_per_s", "fp16_flops_per_s", "int8_ops_per_s", "method",
// ...}; a rate that could not be measured is null with a "<name>_error" reason.
std::string measure_ceilings_json(LtGemm& gemm, cudaStream_t stream);
}  // namespace latprof::cuda
