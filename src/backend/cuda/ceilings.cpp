// Roofline ceilings measured at start-up, each as the best of several timed repetitions after a
// warm-up, timed with CUDA events on the backend's stream:
//  - copy: cudaMemcpyAsync device-to-device of a 1 GiB buffer (far above the 50 MB L2); the
//    rate counts bytes read plus bytes written (2 x size), the convention of a bandwidth roofline;
//  - FP16: cuBLASLt 8192^3 GEMM, FP16 in/out, FP32 accumulation, 2*M*N*K FLOPs;
//  - INT8: cuBLASLt 8192^3 IMMA GEMM, int8 in, int32 out, 2*M*N*K ops.
#include "backend/cuda/ceilings.hpp"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "backend/cuda/check.hpp"
#include "backend/cuda/lt_gemm.hpp"

namespace latprof::cuda {

namespace {

// Best (shortest) milliseconds of `reps` runs of `fn`, after one warm-up.
template <class Fn>
double best_ms(cudaStream_t stream, int reps, Fn fn) {
  cudaEvent_t a, b;
  LP_CHECK(cudaEventCreate(&a));
  LP_CHECK(cudaEventCreate(&b));
  fn();
  double best = 1e300;
  for (int i = 0; i < reps; ++i) {
    LP_CHECK(cudaEventRecord(a, stream));
    fn();
    LP_CHECK(cudaEventRecord(b, stream));
    LP_CHECK(cudaEventSynchronize(b));
    float ms = 0;
    LP_CHECK(cudaEventElapsedTime(&ms, a, b));
    best = std::min(best, double(ms));
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return best;
}

struct DeviceBuffer {
  void* p = nullptr;
  explicit DeviceBuffer(size_t bytes) { LP_CHECK(cudaMalloc(&p, bytes)); }
  ~DeviceBuffer() {
    if (p) cudaFree(p);
  }
};

}  // namespace

std::string measure_ceilings_json(LtGemm& gemm, cudaStream_t stream) {
  using nlohmann::json;
  json j;
  std::string method;
  size_t free_b = 0, total_b = 0;
  LP_CHECK(cudaMemGetInfo(&free_b, &total_b));

  // Copy bandwidth.
  size_t copy_bytes = size_t(1) << 30;
  while (copy_bytes > (size_t(64) << 20) && 2 * copy_bytes + (size_t(256) << 20) > free_b)
    copy_bytes /= 2;
  try {
    DeviceBuffer src(copy_bytes), dst(copy_bytes);
    LP_CHECK(cudaMemsetAsync(src.p, 1, copy_bytes, stream));
    const double ms = best_ms(stream, 10, [&] {
      LP_CHECK(cudaMemcpyAsync(dst.p, src.p, copy_bytes, cudaMemcpyDeviceToDevice, stream));
    });
    j["memory_bandwidth_bytes_per_s"] = 2.0 * double(copy_bytes) / (ms * 1e-3);
    j["copy_bytes"] = copy_bytes;
    method += "D2D cudaMemcpyAsync of " + std::to_string(copy_bytes >> 20) +
              " MiB, best of 10, read+write bytes; ";
  } catch (const std::exception& e) {
    j["memory_bandwidth_bytes_per_s"] = nullptr;
    j["memory_bandwidth_error"] = e.what();
  }

  const int64_t n = 8192;
  const double ops = 2.0 * double(n) * double(n) * double(n);
  try {
    DeviceBuffer a(size_t(n * n) * 2), b(size_t(n * n) * 2), c(size_t(n * n) * 2);
    // Small values so the fp16 result cannot overflow; the rate does not depend on the data.
    LP_CHECK(cudaMemsetAsync(a.p, 0x11, size_t(n * n) * 2, stream));
    LP_CHECK(cudaMemsetAsync(b.p, 0x11, size_t(n * n) * 2, stream));
    const double ms = best_ms(stream, 10, [&] {
      if (!gemm.gemm_f16(static_cast<const __half*>(a.p), static_cast<const __half*>(b.p), n, n, n,
                         static_cast<__half*>(c.p), stream))
        throw CudaError("cuBLASLt has no FP16 algorithm for 8192^3", 0);
    });
    j["fp16_flops_per_s"] = ops / (ms * 1e-3);
    method += "cuBLASLt FP16 GEMM 8192^3 (FP32 accumulate), best of 10; ";
  } catch (const std::exception& e) {
    j["fp16_flops_per_s"] = nullptr;
    j["fp16_error"] = e.what();
  }
  try {
    DeviceBuffer a(size_t(n * n)), b(size_t(n * n)), c(size_t(n * n) * 4);
    LP_CHECK(cudaMemsetAsync(a.p, 1, size_t(n * n), stream));
    LP_CHECK(cudaMemsetAsync(b.p, 1, size_t(n * n), stream));
    bool ok = true;
    const double ms = best_ms(stream, 10, [&] {
      ok = ok && gemm.gemm_i8(static_cast<const int8_t*>(a.p), static_cast<const int8_t*>(b.p), n,
                              n, n, static_cast<int32_t*>(c.p), stream);
    });
    if (ok) {
      j["int8_ops_per_s"] = ops / (ms * 1e-3);
      method += "cuBLASLt INT8 IMMA GEMM 8192^3 (INT32 accumulate), best of 10";
    } else {
      j["int8_ops_per_s"] = nullptr;
      j["int8_error"] = "cuBLASLt has no INT8 TN algorithm for 8192^3 on this device";
    }
  } catch (const std::exception& e) {
    j["int8_ops_per_s"] = nullptr;
    j["int8_error"] = e.what();
  }
  LP_CHECK(cudaStreamSynchronize(stream));
  j["method"] = method;
  return j.dump();
}

}  // namespace latprof::cuda
