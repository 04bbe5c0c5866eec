#pragma once
// Stand-in for CUDA's cuda_bf16.h under the CUDA emulation of the tests (tests/cuemu/cuemu.hpp):
// bfloat16 as a 16-bit struct, converted from fp32 with round to nearest even.
#include "../cuemu.hpp"

struct __nv_bfloat16 {
  uint16_t bits = 0;
  __nv_bfloat16() = default;
  __nv_bfloat16(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u)
      bits = uint16_t((u >> 16) | 0x40u);  // quiet NaN
    else
      bits = uint16_t((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
  }
  operator float() const {
    const uint32_t u = uint32_t(bits) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  }
};
struct alignas(4) __nv_bfloat162 {
  __nv_bfloat16 x, y;
};
inline __nv_bfloat16 __float2bfloat16(float f) {
  return __nv_bfloat16(f);
}
inline __nv_bfloat16 __float2bfloat16_rn(float f) {
  return __nv_bfloat16(f);
}
inline float __bfloat162float(__nv_bfloat16 b) {
  return float(b);
}
inline float2 __bfloat1622float2(__nv_bfloat162 b) {
  return {float(b.x), float(b.y)};
}
inline __nv_bfloat162 __floats2bfloat162_rn(float a, float b) {
  return {__nv_bfloat16(a), __nv_bfloat16(b)};
}
