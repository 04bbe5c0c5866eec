#include "gpu/gpu_support.hpp"

#include <dlfcn.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <sstream>

#include "backend/cuda_module.hpp"
#include "core/half.hpp"

namespace latprof::gputest {

const Module& module() {
  static Module m = [] {
    Module r;
    const char* env = std::getenv("LATPROF_CUDA_MODULE");
    const std::string path = env ? env : LATPROF_CUDA_MODULE_PATH;
    r.handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!r.handle) {
      r.error = std::string("cannot load ") + path + ": " + dlerror();
      return r;
    }
    r.abi_id = reinterpret_cast<const char* (*)()>(dlsym(r.handle, "latprof_cuda_abi_id"));
    r.device_count =
        reinterpret_cast<int (*)(char*, int)>(dlsym(r.handle, "latprof_cuda_device_count"));
    r.create = reinterpret_cast<Backend* (*)(const BackendOptions*, char*, int)>(
        dlsym(r.handle, "latprof_cuda_create"));
    if (!r.abi_id || !r.device_count || !r.create) r.error = path + " lacks the entry points";
    return r;
  }();
  return m;
}

Backend* cuda_backend(std::string* why) {
  static std::unique_ptr<Backend> backend;
  static std::string reason;
  static bool tried = false;
  if (!tried) {
    tried = true;
    const Module& m = module();
    if (!m.create) {
      reason = m.error;
    } else {
      char buf[512] = {0};
      const int n = m.device_count(buf, sizeof(buf));
      if (n <= 0) {
        reason = n == 0 ? std::string("no CUDA device is present") : std::string(buf);
      } else {
        BackendOptions opt;
        opt.kind = "cuda";
        Backend* b = m.create(&opt, buf, sizeof(buf));
        if (b)
          backend.reset(b);
        else
          reason = buf;
      }
    }
  }
  if (!backend && why) *why = reason;
  return backend.get();
}

DevBuf::DevBuf(Backend* b, size_t bytes, const char* what) : b_(b), bytes_(bytes) {
  p_ = b_->alloc(bytes, what);
}
DevBuf::~DevBuf() {
  if (p_) b_->release(p_);
}

std::vector<float> round_f16(const std::vector<float>& v) {
  std::vector<float> r(v.size());
  for (size_t i = 0; i < v.size(); ++i) r[i] = half_to_float(float_to_half(v[i]));
  return r;
}

std::unique_ptr<DevBuf> upload_act(Backend* b, const std::vector<float>& host) {
  std::vector<uint16_t> h(host.size());
  for (size_t i = 0; i < host.size(); ++i) h[i] = float_to_half(host[i]);
  auto buf = std::make_unique<DevBuf>(b, std::max<size_t>(h.size() * 2, 2));
  if (!h.empty()) b->copy_to_device(buf->get(), h.data(), h.size() * 2);
  return buf;
}

std::vector<float> download_act(Backend* b, const void* dev, int64_t n) {
  std::vector<float> out(static_cast<size_t>(n));
  b->activations_to_host(out.data(), dev, n);
  return out;
}

void poison(Backend* b, DevBuf& buf) {
  std::vector<uint8_t> p(buf.bytes(), 0x7e);
  b->copy_to_device(buf.get(), p.data(), p.size());
}

std::vector<float> random_vector(size_t n, uint64_t seed, float lo, float hi) {
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = d(gen);
  return v;
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

}  // namespace latprof::gputest
