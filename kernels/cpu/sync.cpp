// The thread pool's synchronisation accounting (kernels.hpp: SyncStats; internal.hpp:
// SyncRegion): per parallel region, each thread's late start and its idle time at barriers; and
// its threads' time off their CPUs (kernels.hpp: OffCpuStats).
#include <fcntl.h>
#include <omp.h>
#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <vector>

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

// ---- time off the CPUs (kernels.hpp: OffCpuStats) ---------------------------------------------

namespace {

// One thread's team: its threads' schedstat files, open, and what they said at the last call.
struct Team {
  pthread_t owner{};
  int threads = 0;
  std::vector<int> fds;
  std::vector<int64_t> run, delay;
  int64_t wall = 0;
  bool ok = false;
  bool unavailable = false;  // no schedstat files, or a smaller team: not tried again for it
  void close_all() {
    for (int fd : fds)
      if (fd >= 0) ::close(fd);
    fds.clear();
    ok = false;
  }
  ~Team() { close_all(); }
};

// The run time and run delay (ns) a schedstat file says now ("<run> <delay> <slices>").
bool read_schedstat(int fd, int64_t& run, int64_t& delay) {
  char buf[96];
  const ssize_t n = ::pread(fd, buf, sizeof(buf) - 1, 0);
  if (n <= 0) return false;
  buf[n] = 0;
  long long r = 0, d = 0;
  if (std::sscanf(buf, "%lld %lld", &r, &d) != 2) return false;
  run = r;
  delay = d;
  return true;
}

// Opens the schedstat files of the calling thread's team (the threads of a parallel region of
// omp_get_max_threads(): the same threads its later regions run on) and reads them.
void open_team(Team& t) {
  t.close_all();
  const int n = omp_get_max_threads();
  std::vector<pid_t> tids(size_t(n), 0);
  int got = 0;
#pragma omp parallel num_threads(n)
  {
    const int i = omp_get_thread_num();
    if (i < n) tids[size_t(i)] = pid_t(::syscall(SYS_gettid));
#pragma omp single
    got = omp_get_num_threads();
  }
  t.owner = pthread_self();
  t.threads = n;
  t.unavailable = true;
  if (got != n) return;  // a smaller team (nested, or limited): not counted
  for (pid_t tid : tids) {
    char path[64];
    std::snprintf(path, sizeof(path), "/proc/self/task/%d/schedstat", int(tid));
    t.fds.push_back(::open(path, O_RDONLY | O_CLOEXEC));
    if (t.fds.back() < 0) return;
  }
  t.run.assign(size_t(n), 0);
  t.delay.assign(size_t(n), 0);
  t.wall = now_ns();
  for (int i = 0; i < n; ++i)
    if (!read_schedstat(t.fds[size_t(i)], t.run[size_t(i)], t.delay[size_t(i)])) return;
  t.ok = true;
  t.unavailable = false;
}

}  // namespace

OffCpuStats take_offcpu_stats() {
  OffCpuStats s;
  thread_local Team team;
  const bool same =
      pthread_equal(team.owner, pthread_self()) && team.threads == omp_get_max_threads();
  if (!same || (!team.ok && !team.unavailable)) {
    open_team(team);  // counting starts now
    return s;
  }
  if (!team.ok) return s;
  const int64_t wall = now_ns();
  const int64_t dw = wall - team.wall;
  team.wall = wall;
  double off = 0, runq = 0;
  for (int i = 0; i < team.threads; ++i) {
    int64_t run = 0, delay = 0;
    if (!read_schedstat(team.fds[size_t(i)], run, delay)) {  // the thread is gone
      team.close_all();
      return s;
    }
    const double o = std::max<double>(0, double(dw - (run - team.run[size_t(i)])));
    off += o;
    runq += std::min(o, std::max<double>(0, double(delay - team.delay[size_t(i)])));
    team.run[size_t(i)] = run;
    team.delay[size_t(i)] = delay;
  }
  s.available = true;
  s.threads = team.threads;
  s.wall_ns = double(dw);
  s.offcpu_ns = off / team.threads;
  s.runq_ns = runq / team.threads;
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
