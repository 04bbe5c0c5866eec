#include "support.hpp"

#include <cstring>

#include "core/half.hpp"

namespace latprof::cuemutest {

DevBuf::DevBuf(size_t bytes) : bytes_(bytes) {
  if (cudaMalloc(&p_, bytes) != cudaSuccess) throw std::runtime_error("cudaMalloc failed");
}
DevBuf::~DevBuf() {
  cudaFree(p_);
}
void DevBuf::upload(const void* src) const {
  if (cudaMemcpy(p_, src, bytes_, cudaMemcpyHostToDevice) != cudaSuccess)
    throw std::runtime_error("cudaMemcpy failed");
}
void DevBuf::download(void* dst) const {
  if (cudaMemcpy(dst, p_, bytes_, cudaMemcpyDeviceToHost) != cudaSuccess)
    throw std::runtime_error("cudaMemcpy failed");
}

std::unique_ptr<DevBuf> upload_act(const std::vector<float>& host) {
  return upload(to_half(host));
}

std::vector<float> download_act(const DevBuf& b, int64_t n) {
  std::vector<uint16_t> h(static_cast<size_t>(n));
  if (n) {
    std::vector<uint16_t> all(b.bytes() / 2);
    b.download(all.data());
    std::memcpy(h.data(), all.data(), size_t(n) * 2);
  }
  std::vector<float> out(h.size());
  for (size_t i = 0; i < h.size(); ++i) out[i] = half_to_float(h[i]);
  return out;
}

void poison(DevBuf& b) {
  std::vector<uint8_t> p(b.bytes(), 0x7e);
  b.upload(p.data());
}

std::vector<uint64_t> schedules(uint64_t seed) {
  return {0, 1, 2 + seed};
}

std::string schedule_name(uint64_t s) {
  return s == 0 ? "ascending" : s == 1 ? "descending" : "shuffled seed " + std::to_string(s);
}

void expect_no_faults() {
  const std::vector<std::string> f = cuemu::take_faults();
  std::string all;
  for (const std::string& s : f) all += "\n  " + s;
  EXPECT_TRUE(f.empty()) << f.size() << " emulation fault(s):" << all;
}

void under_schedules(uint64_t seed, const std::function<void()>& body) {
  cuemu::take_faults();
  for (uint64_t s : schedules(seed)) {
    SCOPED_TRACE("thread schedule: " + schedule_name(s));
    cuemu::Options o = cuemu::options();
    o.schedule = s;
    cuemu::set_options(o);
    body();
    expect_no_faults();
  }
  cuemu::Options o = cuemu::options();
  o.schedule = 0;
  cuemu::set_options(o);
}

}  // namespace latprof::cuemutest
