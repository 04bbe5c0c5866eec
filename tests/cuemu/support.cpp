#include "support.hpp"

#include <cmath>
#include <cstring>
#include <random>
#include <sstream>

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

std::vector<uint16_t> to_half(const std::vector<float>& v) {
  std::vector<uint16_t> h(v.size());
  for (size_t i = 0; i < v.size(); ++i) h[i] = float_to_half(v[i]);
  return h;
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

std::vector<float> round_f16(const std::vector<float>& v) {
  std::vector<float> r(v.size());
  for (size_t i = 0; i < v.size(); ++i) r[i] = half_to_float(float_to_half(v[i]));
  return r;
}

std::vector<float> random_vector(size_t n, uint64_t seed, float lo, float hi) {
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = d(gen);
  return v;
}

double rms(const std::vector<float>& v) {
  double s = 0;
  for (float x : v) s += double(x) * double(x);
  return v.empty() ? 0 : std::sqrt(s / double(v.size()));
}

::testing::AssertionResult all_close(const std::vector<float>& got, const std::vector<float>& ref,
                                     double atol, double rtol) {
  if (got.size() != ref.size())
    return ::testing::AssertionFailure() << "size " << got.size() << " != " << ref.size();
  size_t bad = 0, worst = 0;
  double worst_excess = -1;
  std::ostringstream pairs;
  for (size_t i = 0; i < got.size(); ++i) {
    const double err = std::fabs(double(got[i]) - double(ref[i]));
    const double tol = atol + rtol * std::fabs(double(ref[i]));
    const bool ok = std::isfinite(got[i]) && err <= tol;
    const double excess = std::isfinite(got[i]) ? err - tol : 1e300;
    if (excess > worst_excess) {
      worst_excess = excess;
      worst = i;
    }
    if (!ok && bad++ < 5) pairs << "\n  [" << i << "] got " << got[i] << " ref " << ref[i];
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << bad << " of " << got.size() << " elements outside atol " << atol << " + rtol " << rtol
         << "; worst [" << worst << "] got " << got[worst] << " ref " << ref[worst] << pairs.str();
}

double normalized_error(const std::vector<float>& got, const std::vector<float>& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < got.size() && i < ref.size(); ++i) {
    const double d = double(got[i]) - double(ref[i]);
    num += d * d;
    den += double(ref[i]) * double(ref[i]);
  }
  if (!std::isfinite(num)) return INFINITY;
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
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
