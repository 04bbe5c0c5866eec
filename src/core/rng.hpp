#pragma once
// Counter-based random numbers for synthetic weights: element i of tensor t is a pure function of
// (seed, tensor id, i), so any thread split, on the CPU or a GPU, generates the same values.
#include <cstdint>

#if defined(__CUDACC__)
#define LATPROF_HD __host__ __device__ __forceinline__
#else
#define LATPROF_HD inline
#endif

namespace latprof::rng {

// splitmix64's constants, and the multiplier that spreads element indices over its input (named
// for the vectorised generators, kernels/cpu/fill_avx512.cpp).
constexpr uint64_t kGolden = 0x9e3779b97f4a7c15ull, kMix1 = 0xbf58476d1ce4e5b9ull,
                   kMix2 = 0x94d049bb133111ebull, kIndexMul = 0xd1b54a32d192ed03ull;

LATPROF_HD uint64_t splitmix64(uint64_t x) {
  x += kGolden;
  x = (x ^ (x >> 30)) * kMix1;
  x = (x ^ (x >> 27)) * kMix2;
  return x ^ (x >> 31);
}

// Stream key for one tensor.
LATPROF_HD uint64_t tensor_key(uint64_t seed, uint64_t tensor_id) {
  return splitmix64(seed ^ splitmix64(tensor_id + 0x632be59bd9b4e019ull));
}

// Uniform in [-1, 1), 24 random bits.
LATPROF_HD float uniform_pm1(uint64_t key, uint64_t index) {
  const uint64_t r = splitmix64(key + index * kIndexMul);
  return float(int32_t(uint32_t(r >> 40)) - (1 << 23)) * (1.0f / float(1 << 23));
}

// Uniform int8 in [-127, 127].
LATPROF_HD int8_t uniform_i8(uint64_t key, uint64_t index) {
  const uint64_t r = splitmix64(key + index * kIndexMul);
  return int8_t(int32_t((r >> 32) % 255u) - 127);
}

}  // namespace latprof::rng
