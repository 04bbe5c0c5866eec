// Machine ceilings measured on this host: streaming read and triad bandwidth, fp32 FMA and int8
// dot-product peaks, and how long a cache line takes between two threads' cores. All threads, the
// best ISA the CPU has (not the forced one). Each probe reports the best and the median over its
// repetitions.
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <new>
#include <thread>
#include <vector>

#if defined(__linux__)
#include <sys/mman.h>
#endif

#include "kernels/cpu/internal.hpp"

namespace latprof::cpu {
namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Timed repetitions of `body` (returns nothing); `work` is bytes or operations per repetition.
template <class F>
ProbeResult timed(int repetitions, double work, F&& body) {
  ProbeResult r;
  r.repetitions = std::max(1, repetitions);
  r.bytes_or_ops = work;
  std::vector<double> rate;
  for (int i = 0; i < r.repetitions; ++i) {
    const double t0 = now_s();
    body();
    const double dt = now_s() - t0;
    rate.push_back(work / std::max(dt, 1e-9));
  }
  std::sort(rate.begin(), rate.end());
  r.value = rate.back();
  const size_t n = rate.size();
  r.median = n % 2 ? rate[n / 2] : 0.5 * (rate[n / 2 - 1] + rate[n / 2]);
  return r;
}

// 2 MiB-aligned buffer (transparent huge pages where the kernel allows: fewer TLB misses).
struct Buffer {
  void* p = nullptr;
  explicit Buffer(size_t bytes) {
    const size_t align = size_t(2) << 20;
    p = std::aligned_alloc(align, (bytes + align - 1) / align * align);
    if (!p) throw std::bad_alloc();
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    madvise(p, bytes, MADV_HUGEPAGE);
#endif
  }
  ~Buffer() {
    std::free(p);
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
};

volatile double g_sink;  // keeps every probe's result alive

double read_sum_scalar(const float* p, size_t n) {
  float s[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j) s[j] += p[i + j];
  for (; i < n; ++i) s[0] += p[i];
  return double(s[0] + s[1] + s[2] + s[3] + s[4] + s[5] + s[6] + s[7]);
}

double fma_chains_scalar(int64_t iters) {  // 2 * 8 * iters FLOP
  float a[8];
  for (int j = 0; j < 8; ++j) a[j] = 0.5f + 0.01f * float(j);
  for (int64_t i = 0; i < iters; ++i)
    for (int j = 0; j < 8; ++j) a[j] = a[j] * 0.9999999f + 1e-7f;
  return double(a[0] + a[1] + a[2] + a[3] + a[4] + a[5] + a[6] + a[7]);
}

// Runs `chain(iters)` on every thread; calibrated so one repetition lasts about 80 ms.
template <class F>
ProbeResult peak(int repetitions, double ops_per_iter, F chain) {
  const int nt = omp_get_max_threads();
  int64_t iters = 1 << 16;
  for (;;) {  // calibrate on one thread
    const double t0 = now_s();
    g_sink = double(chain(iters));
    const double dt = now_s() - t0;
    if (dt > 0.02) {
      iters = std::max<int64_t>(iters, int64_t(double(iters) * 0.08 / dt));
      break;
    }
    iters *= 4;
  }
  return timed(repetitions, ops_per_iter * double(iters) * nt, [&] {
    double sum = 0;
#pragma omp parallel reduction(+ : sum)
    sum += double(chain(iters));
    g_sink = sum;
  });
}

}  // namespace

ProbeResult probe_read_bandwidth(size_t bytes, int repetitions) {
  const size_t n = std::max<size_t>(bytes / sizeof(float), 1024);
  Buffer buf(n * sizeof(float));
  float* p = static_cast<float*>(buf.p);
  const Isa isa = detected_isa();
  // Same static split for the first touch (page faults, before timing) and for the reads.
#pragma omp parallel
  {
    const size_t nt = size_t(omp_get_num_threads()), tid = size_t(omp_get_thread_num());
    const size_t i0 = n * tid / nt, i1 = n * (tid + 1) / nt;
    for (size_t i = i0; i < i1; ++i) p[i] = 1.0f;
  }
  // Repetitions take turns: a read of each thread's share in 4 runs side by side (as the AVX2
  // W8A16 GEMV reads its rows; internal.hpp, kProbeStreams), a plain read, and one that also
  // prefetches each line into L2 ahead of its loads, as the decode GEMVs do (kProbePrefetchBytes):
  // the roof is the best read any way, so kernels are not held to a roof below what they reach.
  int rep = 0;
  return timed(repetitions, double(n * sizeof(float)), [&] {
    const int walk = rep++ % 3;
    const bool prefetch = walk == 2;
    double sum = 0;
#pragma omp parallel reduction(+ : sum)
    {
      const size_t nt = size_t(omp_get_num_threads()), tid = size_t(omp_get_thread_num());
      const size_t i0 = n * tid / nt, i1 = n * (tid + 1) / nt;
      const float* q = p + i0;
      if (isa == Isa::avx512)
        sum += walk == 0 ? detail::read_streams_avx512(q, i1 - i0)
                         : detail::read_sum_avx512(q, i1 - i0, prefetch);
      else if (isa == Isa::avx2)
        sum += walk == 0 ? detail::read_streams_avx2(q, i1 - i0)
                         : detail::read_sum_avx2(q, i1 - i0, prefetch);
      else
        sum += read_sum_scalar(q, i1 - i0);
    }
    g_sink = sum;
  });
}

ProbeResult probe_triad_bandwidth(size_t bytes, int repetitions) {
  // `bytes` is the whole working set: three arrays of bytes / 3 each.
  const int64_t n = std::max<int64_t>(int64_t(bytes / (3 * sizeof(double))), 1024);
  Buffer ba(size_t(n) * sizeof(double)), bb(size_t(n) * sizeof(double)),
      bc(size_t(n) * sizeof(double));
  double* a = static_cast<double*>(ba.p);
  double* b = static_cast<double*>(bb.p);
  double* c = static_cast<double*>(bc.p);
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    a[i] = 0;
    b[i] = 1;
    c[i] = 2;
  }
  const double s = 3.0;
  ProbeResult r = timed(repetitions, 3.0 * double(n) * sizeof(double), [&] {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) a[i] = b[i] + s * c[i];
  });
  g_sink = a[n / 2];
  return r;
}

ProbeResult probe_fma_peak(int repetitions) {
  switch (detected_isa()) {
    case Isa::avx512:
      return peak(repetitions, 2.0 * 16 * 24, detail::fma_chains_avx512);
    case Isa::avx2:
      return peak(repetitions, 2.0 * 8 * 12, detail::fma_chains_avx2);
    case Isa::scalar:
      break;
  }
  return peak(repetitions, 2.0 * 8, fma_chains_scalar);
}

ProbeResult probe_bf16_peak(int repetitions) {
  if (detected_isa() != Isa::avx512 || !has_avx512_bf16()) return {};
  return peak(repetitions, 2.0 * 32 * 24, detail::dpbf16_chains_avx512);
}

ProbeResult probe_int16_peak(int repetitions) {
  __builtin_cpu_init();
  if (detected_isa() != Isa::avx512 || !__builtin_cpu_supports("avx512vnni")) return {};
  return peak(repetitions, 2.0 * 32 * 24, detail::dpwssd_chains_avx512);
}

ProbeResult probe_amx_int8_peak(int repetitions) {
  if (!amx_int8_active()) return {};
  return peak(repetitions, 2.0 * 4 * 16 * 16 * 64, detail::tdpbssd_chains_amx);
}

ProbeResult probe_amx_bf16_peak(int repetitions) {
  if (!amx_f16_active()) return {};
  return peak(repetitions, 2.0 * 4 * 16 * 16 * 32, detail::tdpbf16ps_chains_amx);
}

ProbeResult probe_int8_peak(int repetitions) {
  __builtin_cpu_init();
  const Isa isa = detected_isa();
  if (isa == Isa::avx512 && __builtin_cpu_supports("avx512vnni"))
    return peak(repetitions, 2.0 * 64 * 24, detail::dpbusd_chains_avx512);
  if (isa != Isa::scalar && __builtin_cpu_supports("avxvnni"))
    return peak(repetitions, 2.0 * 32 * 12, detail::dpbusd_chains_avxvnni);
  if (isa != Isa::scalar) return peak(repetitions, 2.0 * 32 * 12, detail::maddubs_chains_avx2);
  // Portable: int32 multiply-adds, 8 independent chains.
  return peak(repetitions, 2.0 * 8, [](int64_t iters) {
    int32_t a[8];
    for (int j = 0; j < 8; ++j) a[j] = j;
    volatile int8_t vb = 3, vc = -2;
    const int8_t b = vb, c = vc;
    for (int64_t i = 0; i < iters; ++i)
      for (int j = 0; j < 8; ++j) a[j] = a[j] * b + c;
    return int64_t(a[0] + a[1] + a[2] + a[3] + a[4] + a[5] + a[6] + a[7]);
  });
}

}  // namespace latprof::cpu

namespace latprof::cpu {
namespace {

// A spin-wait's step: a pause, and after a while (the other thread is not running: another
// process has its core) the core handed over, so that the probe finishes on a busy machine too.
inline void wait_a_little(int spin) {
  if (spin > 2048) {
    std::this_thread::yield();
    return;
  }
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

}  // namespace

ProbeResult probe_core_to_core(int repetitions) {
  ProbeResult r;
  if (omp_get_max_threads() < 2 || repetitions <= 0) return r;
  // Thread 0 writes the next odd number into one cache line and waits for thread 1 to answer
  // with the even one: each round trip moves the line twice. A repetition is kTrips round trips
  // or kRepSeconds, whichever comes first (on a machine so busy that the two threads seldom run
  // at once, a trip takes a scheduler slice: then that is what a transfer costs the pool, and the
  // figure says so); past kBudget seconds in all, no more repetitions start.
  constexpr int64_t kTrips = 2000;
  constexpr double kRepSeconds = 0.02, kBudget = 0.5;
  alignas(64) static std::atomic<int64_t> ball;
  alignas(64) static std::atomic<bool> done;
  ball.store(0);
  done.store(false);
  std::vector<double> ns;
  bool paired = false;
#pragma omp parallel num_threads(2)
  {
    if (omp_get_num_threads() == 2 && omp_get_thread_num() == 0) {
      paired = true;
      const double start = now_s();
      int64_t k = 0;  // round trips so far
      for (int rep = 0; rep < repetitions && now_s() - start < kBudget; ++rep) {
        const double t0 = now_s();
        int64_t trips = 0;
        for (bool more = true; more;) {
          const int64_t serve = 2 * k + 1;
          ball.store(serve, std::memory_order_release);
          for (int spin = 1; ball.load(std::memory_order_acquire) != serve + 1; ++spin) {
            wait_a_little(spin);
          }
          ++k;
          // The clock is read every 64 trips only: a read costs about as much as a transfer.
          more = ++trips < kTrips && (trips % 64 != 0 || now_s() - t0 < kRepSeconds);
        }
        ns.push_back((now_s() - t0) * 1e9 / double(2 * trips));
      }
      done.store(true, std::memory_order_release);
    } else if (omp_get_num_threads() == 2) {
      for (int64_t k = 0;; ++k) {
        bool quit = false;
        for (int spin = 1; ball.load(std::memory_order_acquire) != 2 * k + 1; ++spin) {
          if (done.load(std::memory_order_acquire)) {
            quit = true;
            break;
          }
          wait_a_little(spin);
        }
        if (quit) break;
        ball.store(2 * k + 2, std::memory_order_release);
      }
    }
  }
  if (!paired || ns.empty()) return r;
  std::sort(ns.begin(), ns.end());
  r.repetitions = int(ns.size());
  r.bytes_or_ops = double(2 * kTrips);
  r.value = ns.front();  // the lowest: the latency with the least interference
  const size_t n = ns.size();
  r.median = n % 2 ? ns[n / 2] : 0.5 * (ns[n / 2 - 1] + ns[n / 2]);
  return r;
}

}  // namespace latprof::cpu
