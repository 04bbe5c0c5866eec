#pragma once
// Stand-in for NVTX3 under the CUDA emulation (tests/cuemu/cuemu.hpp): ranges are no-ops.
#include <cstdint>

struct nvtxDomainRegistration_st;
using nvtxDomainHandle_t = nvtxDomainRegistration_st*;
#define NVTX_VERSION 3
#define NVTX_EVENT_ATTRIB_STRUCT_SIZE 48
enum nvtxMessageType_t { NVTX_MESSAGE_UNKNOWN = 0, NVTX_MESSAGE_TYPE_ASCII = 1 };
union nvtxMessageValue_t {
  const char* ascii;
};
struct nvtxEventAttributes_t {
  uint16_t version;
  uint16_t size;
  uint32_t category;
  int32_t colorType;
  uint32_t color;
  int32_t payloadType;
  int32_t reserved0;
  uint64_t payload;
  int32_t messageType;
  nvtxMessageValue_t message;
};
inline nvtxDomainHandle_t nvtxDomainCreateA(const char*) {
  return nullptr;
}
inline int nvtxDomainRangePushEx(nvtxDomainHandle_t, const nvtxEventAttributes_t*) {
  return 0;
}
inline int nvtxDomainRangePop(nvtxDomainHandle_t) {
  return 0;
}
inline int nvtxRangePushA(const char*) {
  return 0;
}
inline int nvtxRangePop() {
  return 0;
}
