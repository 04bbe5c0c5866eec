// Backend registry: the CPU backend is always here; the CUDA backend is a module loaded with
// dlopen from the directory of the executable (or LATPROF_CUDA_MODULE), so that latprof starts
// and runs on the CPU where there is no GPU, no driver and no CUDA toolkit.
#include <dlfcn.h>
#include <unistd.h>

#include <climits>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "backend/backend.hpp"
#include "backend/cpu/cpu_backend.hpp"
#include "backend/cuda_module.hpp"
#include "core/error.hpp"

namespace latprof {

namespace {

std::string exe_dir() {
  char buf[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return ".";
  buf[n] = 0;
  return std::filesystem::path(buf).parent_path().string();
}

struct CudaModule {
  void* handle = nullptr;
  latprof_cuda_device_count_fn device_count = nullptr;
  latprof_cuda_create_fn create = nullptr;
  std::string error;  // why it is not usable
};

const CudaModule& cuda_module() {
  static CudaModule mod = [] {
    CudaModule m;
    std::string path;
    if (const char* env = std::getenv("LATPROF_CUDA_MODULE")) {
      path = env;
    } else {
      path = exe_dir() + "/" + LATPROF_CUDA_MODULE_NAME;
      if (!std::filesystem::exists(path)) {
        m.error = "this latprof was built without the CUDA backend (no " +
                  std::string(LATPROF_CUDA_MODULE_NAME) + " next to the binary)";
        return m;
      }
    }
    m.handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!m.handle) {
      m.error = std::string("cannot load the CUDA backend: ") + dlerror();
      return m;
    }
    auto abi = reinterpret_cast<latprof_cuda_abi_id_fn>(dlsym(m.handle, "latprof_cuda_abi_id"));
    m.device_count = reinterpret_cast<latprof_cuda_device_count_fn>(
        dlsym(m.handle, "latprof_cuda_device_count"));
    m.create = reinterpret_cast<latprof_cuda_create_fn>(dlsym(m.handle, "latprof_cuda_create"));
    if (!abi || !m.device_count || !m.create) {
      m.error = "the CUDA backend module " + path + " lacks the latprof entry points";
      m.device_count = nullptr;
      m.create = nullptr;
    } else if (std::strcmp(abi(), LATPROF_BACKEND_ABI) != 0) {
      m.error = "the CUDA backend module " + path +
                " was built from another backend interface (ABI " + abi() + ", this latprof " +
                LATPROF_BACKEND_ABI + "); rebuild both from one tree";
      m.device_count = nullptr;
      m.create = nullptr;
    }
    return m;
  }();
  return mod;
}

// Number of CUDA devices, or -1 with the reason.
int cuda_devices(std::string* why) {
  const CudaModule& m = cuda_module();
  if (!m.device_count) {
    if (why) *why = m.error;
    return -1;
  }
  char buf[512] = {0};
  const int n = m.device_count(buf, sizeof(buf));
  if (n <= 0 && why) *why = n == 0 ? std::string("no CUDA device is present") : std::string(buf);
  return n;
}

}  // namespace

std::unique_ptr<Backend> create_backend(const BackendOptions& opt, std::string* why_not_cuda) {
  if (opt.kind != "auto" && opt.kind != "cpu" && opt.kind != "cuda")
    usage_error("unknown backend '" + opt.kind + "'; use auto, cpu or cuda");
  if (opt.kind == "cuda" || opt.kind == "auto") {
    std::string why;
    if (cuda_devices(&why) > 0) {
      char buf[512] = {0};
      Backend* b = cuda_module().create(&opt, buf, sizeof(buf));
      if (b) return std::unique_ptr<Backend>(b);
      why = buf;
    }
    if (opt.kind == "cuda") usage_error("--backend cuda is not available: " + why);
    if (why_not_cuda) *why_not_cuda = why;
  }
  return make_cpu_backend(opt);
}

std::vector<std::string> describe_backends() {
  std::vector<std::string> out;
  out.push_back("cpu: " + make_cpu_backend(BackendOptions{})->device().details);
  std::string why;
  const int n = cuda_devices(&why);
  if (n > 0) {
    out.push_back("cuda: " + std::to_string(n) + " device(s)");
  } else {
    out.push_back("cuda: unavailable (" + why + ")");
  }
  return out;
}

}  // namespace latprof
