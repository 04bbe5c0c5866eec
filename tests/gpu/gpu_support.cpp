#include "gpu/gpu_support.hpp"

#include <dlfcn.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "backend/cuda_module.hpp"

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

std::unique_ptr<DevBuf> upload_act(Backend* b, const std::vector<float>& host) {
  const std::vector<uint16_t> h = to_half(host);
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

}  // namespace latprof::gputest
