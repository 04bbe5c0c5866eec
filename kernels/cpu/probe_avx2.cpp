// AVX2 / AVX-VNNI inner loops of the machine probes (see probe.cpp).
#include <immintrin.h>

#include "kernels/cpu/internal.hpp"

namespace latprof::cpu::detail {

double read_sum_avx2(const float* p, size_t n, bool prefetch) {
  __m256 s[8];
  for (auto& v : s) v = _mm256_setzero_ps();
  const char* const end = reinterpret_cast<const char*>(p + n);
  size_t i = 0;
  for (; i + 64 <= n; i += 64) {
    if (const char* pf = reinterpret_cast<const char*>(p + i) + kProbePrefetchBytes;
        prefetch && pf < end) {
      prefetch_linear(pf);
      prefetch_linear(pf + 64);
      prefetch_linear(pf + 128);
      prefetch_linear(pf + 192);
    }
#pragma GCC unroll 8
    for (int j = 0; j < 8; ++j) s[j] = _mm256_add_ps(s[j], _mm256_loadu_ps(p + i + 8 * j));
  }
  float tail = 0;
  for (; i < n; ++i) tail += p[i];
  for (int j = 1; j < 8; ++j) s[0] = _mm256_add_ps(s[0], s[j]);
  alignas(32) float l[8];
  _mm256_store_ps(l, s[0]);
  return double(l[0] + l[1] + l[2] + l[3] + l[4] + l[5] + l[6] + l[7] + tail);
}

double read_streams_avx2(const float* p, size_t n) {
  constexpr int S = kProbeStreams;
  __m256 s[2 * S];
  for (auto& v : s) v = _mm256_setzero_ps();
  const size_t h = n / S / 16 * 16;  // each run's floats, whole lines
  for (size_t i = 0; i < h; i += 16)
#pragma GCC unroll 4
    for (int j = 0; j < S; ++j) {
      s[2 * j] = _mm256_add_ps(s[2 * j], _mm256_loadu_ps(p + j * h + i));
      s[2 * j + 1] = _mm256_add_ps(s[2 * j + 1], _mm256_loadu_ps(p + j * h + i + 8));
    }
  float tail = 0;
  for (size_t i = S * h; i < n; ++i) tail += p[i];
  for (int j = 1; j < 2 * S; ++j) s[0] = _mm256_add_ps(s[0], s[j]);
  alignas(32) float l[8];
  _mm256_store_ps(l, s[0]);
  return double(l[0] + l[1] + l[2] + l[3] + l[4] + l[5] + l[6] + l[7] + tail);
}

double fma_chains_avx2(int64_t iters) {
  __m256 a[12];
  for (int j = 0; j < 12; ++j) a[j] = _mm256_set1_ps(0.5f + 0.01f * float(j));
  const __m256 b = _mm256_set1_ps(0.9999999f), c = _mm256_set1_ps(1e-7f);
  for (int64_t i = 0; i < iters; ++i) {
#pragma GCC unroll 12
    for (int j = 0; j < 12; ++j) a[j] = _mm256_fmadd_ps(a[j], b, c);
  }
  for (int j = 1; j < 12; ++j) a[0] = _mm256_add_ps(a[0], a[j]);
  alignas(32) float l[8];
  _mm256_store_ps(l, a[0]);
  return double(l[0] + l[1] + l[2] + l[3] + l[4] + l[5] + l[6] + l[7]);
}

namespace {
int64_t hsum_epi32(__m256i v) {
  alignas(32) int32_t l[8];
  _mm256_store_si256(reinterpret_cast<__m256i*>(l), v);
  return int64_t(l[0]) + l[1] + l[2] + l[3] + l[4] + l[5] + l[6] + l[7];
}
}  // namespace

// acc + u · w with AVX-VNNI, as inline assembly: the intrinsic made GCC 12 copy and spill the
// accumulators around each instruction (as in vnni_avx512.hpp), halving the measured peak.
inline __m256i dpbusd_vex(__m256i acc, __m256i u, __m256i w) {
  asm("%{vex%} vpdpbusd %[w], %[u], %[acc]" : [acc] "+x"(acc) : [u] "x"(u), [w] "x"(w));
  return acc;
}

int64_t dpbusd_chains_avxvnni(int64_t iters) {
  __m256i a[12];
  for (int j = 0; j < 12; ++j) a[j] = _mm256_set1_epi32(j);
  const __m256i b = _mm256_set1_epi8(3), c = _mm256_set1_epi8(-2);
  for (int64_t i = 0; i < iters; ++i) {
#pragma GCC unroll 12
    for (int j = 0; j < 12; ++j) a[j] = dpbusd_vex(a[j], b, c);
  }
  for (int j = 1; j < 12; ++j) a[0] = _mm256_add_epi32(a[0], a[j]);
  return hsum_epi32(a[0]);
}

int64_t maddubs_chains_avx2(int64_t iters) {
  // Without VNNI: pmaddubsw (u8 x s8 pairs -> s16) + pmaddwd by 1 (-> s32) + add, 32 MACs.
  __m256i a[12];
  for (int j = 0; j < 12; ++j) a[j] = _mm256_set1_epi32(j);
  // The accumulator doubles as the s8 operand, so nothing is loop-invariant.
  const __m256i b = _mm256_set1_epi8(3), one = _mm256_set1_epi16(1);
  for (int64_t i = 0; i < iters; ++i) {
#pragma GCC unroll 12
    for (int j = 0; j < 12; ++j)
      a[j] = _mm256_add_epi32(a[j], _mm256_madd_epi16(_mm256_maddubs_epi16(b, a[j]), one));
  }
  for (int j = 1; j < 12; ++j) a[0] = _mm256_add_epi32(a[0], a[j]);
  return hsum_epi32(a[0]);
}

}  // namespace latprof::cpu::detail
