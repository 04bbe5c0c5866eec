#pragma once
// IEEE 754 binary16 <-> float, portable and exact (round to nearest even). Kernels use F16C
// instructions where the CPU has them; this is the reference those paths are tested against.
// bfloat16 (the top 16 bits of a float) <-> float likewise.
#include <cstdint>
#include <cstring>

namespace latprof {

inline float half_to_float(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: normalize
      exp = 127 - 15 + 1;
      while ((mant & 0x400u) == 0) {
        mant <<= 1;
        --exp;
      }
      mant &= 0x3ffu;
      bits = sign | (exp << 23) | (mant << 13);
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

inline uint16_t float_to_half(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t absx = x & 0x7fffffffu;
  if (absx >= 0x7f800000u) return uint16_t(sign | 0x7c00u | (absx > 0x7f800000u ? 0x200u : 0));
  if (absx >= 0x477ff000u) return uint16_t(sign | 0x7c00u);  // overflow -> inf
  if (absx < 0x38800000u) {                                  // subnormal or zero in half
    if (absx < 0x33000000u) return uint16_t(sign);
    const uint32_t e = absx >> 23;
    const uint32_t m = (absx & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126 - e;  // 14..24
    uint32_t r = m >> shift;
    const uint32_t rem = m & ((1u << shift) - 1);
    const uint32_t halfway = 1u << (shift - 1);
    if (rem > halfway || (rem == halfway && (r & 1))) ++r;
    return uint16_t(sign | r);
  }
  uint32_t r = ((absx >> 13) - ((127 - 15) << 10));
  const uint32_t rem = absx & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (r & 1))) ++r;
  return uint16_t(sign | r);
}

// float_to_half without branches, for loops the compiler vectorises (the loaders' conversions,
// the portable synthetic fill): the same result for every float (checked on all 2^32 bit patterns,
// reports/cpu-kernels.md; tests/kernels: Half.BranchFreeEqualsReference), under the default
// rounding mode. The floating-point unit rounds: |f| * 2^112 * 2^-110 (the scale that keeps
// fp16's range apart: beyond it infinity) added to a power of two with f's exponent (at least
// 2^-14's, where fp16's subnormals start) leaves the 10 bits (fewer for subnormals) fp16 keeps,
// rounded to nearest even; exponent and mantissa are then read off the sum's bits. NaN gives the
// quiet NaN 0x7e00 with f's sign, as float_to_half does.
inline uint16_t float_to_half_branch_free(float f) {
  uint32_t w;
  std::memcpy(&w, &f, 4);
  const uint32_t shl1 = w + w, sign = w & 0x80000000u, absw = w & 0x7fffffffu;
  const uint32_t e24 = shl1 & 0xff000000u, small = 0u - uint32_t(e24 < 0x71000000u);
  const uint32_t bias = (small & 0x71000000u) | (~small & e24);
  float a, base;
  std::memcpy(&a, &absw, 4);
  const uint32_t bias_bits = (bias >> 1) + 0x07800000u;
  std::memcpy(&base, &bias_bits, 4);
  const float sum = base + (a * 0x1.0p+112f) * 0x1.0p-110f;
  uint32_t bits;
  std::memcpy(&bits, &sum, 4);
  const uint32_t nonsign = ((bits >> 13) & 0x7c00u) + (bits & 0x0fffu);
  const uint32_t nan = 0u - uint32_t(shl1 > 0xff000000u);
  return uint16_t((sign >> 16) | (nan & 0x7e00u) | (~nan & nonsign));
}

inline float bf16_to_float(uint16_t b) {
  const uint32_t bits = uint32_t(b) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// Round to nearest even; NaN stays a (quiet) NaN, overflow goes to infinity.
inline uint16_t float_to_bf16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) return uint16_t((x >> 16) | 0x40u);
  return uint16_t((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

}  // namespace latprof
