// The C entry points of liblatprof_cuda.so (src/backend/cuda_module.hpp). Only these three symbols
// are exported; everything else in the module, cudart_static included, is hidden.
#include <cuda_runtime_api.h>

#include <cstdio>
#include <exception>

#include "backend/cuda/cuda_backend.hpp"
#include "backend/cuda_module.hpp"

#define LATPROF_EXPORT extern "C" __attribute__((visibility("default")))

namespace {

void write_reason(char* why, int why_len, const char* text) {
  if (why && why_len > 0) std::snprintf(why, size_t(why_len), "%s", text);
}

}  // namespace

LATPROF_EXPORT const char* latprof_cuda_abi_id() {
  return LATPROF_BACKEND_ABI;
}

LATPROF_EXPORT int latprof_cuda_device_count(char* why, int why_len) {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    int driver = 0, runtime = 0;
    cudaDriverGetVersion(&driver);
    cudaRuntimeGetVersion(&runtime);
    char buf[512];
    std::snprintf(buf, sizeof(buf), "%s%s: %s (driver API version %d, runtime %d)",
                  e == cudaErrorInsufficientDriver && driver == 0 ? "no CUDA driver: "
                  : e == cudaErrorNoDevice                        ? "no CUDA device: "
                                                                  : "CUDA unusable: ",
                  cudaGetErrorName(e), cudaGetErrorString(e), driver, runtime);
    write_reason(why, why_len, buf);
    return -1;
  }
  if (n == 0) write_reason(why, why_len, "no CUDA device is present");
  return n;
}

LATPROF_EXPORT latprof::Backend* latprof_cuda_create(const latprof::BackendOptions* opt, char* why,
                                                     int why_len) {
  try {
    return latprof::cuda::make_cuda_backend(opt ? *opt : latprof::BackendOptions{}).release();
  } catch (const std::exception& e) {
    write_reason(why, why_len, e.what());
  } catch (...) {
    write_reason(why, why_len, "unknown error creating the CUDA backend");
  }
  return nullptr;
}
