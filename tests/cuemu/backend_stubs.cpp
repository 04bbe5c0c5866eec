// What src/backend/cuda/cuda_backend.cpp needs besides the CUDA runtime, for the emulated CUDA
// module of the tests (libcuemu_latprof_cuda.so, CMakeLists.txt): cuBLASLt, CUPTI and the ceiling
// probes cannot run on the CPU. The GEMM reports "no algorithm", so prefill takes the backend's
// own fallback (kernels/cuda/gemm_fallback.cu); tracing and counters refuse with the reason.
#include "backend/cuda/activity_trace.hpp"
#include "backend/cuda/ceilings.hpp"
#include "backend/cuda/lt_gemm.hpp"
#include "backend/cuda/range_counters.hpp"

namespace latprof::cuda {

namespace {
constexpr const char* kWhy = "not available under the CPU emulation of CUDA (tests/cuemu)";
}

ActivityTrace& ActivityTrace::instance() {
  static ActivityTrace t;
  return t;
}
bool ActivityTrace::enable(std::string* why) {
  if (why) *why = std::string("CUPTI activity tracing is ") + kWhy;
  return false;
}
void ActivityTrace::disable() {}
void ActivityTrace::push(uint64_t) {}
void ActivityTrace::pop() {}
void ActivityTrace::name_range(uint64_t, const char*) {}
std::string ActivityTrace::take_json(size_t) {
  return "";
}

RangeCounters::~RangeCounters() = default;
bool RangeCounters::enable(int, std::string* why) {
  last_error_ = std::string("CUPTI range profiler is ") + kWhy;
  if (why) *why = last_error_;
  return false;
}
void RangeCounters::disable() {}
void RangeCounters::push(const std::string&) {}
void RangeCounters::pop() {}
std::string RangeCounters::take_json(bool) {
  return "";
}

LtGemm::LtGemm() = default;
LtGemm::~LtGemm() = default;
bool LtGemm::gemm_f16(const __half*, const __half*, int64_t, int64_t, int64_t, __half*,
                      cudaStream_t) {
  return false;
}
bool LtGemm::gemm_i8(const int8_t*, const int8_t*, int64_t, int64_t, int64_t, int32_t*,
                     cudaStream_t) {
  return false;
}

std::string measure_ceilings_json(LtGemm&, cudaStream_t) {
  const std::string why = std::string("\"") + kWhy + "\"";
  return "{\"memory_bandwidth_error\": " + why + ", \"fp16_error\": " + why + "}";
}

}  // namespace latprof::cuda
