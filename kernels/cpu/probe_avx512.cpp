// AVX-512 inner loops of the machine probes (see probe.cpp).
#include <immintrin.h>

// GCC 12 reports _mm512_undefined_*() inside the intrinsics headers as uninitialised (a known
// false positive once the intrinsics are inlined).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include "kernels/cpu/internal.hpp"
#include "kernels/cpu/vnni_avx512.hpp"

namespace latprof::cpu::detail {

double read_sum_avx512(const float* p, size_t n, bool prefetch) {
  __m512 s[8];
  for (auto& v : s) v = _mm512_setzero_ps();
  const char* const end = reinterpret_cast<const char*>(p + n);
  size_t i = 0;
  for (; i + 128 <= n; i += 128) {  // 512 bytes per iteration, 8 independent add chains
    if (const char* pf = reinterpret_cast<const char*>(p + i) + kProbePrefetchBytes;
        prefetch && pf < end) {
#pragma GCC unroll 8
      for (int j = 0; j < 8; ++j) prefetch_linear(pf + 64 * j);
    }
#pragma GCC unroll 8
    for (int j = 0; j < 8; ++j) s[j] = _mm512_add_ps(s[j], _mm512_loadu_ps(p + i + 16 * j));
  }
  for (; i + 16 <= n; i += 16) s[0] = _mm512_add_ps(s[0], _mm512_loadu_ps(p + i));
  float tail = 0;
  for (; i < n; ++i) tail += p[i];
  for (int j = 1; j < 8; ++j) s[0] = _mm512_add_ps(s[0], s[j]);
  return double(_mm512_reduce_add_ps(s[0]) + tail);
}

double read_streams_avx512(const float* p, size_t n) {
  constexpr int S = kProbeStreams;
  __m512 s[2 * S];  // two lines of each run an iteration: 8 add chains
  for (auto& v : s) v = _mm512_setzero_ps();
  const size_t h = n / S / 32 * 32;  // each run's floats, whole pairs of lines
  for (size_t i = 0; i < h; i += 32)
#pragma GCC unroll 4
    for (int j = 0; j < S; ++j) {
      s[2 * j] = _mm512_add_ps(s[2 * j], _mm512_loadu_ps(p + j * h + i));
      s[2 * j + 1] = _mm512_add_ps(s[2 * j + 1], _mm512_loadu_ps(p + j * h + i + 16));
    }
  float tail = 0;
  for (size_t i = S * h; i < n; ++i) tail += p[i];
  for (int j = 1; j < 2 * S; ++j) s[0] = _mm512_add_ps(s[0], s[j]);
  return double(_mm512_reduce_add_ps(s[0]) + tail);
}

double fma_chains_avx512(int64_t iters) {
  // 24 independent FMA chains: 2 FMA ports x 4-cycle latency needs >= 8; 24 leaves slack.
  __m512 a[24];
  for (int j = 0; j < 24; ++j) a[j] = _mm512_set1_ps(0.5f + 0.01f * float(j));
  const __m512 b = _mm512_set1_ps(0.9999999f), c = _mm512_set1_ps(1e-7f);
  for (int64_t i = 0; i < iters; ++i) {
#pragma GCC unroll 24
    for (int j = 0; j < 24; ++j) a[j] = _mm512_fmadd_ps(a[j], b, c);
  }
  for (int j = 1; j < 24; ++j) a[0] = _mm512_add_ps(a[0], a[j]);
  return double(_mm512_reduce_add_ps(a[0]));
}

int64_t dpbusd_chains_avx512(int64_t iters) {
  // vpdpbusd zmm: 64 u8 x s8 multiply-adds into 16 int32 lanes = 128 ops per instruction.
  __m512i a[24];
  for (int j = 0; j < 24; ++j) a[j] = _mm512_set1_epi32(j);
  const __m512i b = _mm512_set1_epi8(3), c = _mm512_set1_epi8(-2);
  for (int64_t i = 0; i < iters; ++i) {
#pragma GCC unroll 24
    for (int j = 0; j < 24; ++j) a[j] = dpbusd(a[j], b, c);
  }
  for (int j = 1; j < 24; ++j) a[0] = _mm512_add_epi32(a[0], a[j]);
  return _mm512_reduce_add_epi32(a[0]);
}

int64_t dpwssd_chains_avx512(int64_t iters) {
  // vpdpwssd zmm: 32 int16 x int16 multiply-adds into 16 int32 lanes = 64 ops per instruction.
  __m512i a[24];
  for (int j = 0; j < 24; ++j) a[j] = _mm512_set1_epi32(j);
  const __m512i b = _mm512_set1_epi16(3), c = _mm512_set1_epi16(-2);
  for (int64_t i = 0; i < iters; ++i) {
#pragma GCC unroll 24
    for (int j = 0; j < 24; ++j) a[j] = dpwssd(a[j], b, c);
  }
  for (int j = 1; j < 24; ++j) a[0] = _mm512_add_epi32(a[0], a[j]);
  return _mm512_reduce_add_epi32(a[0]);
}

}  // namespace latprof::cpu::detail
