// The thread pool's synchronisation accounting (kernels.hpp: SyncStats; internal.hpp:
// SyncRegion): per parallel region, each thread's late start and its idle time at barriers.
#include <omp.h>

#include <atomic>
#include <chrono>

#include "kernels/cpu/internal.hpp"

namespace latprof::cpu {
namespace {

std::atomic<int64_t> g_regions{0}, g_thread_regions{0}, g_fork_ns{0}, g_wait_ns{0};  // ns

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

SyncStats take_sync_stats() {
  SyncStats s;
  s.regions = g_regions.exchange(0);
  s.thread_regions = g_thread_regions.exchange(0);
  s.fork_ns = double(g_fork_ns.exchange(0));
  s.wait_ns = double(g_wait_ns.exchange(0));
  return s;
}

namespace detail {

SyncRegion::SyncRegion() : t0_(now_ns()) {}

void SyncRegion::start() {
  const int tid = omp_get_thread_num();
  if (tid == 0) threads_ = omp_get_num_threads();
  if (tid < kMaxThreads) {
    start_[tid] = now_ns();
    waited_[tid] = 0;
  }
}

void SyncRegion::barrier() {
  const int tid = omp_get_thread_num();
  const int64_t a = now_ns();
#pragma omp barrier
  if (tid < kMaxThreads) waited_[tid] += now_ns() - a;
}

void SyncRegion::done() {
  const int tid = omp_get_thread_num();
  if (tid < kMaxThreads) done_[tid] = now_ns();
}

void SyncRegion::finish() {
  const int64_t t1 = now_ns();
  const int n = threads_ < kMaxThreads ? threads_ : kMaxThreads;
  int64_t fork = 0, wait = 0;
  for (int t = 0; t < n; ++t) {
    fork += start_[t] - t0_;
    wait += waited_[t] + (t1 - done_[t]);
  }
  g_regions.fetch_add(1, std::memory_order_relaxed);
  g_thread_regions.fetch_add(n, std::memory_order_relaxed);
  if (n <= 0) return;
  // Wall-equivalent: this region's thread time over its own team size.
  g_fork_ns.fetch_add(fork / n, std::memory_order_relaxed);
  g_wait_ns.fetch_add(wait / n, std::memory_order_relaxed);
}

}  // namespace detail
}  // namespace latprof::cpu
