#pragma once
// Stand-in for CUDA's cuda_fp16.h under the CUDA emulation of the tests (tests/cuemu/cuemu.hpp):
// __half is the compiler's _Float16 (IEEE binary16; conversions round to nearest even).
#include "../cuemu.hpp"

using __half = _Float16;
struct alignas(4) __half2 {
  __half x, y;
};
using half = __half;
using half2 = __half2;

inline __half __float2half(float f) {
  return __half(f);
}
inline __half __float2half_rn(float f) {
  return __half(f);
}
inline float __half2float(__half h) {
  return float(h);
}
inline __half2 __float2half2_rn(float f) {
  return {__half(f), __half(f)};
}
inline __half2 __floats2half2_rn(float a, float b) {
  return {__half(a), __half(b)};
}
inline __half2 __float22half2_rn(float2 f) {
  return {__half(f.x), __half(f.y)};
}
inline float2 __half22float2(__half2 h) {
  return {float(h.x), float(h.y)};
}
inline __half2 __halves2half2(__half a, __half b) {
  return {a, b};
}
inline __half2 __half2half2(__half a) {
  return {a, a};
}
inline __half __low2half(__half2 h) {
  return h.x;
}
inline __half __high2half(__half2 h) {
  return h.y;
}
inline float __low2float(__half2 h) {
  return float(h.x);
}
inline float __high2float(__half2 h) {
  return float(h.y);
}
inline unsigned short __half_as_ushort(__half h) {
  unsigned short u;
  std::memcpy(&u, &h, 2);
  return u;
}
inline __half __ushort_as_half(unsigned short u) {
  __half h;
  std::memcpy(&h, &u, 2);
  return h;
}
inline bool __hisnan(__half h) {
  return std::isnan(float(h));
}
inline bool __hisinf(__half h) {
  return std::isinf(float(h));
}
// fp16 arithmetic: computed in fp32, rounded once to fp16 (what the GPU's HADD/HMUL/HFMA do).
inline __half __hadd(__half a, __half b) {
  return __half(float(a) + float(b));
}
inline __half __hsub(__half a, __half b) {
  return __half(float(a) - float(b));
}
inline __half __hmul(__half a, __half b) {
  return __half(float(a) * float(b));
}
inline __half __hfma(__half a, __half b, __half c) {
  return __half(std::fma(float(a), float(b), float(c)));
}
inline __half __hmax(__half a, __half b) {
  return float(a) >= float(b) || std::isnan(float(b)) ? a : b;
}
inline __half __hmin(__half a, __half b) {
  return float(a) <= float(b) || std::isnan(float(b)) ? a : b;
}
inline __half __hneg(__half a) {
  return __half(-float(a));
}
inline bool __hgt(__half a, __half b) {
  return float(a) > float(b);
}
inline bool __hlt(__half a, __half b) {
  return float(a) < float(b);
}
inline bool __heq(__half a, __half b) {
  return float(a) == float(b);
}
inline __half2 __hadd2(__half2 a, __half2 b) {
  return {__hadd(a.x, b.x), __hadd(a.y, b.y)};
}
inline __half2 __hmul2(__half2 a, __half2 b) {
  return {__hmul(a.x, b.x), __hmul(a.y, b.y)};
}
inline __half2 __hfma2(__half2 a, __half2 b, __half2 c) {
  return {__hfma(a.x, b.x, c.x), __hfma(a.y, b.y, c.y)};
}
