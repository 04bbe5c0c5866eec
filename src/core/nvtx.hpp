#pragma once
// NVTX3 ranges in the "latprof" domain, so an nsys capture shows latprof's own stage and op
// names. Compiled in when the CUDA toolkit's header-only NVTX3 was found (LATPROF_HAVE_NVTX);
// with no tool attached a range costs a null-pointer check.
#if defined(LATPROF_HAVE_NVTX)
#include <nvtx3/nvToolsExt.h>
#endif

namespace latprof {

#if defined(LATPROF_HAVE_NVTX)
inline nvtxDomainHandle_t nvtx_domain() {
  static nvtxDomainHandle_t d = nvtxDomainCreateA("latprof");
  return d;
}
inline void nvtx_push(const char* name) {
  nvtxEventAttributes_t a{};
  a.version = NVTX_VERSION;
  a.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
  a.messageType = NVTX_MESSAGE_TYPE_ASCII;
  a.message.ascii = name;
  nvtxDomainRangePushEx(nvtx_domain(), &a);
}
inline void nvtx_pop() {
  nvtxDomainRangePop(nvtx_domain());
}
inline constexpr bool kNvtxCompiled = true;
#else
inline void nvtx_push(const char*) {}
inline void nvtx_pop() {}
inline constexpr bool kNvtxCompiled = false;
#endif

class NvtxRange {
 public:
  explicit NvtxRange(const char* name) { nvtx_push(name); }
  ~NvtxRange() { nvtx_pop(); }
  NvtxRange(const NvtxRange&) = delete;
  NvtxRange& operator=(const NvtxRange&) = delete;
};

}  // namespace latprof
