// Runtime of the CUDA emulation of the tests (the design and its limits: cuemu.hpp). This file is
// compiled without instrumentation; in the default build it supplies the __tsan_* callbacks that
// GCC's -fsanitize=thread inserts into the kernel sources, and checks shared and device memory
// accesses there.
#undef _FORTIFY_SOURCE  // _longjmp between fiber stacks is what it is meant to refuse
#include "cuemu.hpp"

#include <setjmp.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>

#if defined(__SANITIZE_ADDRESS__)
#define CUEMU_ASAN 1
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#else
#define CUEMU_ASAN 0
#endif

namespace cuemu {

namespace {

// ---- global state --------------------------------------------------------------------------
// Never destroyed: a backend held in a static may free device memory after this module's
// static destructors have run.
std::mutex& g_mutex = *new std::mutex;  // faults, options, kernel attributes, allocations
Options initial_options() {
  Options o;
  if (const char* e = std::getenv("CUEMU_SCHEDULE")) o.schedule = std::strtoull(e, nullptr, 10);
  return o;
}
Options g_options = initial_options();
std::vector<std::string>& g_faults = *new std::vector<std::string>;
std::atomic<uint64_t> g_launches{0};
std::set<std::string>& g_launched = *new std::set<std::string>;  // kernel names
std::atomic<int> g_last_error{cudaSuccess};
std::map<const void*, int>& g_max_dynamic =
    *new std::map<const void*, int>;  // kernel -> cudaFuncAttributeMaxDynamicSharedMemorySize

constexpr int kMaxFaultsPerLaunch = 20;
constexpr size_t kSmemGuard = 256;     // before and after the dynamic region
constexpr size_t kSmemGapStatic = 64;  // after each static allocation
constexpr size_t kSmemArena = kSharedOptin + 64 * 1024;
#if CUEMU_ASAN
constexpr size_t kStackBytes = 512 * 1024;
#else
constexpr size_t kStackBytes = 128 * 1024;
#endif

struct LaunchState {
  LaunchConfig cfg;
  Entry entry;
  void* ctx;
  size_t max_dynamic;  // what the kernel may use
  bool optin;          // cudaFuncSetAttribute raised the limit
  std::atomic<int> faults{0};
};

void fault_text(LaunchState* l, const std::string& text) {
  // Tests that do not look at take_faults() (tests/gpu's, run on the emulated module) set
  // CUEMU_ABORT_ON_FAULT=1: the first fault ends the process with its message.
  static const bool abort_on_fault = std::getenv("CUEMU_ABORT_ON_FAULT") != nullptr;
  if (abort_on_fault) {
    std::fprintf(stderr, "cuemu fault: %s\n", text.c_str());
    std::abort();
  }
  const int n = l ? l->faults.fetch_add(1) : 0;
  if (n >= kMaxFaultsPerLaunch) return;
  std::lock_guard<std::mutex> lock(g_mutex);
  g_faults.push_back(text);
}

std::string dims(uint3 d) {
  std::string s(1, '(');
  s += std::to_string(d.x);
  s += ',';
  s += std::to_string(d.y);
  s += ',';
  s += std::to_string(d.z);
  s += ')';
  return s;
}

// ---- device memory arena (default build): never-reused addresses, 8-byte granule shadow ------
// Shadow byte per granule: 0 unallocated or guard, 1..8 first k bytes addressable, kFreed.
#if !CUEMU_ASAN
size_t g_arena_bytes = 0;  // address space reserved (never reused: freed ranges stay shadowed)
constexpr size_t kAllocGuard = 512;
constexpr uint8_t kFreed = 0xfd;
char* g_arena = nullptr;
uint8_t* g_arena_shadow = nullptr;
size_t g_arena_top = 0;
#endif
std::map<uintptr_t, size_t>& g_allocs = *new std::map<uintptr_t, size_t>;  // base -> bytes

#if !CUEMU_ASAN
void arena_init() {
  if (g_arena) return;
  // Address space only (MAP_NORESERVE); smaller reservations where the system refuses a big one.
  for (size_t gib : {64, 16, 4, 1}) {
    const size_t bytes = gib << 30;
    void* a = mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (a == MAP_FAILED) continue;
    void* s = mmap(nullptr, bytes / 8, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (s == MAP_FAILED) {
      munmap(a, bytes);
      continue;
    }
    g_arena = static_cast<char*>(a);
    g_arena_shadow = static_cast<uint8_t*>(s);
    g_arena_bytes = bytes;
    g_arena_top = 4096;
    return;
  }
  std::fprintf(stderr, "cuemu: cannot reserve address space for the device arena\n");
  std::abort();
}

void shadow_mark(size_t off, size_t bytes, bool valid) {
  for (size_t g = off / 8; g < (off + bytes + 7) / 8; ++g) {
    if (!valid) {
      g_arena_shadow[g] = kFreed;
    } else {
      const size_t end = off + bytes - g * 8;
      g_arena_shadow[g] = uint8_t(end >= 8 ? 8 : end);
    }
  }
}

// 0: fine, 1: unallocated / guard, 2: freed.
int arena_check(uintptr_t a, size_t n) {
  for (size_t k = 0; k < n; ++k) {
    const size_t off = a + k - uintptr_t(g_arena);
    const uint8_t s = g_arena_shadow[off / 8];
    if (s == kFreed) return 2;
    if (s == 0 || off % 8 >= s) return 1;
  }
  return 0;
}
#endif

// ---- fibers and blocks -----------------------------------------------------------------------
enum class St : uint8_t { runnable, wait_block, wait_warp, done };

struct Fiber {
  jmp_buf jb;
  ucontext_t uc;
  char* stack = nullptr;
  bool started = false;
  St st = St::runnable;
  uint3 tid{};
  int linear = 0, warp = 0, lane = 0;
  const char* bar_file = nullptr;
  int bar_line = 0;
  // warp collective
  uint64_t x_bits = 0, x_result = 0;
  int x_src = 0, x_kind = 0;
  unsigned x_mask = 0;
#if CUEMU_ASAN
  void* fake_stack = nullptr;
#endif
};

struct Warp {
  unsigned exists = 0;   // lanes present in the block
  unsigned arrived = 0;  // lanes waiting at the current collective
  unsigned sync = 0;     // __syncwarp() completions (orders shared accesses within the warp)
};

// Per shared byte: the allocation it belongs to (block serial) and the last write and reads.
struct ShByte {
  uint32_t alloc = 0;
  uint32_t w_epoch = 0, w_sync = 0, r_epoch = 0, r_sync = 0;
  uint16_t writer = 0, reader = 0;
};
constexpr uint16_t kNone = 0xffff;       // writer/reader: nobody
constexpr uint16_t kMultiWarp = 0xfffe;  // reader: threads of several warps
constexpr uint16_t kSameWarp = 0x8000;   // reader: kSameWarp | warp, several lanes of one warp
constexpr uint16_t kAtomic = 0xfffd;     // writer: an atomic operation

struct SharedAlloc {
  const void* tag;
  const char* name;
  size_t off, bytes;
};

struct Worker {
  // fibers
  char* stacks = nullptr;
  std::vector<Fiber> fibers;
  std::vector<Warp> warps;
  Fiber* cur = nullptr;
  jmp_buf sched_jb;
  ucontext_t sched_uc;
  ucontext_t uc_template;
#if CUEMU_ASAN
  const void* sched_stack_bottom = nullptr;
  size_t sched_stack_size = 0;
#endif
  // the block
  LaunchState* launch = nullptr;
  uint3 bid{};
  int n_threads = 0;
  uint32_t serial = 0, epoch = 0;
  // shared memory
  char* smem = nullptr;
  std::vector<ShByte> shadow;
  size_t dyn_off = kSmemGuard, dyn_bytes = 0, static_cursor = 0, static_total = 0;
  std::vector<SharedAlloc> allocs;
  bool aborted = false;

  Worker() {
    stacks = static_cast<char*>(mmap(nullptr, kStackBytes * kMaxThreads, PROT_READ | PROT_WRITE,
                                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0));
    void* s = nullptr;
    if (stacks == MAP_FAILED || posix_memalign(&s, 4096, kSmemArena) != 0) {
      std::fprintf(stderr, "cuemu: out of memory for a worker\n");
      std::abort();
    }
    for (int i = 0; i < kMaxThreads; ++i)
      mprotect(stacks + size_t(i) * kStackBytes, 4096, PROT_NONE);
    smem = static_cast<char*>(s);
#if !CUEMU_ASAN
    shadow.resize(kSmemArena);
#endif
    fibers.resize(kMaxThreads);
    warps.resize(kMaxThreads / 32);
    getcontext(&uc_template);
  }
  ~Worker() {
    munmap(stacks, kStackBytes * kMaxThreads);
    std::free(smem);
  }

  std::string who(const Fiber* f) const {
    return std::string("kernel ") + launch->cfg.name + " (" + launch->cfg.file + ":" +
           std::to_string(launch->cfg.line) + ") block " + dims(bid) +
           (f ? " thread " + dims(f->tid) : std::string());
  }
  void fault(const Fiber* f, const std::string& what) {
    fault_text(launch, who(f) + ": " + what);
  }

  std::string where(size_t off) const {
    for (const SharedAlloc& a : allocs)
      if (off >= a.off && off < a.off + a.bytes)
        return std::string(a.name) + " + " + std::to_string(off - a.off);
    // the nearest allocation before the byte
    const SharedAlloc* best = nullptr;
    for (const SharedAlloc& a : allocs)
      if (a.off <= off && (!best || a.off > best->off)) best = &a;
    if (best)
      return std::to_string(off - best->off - best->bytes) + " bytes past the end of " +
             best->name + " (" + std::to_string(best->bytes) + " bytes)";
    return "the guard zone before the first allocation";
  }

  void mark_alloc(size_t off, size_t bytes) {
#if CUEMU_ASAN
    ASAN_UNPOISON_MEMORY_REGION(smem + off, bytes);
#endif
    std::memset(smem + off, 0xff, bytes);  // poison: NaN as fp32 and fp16
#if !CUEMU_ASAN
    for (size_t i = off; i < off + bytes; ++i) {
      ShByte& s = shadow[i];
      s.alloc = serial;
      s.writer = kNone;
      s.reader = kNone;
    }
#endif
  }
};

__attribute__((tls_model("initial-exec"))) thread_local Worker* t_worker =
    nullptr;  // set while this OS thread runs a block
std::mutex& g_pool_mutex = *new std::mutex;
std::vector<std::unique_ptr<Worker>>& g_pool = *new std::vector<std::unique_ptr<Worker>>;

[[noreturn]] void fiber_exit(Worker* w);

void fiber_main() {
  Worker* w = t_worker;
#if CUEMU_ASAN
  __sanitizer_finish_switch_fiber(nullptr, &w->sched_stack_bottom, &w->sched_stack_size);
#endif
  w->launch->entry(w->launch->ctx);
  fiber_exit(w);
}

// Fiber -> scheduler, to be resumed later.
void yield(Worker* w) {
  Fiber* f = w->cur;
#if CUEMU_ASAN
  __sanitizer_start_switch_fiber(&f->fake_stack, w->sched_stack_bottom, w->sched_stack_size);
  swapcontext(&f->uc, &w->sched_uc);
  __sanitizer_finish_switch_fiber(f->fake_stack, &w->sched_stack_bottom, &w->sched_stack_size);
#else
  if (_setjmp(f->jb) == 0) _longjmp(w->sched_jb, 1);
#endif
}

[[noreturn]] void fiber_exit(Worker* w) {
  w->cur->st = St::done;
#if CUEMU_ASAN
  __sanitizer_start_switch_fiber(nullptr, w->sched_stack_bottom, w->sched_stack_size);
  setcontext(&w->sched_uc);
#else
  _longjmp(w->sched_jb, 1);
#endif
  std::abort();
}

// Scheduler -> fiber f until it yields or ends.
void resume(Worker* w, Fiber* f) {
  w->cur = f;
#if CUEMU_ASAN
  char* bottom = f->stack;
  if (!f->started) {
    f->started = true;
    f->uc = w->uc_template;
    f->uc.uc_stack.ss_sp = f->stack;
    f->uc.uc_stack.ss_size = kStackBytes - 4096;
    f->uc.uc_link = nullptr;
    makecontext(&f->uc, fiber_main, 0);
  }
  void* fake = nullptr;
  __sanitizer_start_switch_fiber(&fake, bottom, kStackBytes - 4096);
  swapcontext(&w->sched_uc, &f->uc);
  __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#else
  if (_setjmp(w->sched_jb) == 0) {
    if (!f->started) {
      f->started = true;
      f->uc = w->uc_template;
      f->uc.uc_stack.ss_sp = f->stack;
      f->uc.uc_stack.ss_size = kStackBytes - 4096;
      f->uc.uc_link = nullptr;
      makecontext(&f->uc, fiber_main, 0);
      setcontext(&f->uc);
    }
    _longjmp(f->jb, 1);
  }
#endif
  w->cur = nullptr;
}

uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

void complete_warp(Worker* w, int wi);

// Runs every thread of block `b` of the launch to its end.
void run_block(Worker* w, LaunchState* l, uint64_t b) {
  const LaunchConfig& c = l->cfg;
  w->launch = l;
  w->bid = {unsigned(b % c.grid.x), unsigned(b / c.grid.x % c.grid.y),
            unsigned(b / (uint64_t(c.grid.x) * c.grid.y))};
  w->n_threads = int(c.block.x * c.block.y * c.block.z);
  ++w->serial;
  ++w->epoch;
  w->aborted = false;
  // Shared memory: guard, dynamic region, guard, then the static allocations as they are reached.
#if CUEMU_ASAN
  ASAN_POISON_MEMORY_REGION(w->smem, kSmemArena);
#endif
  w->allocs.clear();
  w->dyn_off = kSmemGuard;
  w->dyn_bytes = c.smem;
  if (c.smem) {
    w->mark_alloc(w->dyn_off, c.smem);
    w->allocs.push_back({nullptr, "extern __shared__", w->dyn_off, c.smem});
  }
  w->static_cursor = w->dyn_off + ((c.smem + 15) / 16) * 16 + kSmemGuard;
  w->static_total = 0;
  for (int i = 0; i < w->n_threads / 32 + 1 && i < int(w->warps.size()); ++i) w->warps[i] = Warp{};
  for (int i = 0; i < w->n_threads; ++i) {
    Fiber& f = w->fibers[size_t(i)];
    f.started = false;
    f.st = St::runnable;
    f.stack = w->stacks + size_t(i) * kStackBytes + 4096;
    f.linear = i;
    f.tid = {unsigned(i) % c.block.x, unsigned(i) / c.block.x % c.block.y,
             unsigned(i) / (c.block.x * c.block.y)};
    f.warp = i / 32;
    f.lane = i % 32;
    w->warps[size_t(f.warp)].exists |= 1u << f.lane;
  }
  const uint64_t sched = g_options.schedule;
  uint64_t rng = mix(sched * 0x1000193ull + b);
  std::vector<int> order;
  order.reserve(size_t(w->n_threads));
  for (;;) {
    order.clear();
    for (int i = 0; i < w->n_threads; ++i)
      if (w->fibers[size_t(i)].st == St::runnable) order.push_back(i);
    if (order.empty()) {
      // Everyone is done or waiting: release a barrier, finish a warp collective whose missing
      // lanes exited, or report what is stuck.
      int n_block = 0, n_warp = 0, n_done = 0;
      const Fiber* first_block = nullptr;
      bool sites_differ = false;
      for (int i = 0; i < w->n_threads; ++i) {
        const Fiber& f = w->fibers[size_t(i)];
        if (f.st == St::done) ++n_done;
        if (f.st == St::wait_warp) ++n_warp;
        if (f.st == St::wait_block) {
          if (!first_block)
            first_block = &f;
          else if (f.bar_line != first_block->bar_line ||
                   std::strcmp(f.bar_file, first_block->bar_file) != 0)
            sites_differ = true;
          ++n_block;
        }
      }
      if (n_done == w->n_threads) break;
      if (n_warp > 0) {
        bool progressed = false;
        for (size_t wi = 0; wi < w->warps.size() && wi * 32 < size_t(w->n_threads); ++wi) {
          Warp& wp = w->warps[wi];
          if (!wp.arrived) continue;
          unsigned missing = 0;
          for (int ln = 0; ln < 32; ++ln)
            if ((wp.exists >> ln & 1) && !(wp.arrived >> ln & 1)) {
              const Fiber& f = w->fibers[wi * 32 + size_t(ln)];
              const Fiber& a = w->fibers[wi * 32 + size_t(__builtin_ctz(wp.arrived))];
              if ((a.x_mask >> ln & 1) && f.st != St::done) missing |= 1u << ln;
            }
          if (!missing) {
            // The lanes still expected exited: the collective completes without them.
            const Fiber& a = w->fibers[wi * 32 + size_t(__builtin_ctz(wp.arrived))];
            const unsigned gone = a.x_mask & wp.exists & ~wp.arrived;
            if (gone)
              w->fault(&a, "warp collective with lane " + std::to_string(__builtin_ctz(gone)) +
                               " of the mask exited");
            complete_warp(w, int(wi));
            progressed = true;
          }
        }
        if (progressed) continue;
        w->fault(nullptr, "deadlock: " + std::to_string(n_warp) +
                              " threads wait at a warp shuffle, vote or __syncwarp() for lanes "
                              "that wait at __syncthreads() (" +
                              std::to_string(n_block) + " threads); the block is abandoned");
        w->aborted = true;
        break;
      }
      if (n_done > 0)
        w->fault(first_block, "__syncthreads() at " + std::string(first_block->bar_file) + ":" +
                                  std::to_string(first_block->bar_line) + " reached by " +
                                  std::to_string(n_block) + " of " + std::to_string(w->n_threads) +
                                  " threads; the other " + std::to_string(n_done) + " exited");
      if (sites_differ)
        w->fault(first_block,
                 "threads of the block wait at different __syncthreads() calls "
                 "(one at " +
                     std::string(first_block->bar_file) + ":" +
                     std::to_string(first_block->bar_line) + ")");
      ++w->epoch;
      for (int i = 0; i < w->n_threads; ++i)
        if (w->fibers[size_t(i)].st == St::wait_block) w->fibers[size_t(i)].st = St::runnable;
      continue;
    }
    if (sched == 1) {
      std::reverse(order.begin(), order.end());
    } else if (sched >= 2) {
      for (size_t i = order.size(); i > 1; --i) {
        rng = mix(rng);
        std::swap(order[i - 1], order[size_t(rng % i)]);
      }
    }
    for (int i : order)
      if (w->fibers[size_t(i)].st == St::runnable) resume(w, &w->fibers[size_t(i)]);
  }
  w->launch = nullptr;
}

void complete_warp(Worker* w, int wi) {
  Warp& wp = w->warps[size_t(wi)];
  Fiber* lanes = &w->fibers[size_t(wi) * 32];
  const int kind = lanes[__builtin_ctz(wp.arrived)].x_kind;
  unsigned ballot = 0;
  for (int ln = 0; ln < 32; ++ln)
    if (wp.arrived >> ln & 1) {
      if (lanes[ln].x_kind != kind)
        w->fault(&lanes[ln],
                 "lanes of one warp meet at different collectives (shuffle, vote, "
                 "__syncwarp) at the same time");
      if (lanes[ln].x_bits) ballot |= 1u << ln;
    }
  for (int ln = 0; ln < 32; ++ln) {
    if (!(wp.arrived >> ln & 1)) continue;
    Fiber& f = lanes[ln];
    if (kind == 0) {
      const int src = f.x_src & 31;
      if (!(wp.arrived >> src & 1)) {
        w->fault(&f, "shuffle reads lane " + std::to_string(src) + ", which did not take part");
        f.x_result = f.x_bits;
      } else {
        f.x_result = lanes[src].x_bits;
      }
    } else {
      f.x_result = ballot;
    }
    f.st = St::runnable;
  }
  if (kind == 2) ++wp.sync;
  wp.arrived = 0;
}

// A collective of the current lane; returns once all lanes of `mask` arrived.
uint64_t collective(unsigned mask, int kind, uint64_t bits, int src) {
  Worker* w = t_worker;
  if (!w || !w->cur) trap("warp collective outside a kernel");
  Fiber* f = w->cur;
  Warp& wp = w->warps[size_t(f->warp)];
  if (!(mask >> f->lane & 1))
    w->fault(f, "calls a warp collective with a mask that leaves out its own lane");
  for (int ln = 0; ln < 32; ++ln)
    if ((mask & wp.exists) >> ln & 1 &&
        w->fibers[size_t(f->warp) * 32 + size_t(ln)].st == St::done) {
      w->fault(f, "warp collective with lane " + std::to_string(ln) + " of the mask exited");
      break;
    }
  f->x_bits = bits;
  f->x_src = src;
  f->x_kind = kind;
  f->x_mask = mask;
  f->st = St::wait_warp;
  wp.arrived |= 1u << f->lane;
  unsigned need = mask & wp.exists;
  for (int ln = 0; ln < 32; ++ln)
    if (need >> ln & 1 && w->fibers[size_t(f->warp) * 32 + size_t(ln)].st == St::done)
      need &= ~(1u << ln);
  if ((wp.arrived & need) == need)
    complete_warp(w, f->warp);
  else
    yield(w);
  return f->x_result;
}

#if !CUEMU_ASAN
// ---- shared and device memory checks (the __tsan_* callbacks) --------------------------------
void shared_access(Worker* w, size_t off, size_t n, bool write) {
  Fiber* f = w->cur;
  if (!f) return;
  const uint16_t me = uint16_t(f->linear);
  const unsigned my_sync = w->warps[size_t(f->warp)].sync;
  const uint32_t E = w->epoch;
  auto ordered = [&](uint16_t other, uint32_t other_sync) {
    return other == me || (other / 32 == f->warp && my_sync > other_sync);
  };
  auto tid_of = [&](uint16_t lin) { return dims(w->fibers[lin].tid); };
  for (size_t i = off; i < off + n && i < kSmemArena; ++i) {
    ShByte& s = w->shadow[i];
    if (s.alloc != w->serial) {
      w->fault(f, std::string(write ? "writes" : "reads") +
                      " shared memory out of bounds: " + w->where(i));
      return;
    }
    if (!write) {
      if (s.writer == kNone) {
        w->fault(f, "reads shared " + w->where(i) + ", which no thread of the block wrote");
        return;
      }
      if (s.writer != me && s.w_epoch == E &&
          (s.writer == kAtomic || !ordered(s.writer, s.w_sync))) {
        w->fault(f, "reads shared " + w->where(i) + " written by thread " +
                        (s.writer == kAtomic ? std::string("(atomic)") : tid_of(s.writer)) +
                        " with no __syncthreads() (or __syncwarp() in one warp) between: race");
        return;
      }
      // Remember the reads of this epoch for write-after-read checks.
      if (s.r_epoch != E || s.reader == kNone) {
        s.reader = me;
        s.r_sync = my_sync;
        s.r_epoch = E;
      } else if (s.reader == me) {
        s.r_sync = my_sync;
      } else if (s.reader < kSameWarp) {
        if (s.reader / 32 != f->warp) {
          s.reader = kMultiWarp;
        } else if (my_sync > s.r_sync) {
          s.reader = me;
          s.r_sync = my_sync;
        } else {
          s.reader = uint16_t(kSameWarp | f->warp);
        }
      } else if (s.reader != kMultiWarp) {
        if ((s.reader & ~kSameWarp) != f->warp) {
          s.reader = kMultiWarp;
        } else if (my_sync > s.r_sync) {
          s.reader = me;
          s.r_sync = my_sync;
        }
      }
    } else {
      if (s.writer != kNone && s.writer != me && s.w_epoch == E &&
          (s.writer == kAtomic || !ordered(s.writer, s.w_sync))) {
        w->fault(f, "writes shared " + w->where(i) + " also written by thread " +
                        (s.writer == kAtomic ? std::string("(atomic)") : tid_of(s.writer)) +
                        " with no __syncthreads() between: race");
        return;
      }
      if (s.reader != kNone && s.r_epoch == E) {
        bool ok;
        if (s.reader == kMultiWarp)
          ok = false;
        else if (s.reader >= kSameWarp)
          ok = (s.reader & ~kSameWarp) == f->warp && my_sync > s.r_sync;
        else
          ok = ordered(s.reader, s.r_sync);
        if (!ok) {
          w->fault(f, "writes shared " + w->where(i) + " read by " +
                          (s.reader < kSameWarp ? "thread " + tid_of(s.reader)
                                                : std::string("other threads")) +
                          " with no __syncthreads() between: race");
          return;
        }
      }
      s.writer = me;
      s.w_epoch = E;
      s.w_sync = my_sync;
      s.reader = kNone;
    }
  }
}

void shared_atomic(Worker* w, size_t off, size_t n) {
  for (size_t i = off; i < off + n && i < kSmemArena; ++i) {
    ShByte& s = w->shadow[i];
    if (s.alloc != w->serial) {
      w->fault(w->cur, "atomic on shared memory out of bounds: " + w->where(i));
      return;
    }
    s.writer = kAtomic;
    s.w_epoch = w->epoch;
    s.reader = kNone;
  }
}

inline void check_access(const void* p, size_t n, bool write) {
  Worker* w = t_worker;
  if (!w || !w->cur) return;  // host code of the kernel sources
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  const uintptr_t so = a - reinterpret_cast<uintptr_t>(w->smem);
  if (so < kSmemArena) {
    shared_access(w, size_t(so), n, write);
    return;
  }
  if (a - reinterpret_cast<uintptr_t>(g_arena) < g_arena_bytes) {
    const int r = arena_check(a, n);
    if (r)
      w->fault(w->cur,
               std::string(write ? "writes " : "reads ") + std::to_string(n) +
                   " bytes of device memory " +
                   (r == 2 ? "that was freed" : "outside every allocation (out of bounds)"));
  }
}

inline void atomic_access(const void* p, size_t n) {
  Worker* w = t_worker;
  if (!w || !w->cur) return;
  const uintptr_t so = reinterpret_cast<uintptr_t>(p) - reinterpret_cast<uintptr_t>(w->smem);
  if (so < kSmemArena)
    shared_atomic(w, size_t(so), n);
  else
    check_access(p, n, true);
}
#endif

}  // namespace

// ---- public API --------------------------------------------------------------------------------
void set_options(const Options& o) {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_options = o;
}
Options options() {
  std::lock_guard<std::mutex> lock(g_mutex);
  return g_options;
}
std::vector<std::string> take_faults() {
  std::lock_guard<std::mutex> lock(g_mutex);
  std::vector<std::string> f;
  f.swap(g_faults);
  return f;
}
uint64_t launch_count() {
  return g_launches.load();
}
std::vector<std::string> launched_kernels() {
  std::lock_guard<std::mutex> lock(g_mutex);
  return {g_launched.begin(), g_launched.end()};
}
bool access_checks() {
  return !CUEMU_ASAN;
}

uint3 thread_idx() {
  Worker* w = t_worker;
  if (!w || !w->cur) trap("threadIdx outside a kernel");
  return w->cur->tid;
}
uint3 block_idx() {
  Worker* w = t_worker;
  if (!w || !w->cur) trap("blockIdx outside a kernel");
  return w->bid;
}
dim3 block_dim() {
  Worker* w = t_worker;
  if (!w || !w->cur) trap("blockDim outside a kernel");
  return w->launch->cfg.block;
}
dim3 grid_dim() {
  Worker* w = t_worker;
  if (!w || !w->cur) trap("gridDim outside a kernel");
  return w->launch->cfg.grid;
}

void syncthreads(const char* file, int line) {
  Worker* w = t_worker;
  if (!w || !w->cur) trap("__syncthreads() outside a kernel");
  Fiber* f = w->cur;
  f->st = St::wait_block;
  f->bar_file = file;
  f->bar_line = line;
  yield(w);
}

void syncwarp(unsigned mask) {
  collective(mask, 2, 0, 0);
}
uint64_t warp_exchange(unsigned mask, int kind, uint64_t bits, int src_lane) {
  return collective(mask, kind, bits, src_lane);
}
unsigned warp_ballot(unsigned mask, bool pred) {
  return unsigned(collective(mask, 1, pred ? 1 : 0, 0)) & mask;
}

void* shared_static(const void* tag, const char* name, size_t bytes, size_t align) {
  Worker* w = t_worker;
  if (!w || !w->cur) trap("__shared__ outside a kernel");
  for (const SharedAlloc& a : w->allocs)
    if (a.tag == tag) return w->smem + a.off;
  align = std::max<size_t>(align, 16);
  const size_t off = (w->static_cursor + align - 1) / align * align;
  if (off + bytes + kSmemGapStatic > kSmemArena) trap("static __shared__ memory beyond 227 KiB");
  w->static_total += bytes;
  const size_t limit = w->launch->optin ? kSharedOptin : kSharedDefault;
  if (w->static_total + w->dyn_bytes > limit)
    w->fault(w->cur, "shared memory " + std::to_string(w->static_total) + " static + " +
                         std::to_string(w->dyn_bytes) + " dynamic bytes exceeds the " +
                         std::to_string(limit / 1024) + " KiB a block may use");
  w->mark_alloc(off, bytes);
  w->allocs.push_back({tag, name, off, bytes});
  w->static_cursor = off + bytes + kSmemGapStatic;
  return w->smem + off;
}

void* shared_dynamic(size_t /*align*/) {
  Worker* w = t_worker;
  if (!w || !w->cur) trap("extern __shared__ outside a kernel");
  return w->smem + w->dyn_off;
}

void trap(const char* what) {
  Worker* w = t_worker;
  if (!w || !w->cur) {
    std::fprintf(stderr, "cuemu: %s\n", what);
    std::abort();
  }
  w->fault(w->cur, std::string(what) + " (the thread stops)");
  fiber_exit(w);
}

cudaError_t set_max_dynamic_shared(const void* kernel, int bytes) {
  if (bytes < 0 || size_t(bytes) > kSharedOptin) return cudaErrorInvalidValue;
  std::lock_guard<std::mutex> lock(g_mutex);
  g_max_dynamic[kernel] = bytes;
  return cudaSuccess;
}

void launch(const void* kernel, const LaunchConfig& cfg, Entry entry, void* ctx) {
  g_launches.fetch_add(1);
  {
    const std::string name(cfg.name);
    std::lock_guard<std::mutex> lock(g_mutex);
    g_launched.insert(name.substr(0, name.find('<')));
  }
  LaunchState l;
  l.cfg = cfg;
  l.entry = entry;
  l.ctx = ctx;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    auto it = g_max_dynamic.find(kernel);
    l.optin = it != g_max_dynamic.end();
    l.max_dynamic = l.optin ? size_t(it->second) : kSharedDefault;
  }
  const uint64_t threads = uint64_t(cfg.block.x) * cfg.block.y * cfg.block.z;
  const uint64_t blocks = uint64_t(cfg.grid.x) * cfg.grid.y * cfg.grid.z;
  if (threads == 0 || threads > kMaxThreads || cfg.block.z > 64 || blocks == 0 ||
      cfg.grid.y > 65535 || cfg.grid.z > 65535 || cfg.grid.x > 0x7fffffffu) {
    g_last_error = cudaErrorInvalidConfiguration;
    return;
  }
  if (cfg.smem > l.max_dynamic) {
    g_last_error = cudaErrorInvalidValue;
    return;
  }
  Options o = options();
  int n = o.workers;
  if (const char* e = std::getenv("CUEMU_WORKERS")) n = std::atoi(e);
  if (n <= 0) n = int(std::clamp(std::thread::hardware_concurrency(), 1u, 8u));
  n = int(std::min<uint64_t>(uint64_t(n), blocks));
  std::vector<Worker*> ws;
  {
    std::lock_guard<std::mutex> lock(g_pool_mutex);
    while (g_pool.size() < size_t(n)) g_pool.push_back(std::make_unique<Worker>());
    for (int i = 0; i < n; ++i) ws.push_back(g_pool[size_t(i)].get());
  }
  std::atomic<uint64_t> next{0};
  auto work = [&](Worker* w) {
    Worker* saved = t_worker;
    t_worker = w;
    for (uint64_t b; (b = next.fetch_add(1)) < blocks;) run_block(w, &l, b);
    t_worker = saved;
  };
  if (n == 1) {
    work(ws[0]);
  } else {
    std::vector<std::thread> th;
    for (int i = 1; i < n; ++i) th.emplace_back(work, ws[size_t(i)]);
    work(ws[0]);
    for (std::thread& t : th) t.join();
  }
  const int f = l.faults.load();
  if (f > kMaxFaultsPerLaunch)
    fault_text(nullptr, std::string("kernel ") + cfg.name + ": " +
                            std::to_string(f - kMaxFaultsPerLaunch) + " more faults not shown");
}

}  // namespace cuemu

// ---- runtime API -------------------------------------------------------------------------------
using namespace cuemu;

cudaError_t cudaGetLastError() {
  return cudaError_t(g_last_error.exchange(cudaSuccess));
}
cudaError_t cudaPeekAtLastError() {
  return cudaError_t(g_last_error.load());
}
const char* cudaGetErrorName(cudaError_t e) {
  switch (e) {
    case cudaSuccess:
      return "cudaSuccess";
    case cudaErrorInvalidValue:
      return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation:
      return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidConfiguration:
      return "cudaErrorInvalidConfiguration";
    case cudaErrorInvalidDeviceFunction:
      return "cudaErrorInvalidDeviceFunction";
    case cudaErrorLaunchFailure:
      return "cudaErrorLaunchFailure";
    case cudaErrorInsufficientDriver:
      return "cudaErrorInsufficientDriver";
    case cudaErrorNoDevice:
      return "cudaErrorNoDevice";
    case cudaErrorInvalidResourceHandle:
      return "cudaErrorInvalidResourceHandle";
    case cudaErrorStreamCaptureUnsupported:
      return "cudaErrorStreamCaptureUnsupported";
  }
  return "cudaError?";
}
const char* cudaGetErrorString(cudaError_t e) {
  switch (e) {
    case cudaSuccess:
      return "no error";
    case cudaErrorInvalidValue:
      return "invalid argument";
    case cudaErrorMemoryAllocation:
      return "out of memory";
    case cudaErrorInvalidConfiguration:
      return "invalid configuration argument";
    case cudaErrorInvalidDeviceFunction:
      return "invalid device function";
    case cudaErrorLaunchFailure:
      return "unspecified launch failure";
    case cudaErrorInsufficientDriver:
      return "CUDA driver version is insufficient";
    case cudaErrorNoDevice:
      return "no CUDA-capable device is detected";
    case cudaErrorInvalidResourceHandle:
      return "invalid resource handle";
    case cudaErrorStreamCaptureUnsupported:
      return "operation not permitted when stream is capturing";
  }
  return "unknown error";
}

cudaError_t cudaMalloc(void** p, size_t bytes) {
  std::lock_guard<std::mutex> lock(g_mutex);
#if CUEMU_ASAN
  if (posix_memalign(p, 256, bytes ? bytes : 1) != 0) return cudaErrorMemoryAllocation;
#else
  arena_init();
  const size_t base = (g_arena_top + kAllocGuard + 255) / 256 * 256;
  if (base + bytes + kAllocGuard > g_arena_bytes) return cudaErrorMemoryAllocation;
  g_arena_top = base + bytes;
  shadow_mark(base, bytes, true);
  *p = g_arena + base;
#endif
  g_allocs[reinterpret_cast<uintptr_t>(*p)] = bytes;
  return cudaSuccess;
}

cudaError_t cudaFree(void* p) {
  if (!p) return cudaSuccess;
  std::lock_guard<std::mutex> lock(g_mutex);
  auto it = g_allocs.find(reinterpret_cast<uintptr_t>(p));
  if (it == g_allocs.end()) return cudaErrorInvalidValue;
#if CUEMU_ASAN
  std::free(p);
#else
  const size_t off = size_t(static_cast<char*>(p) - g_arena);
  shadow_mark(off, it->second, false);
  // Give the pages back; the addresses are never handed out again.
  const size_t lo = (off + 4095) / 4096 * 4096, hi = (off + it->second) / 4096 * 4096;
  if (hi > lo) madvise(g_arena + lo, hi - lo, MADV_DONTNEED);
#endif
  g_allocs.erase(it);
  return cudaSuccess;
}

namespace {
// A device range of a copy lies inside one live allocation (host pointers pass unchecked).
bool device_range_ok(const void* p, size_t bytes, const char* what) {
#if CUEMU_ASAN
  (void)p, (void)bytes, (void)what;
  return true;
#else
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  if (!g_arena || a - uintptr_t(g_arena) >= g_arena_bytes || bytes == 0) return true;
  if (arena_check(a, bytes) == 0) return true;
  fault_text(nullptr, std::string(what) + ": " + std::to_string(bytes) +
                          " bytes outside a live device allocation");
  return false;
#endif
}
}  // namespace

cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind) {
  if (!device_range_ok(dst, bytes, "cudaMemcpy destination") ||
      !device_range_ok(src, bytes, "cudaMemcpy source"))
    return cudaErrorInvalidValue;
  if (bytes) std::memmove(dst, src, bytes);
  return cudaSuccess;
}
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind,
                            cudaStream_t s) {
  if (capturing(s)) {
    capture_op(s, [=] { cudaMemcpy(dst, src, bytes, kind); });
    return cudaSuccess;
  }
  return cudaMemcpy(dst, src, bytes, kind);
}
cudaError_t cudaMemset(void* p, int value, size_t bytes) {
  if (!device_range_ok(p, bytes, "cudaMemset")) return cudaErrorInvalidValue;
  if (bytes) std::memset(p, value, bytes);
  return cudaSuccess;
}
cudaError_t cudaMemsetAsync(void* p, int value, size_t bytes, cudaStream_t s) {
  if (capturing(s)) {
    capture_op(s, [=] { cudaMemset(p, value, bytes); });
    return cudaSuccess;
  }
  return cudaMemset(p, value, bytes);
}
cudaError_t cudaDeviceSynchronize() {
  return cudaSuccess;
}

// ---- device, streams, events, graphs -----------------------------------------------------------
struct CUstream_st {
  unsigned flags = 0;
};
struct CUevent_st {
  std::chrono::steady_clock::time_point t{};
  bool recorded = false;
};
struct CUgraph_st {
  std::vector<std::function<void()>> ops;
};
struct CUgraphExec_st {
  std::vector<std::function<void()>> ops;
};

namespace cuemu {
namespace {
constexpr size_t kDeviceMemory = size_t(16) << 30;  // what cudaMemGetInfo reports
thread_local cudaStream_t t_capture_stream = nullptr;
thread_local CUgraph_st* t_capture = nullptr;
}  // namespace

bool capturing(cudaStream_t stream) {
  return t_capture && stream == t_capture_stream;
}
void capture_op(cudaStream_t, std::function<void()> op) {
  t_capture->ops.push_back(std::move(op));
}
}  // namespace cuemu

cudaError_t cudaGetDeviceCount(int* n) {
  *n = 1;
  return cudaSuccess;
}
cudaError_t cudaSetDevice(int dev) {
  return dev == 0 ? cudaSuccess : cudaErrorInvalidValue;
}
cudaError_t cudaGetDevice(int* dev) {
  *dev = 0;
  return cudaSuccess;
}
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* p, int dev) {
  if (dev != 0) return cudaErrorInvalidValue;
  *p = cudaDeviceProp{};
  std::snprintf(p->name, sizeof(p->name), "cuemu (CUDA emulated on the CPU, sm_90 limits)");
  p->totalGlobalMem = cuemu::kDeviceMemory;
  p->sharedMemPerBlock = kSharedDefault;
  p->sharedMemPerBlockOptin = kSharedOptin;
  p->warpSize = 32;
  p->maxThreadsPerBlock = kMaxThreads;
  p->major = 9;
  p->minor = 0;
  p->multiProcessorCount = int(std::max(1u, std::thread::hardware_concurrency()));
  p->l2CacheSize = 50 << 20;
  return cudaSuccess;
}
cudaError_t cudaDeviceGetAttribute(int* v, cudaDeviceAttr attr, int dev) {
  cudaDeviceProp p;
  if (cudaGetDeviceProperties(&p, dev) != cudaSuccess) return cudaErrorInvalidValue;
  switch (attr) {
    case cudaDevAttrMultiProcessorCount:
      *v = p.multiProcessorCount;
      return cudaSuccess;
    case cudaDevAttrComputeCapabilityMajor:
      *v = p.major;
      return cudaSuccess;
    case cudaDevAttrComputeCapabilityMinor:
      *v = p.minor;
      return cudaSuccess;
  }
  return cudaErrorInvalidValue;
}
cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes) {
  std::lock_guard<std::mutex> lock(g_mutex);
  size_t used = 0;
  for (const auto& a : g_allocs) used += a.second;
  *total_bytes = cuemu::kDeviceMemory;
  *free_bytes = used < cuemu::kDeviceMemory ? cuemu::kDeviceMemory - used : 0;
  return cudaSuccess;
}
cudaError_t cudaDriverGetVersion(int* v) {
  *v = 0;  // no driver
  return cudaSuccess;
}
cudaError_t cudaRuntimeGetVersion(int* v) {
  *v = 0;
  return cudaSuccess;
}
cudaError_t cudaStreamCreate(cudaStream_t* s) {
  *s = new CUstream_st;
  return cudaSuccess;
}
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned flags) {
  *s = new CUstream_st{flags};
  return cudaSuccess;
}
cudaError_t cudaStreamDestroy(cudaStream_t s) {
  delete s;
  return cudaSuccess;
}
cudaError_t cudaEventCreate(cudaEvent_t* e) {
  *e = new CUevent_st;
  return cudaSuccess;
}
cudaError_t cudaEventDestroy(cudaEvent_t e) {
  delete e;
  return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) {
  if (capturing(s)) return cudaErrorStreamCaptureUnsupported;
  e->t = std::chrono::steady_clock::now();
  e->recorded = true;
  return cudaSuccess;
}
cudaError_t cudaEventSynchronize(cudaEvent_t e) {
  return e && e->recorded ? cudaSuccess : cudaErrorInvalidResourceHandle;
}
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t from, cudaEvent_t to) {
  if (!from || !to || !from->recorded || !to->recorded) return cudaErrorInvalidResourceHandle;
  *ms = std::chrono::duration<float, std::milli>(to->t - from->t).count();
  return cudaSuccess;
}
cudaError_t cudaStreamBeginCapture(cudaStream_t s, cudaStreamCaptureMode) {
  if (t_capture) return cudaErrorStreamCaptureUnsupported;
  t_capture = new CUgraph_st;
  t_capture_stream = s;
  return cudaSuccess;
}
cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t* g) {
  if (!t_capture || s != t_capture_stream) return cudaErrorInvalidValue;
  *g = t_capture;
  t_capture = nullptr;
  t_capture_stream = nullptr;
  return cudaSuccess;
}
cudaError_t cudaGraphInstantiate(cudaGraphExec_t* e, cudaGraph_t g, unsigned long long) {
  if (!g) return cudaErrorInvalidValue;
  *e = new CUgraphExec_st{g->ops};
  return cudaSuccess;
}
cudaError_t cudaGraphLaunch(cudaGraphExec_t e, cudaStream_t) {
  if (!e) return cudaErrorInvalidValue;
  for (auto& op : e->ops) op();
  return cudaSuccess;
}
cudaError_t cudaGraphDestroy(cudaGraph_t g) {
  delete g;
  return cudaSuccess;
}
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t e) {
  delete e;
  return cudaSuccess;
}
cudaError_t cudaGetDriverEntryPointByVersion(const char*, void** fn, unsigned, unsigned long long,
                                             cudaDriverEntryPointQueryResult*) {
  *fn = nullptr;
  return cudaErrorNoDevice;
}
cudaError_t cudaStreamSynchronize(cudaStream_t) {
  return cudaSuccess;
}

// ---- GCC ThreadSanitizer instrumentation callbacks (default build only) -------------------------
#if !CUEMU_ASAN
extern "C" {
#define CUEMU_RW(N)                         \
  void __tsan_read##N(void* p) {            \
    cuemu::check_access(p, N, false);       \
  }                                         \
  void __tsan_write##N(void* p) {           \
    cuemu::check_access(p, N, true);        \
  }                                         \
  void __tsan_unaligned_read##N(void* p) {  \
    cuemu::check_access(p, N, false);       \
  }                                         \
  void __tsan_unaligned_write##N(void* p) { \
    cuemu::check_access(p, N, true);        \
  }                                         \
  void __tsan_volatile_read##N(void* p) {   \
    cuemu::check_access(p, N, false);       \
  }                                         \
  void __tsan_volatile_write##N(void* p) {  \
    cuemu::check_access(p, N, true);        \
  }
CUEMU_RW(1)
CUEMU_RW(2)
CUEMU_RW(4)
CUEMU_RW(8)
CUEMU_RW(16)
#undef CUEMU_RW
void __tsan_read_range(void* p, unsigned long n) {
  cuemu::check_access(p, n, false);
}
void __tsan_write_range(void* p, unsigned long n) {
  cuemu::check_access(p, n, true);
}
// Clang's instrumentation calls these for memcpy/memset/memmove.
void* __tsan_memcpy(void* d, const void* s, unsigned long n) {
  cuemu::check_access(s, n, false);
  cuemu::check_access(d, n, true);
  return std::memcpy(d, s, n);
}
void* __tsan_memmove(void* d, const void* s, unsigned long n) {
  cuemu::check_access(s, n, false);
  cuemu::check_access(d, n, true);
  return std::memmove(d, s, n);
}
void* __tsan_memset(void* d, int c, unsigned long n) {
  cuemu::check_access(d, n, true);
  return std::memset(d, c, n);
}
void __tsan_init() {}
void __tsan_func_entry(void*) {}
void __tsan_func_exit() {}
void __tsan_vptr_update(void**, void*) {}
void __tsan_vptr_read(void**) {}

// Atomics (the kernels' atomicAdd & co., and libstdc++'s reference counts in host code).
#define CUEMU_ATOMIC(N, T)                                                                    \
  T __tsan_atomic##N##_load(const volatile T* a, int mo) {                                    \
    cuemu::atomic_access(const_cast<const T*>(a), N / 8);                                     \
    return __atomic_load_n(a, mo);                                                            \
  }                                                                                           \
  void __tsan_atomic##N##_store(volatile T* a, T v, int mo) {                                 \
    cuemu::atomic_access(const_cast<const T*>(a), N / 8);                                     \
    __atomic_store_n(a, v, mo);                                                               \
  }                                                                                           \
  T __tsan_atomic##N##_exchange(volatile T* a, T v, int mo) {                                 \
    cuemu::atomic_access(const_cast<const T*>(a), N / 8);                                     \
    return __atomic_exchange_n(a, v, mo);                                                     \
  }                                                                                           \
  T __tsan_atomic##N##_fetch_add(volatile T* a, T v, int mo) {                                \
    cuemu::atomic_access(const_cast<const T*>(a), N / 8);                                     \
    return __atomic_fetch_add(a, v, mo);                                                      \
  }                                                                                           \
  T __tsan_atomic##N##_fetch_sub(volatile T* a, T v, int mo) {                                \
    cuemu::atomic_access(const_cast<const T*>(a), N / 8);                                     \
    return __atomic_fetch_sub(a, v, mo);                                                      \
  }                                                                                           \
  T __tsan_atomic##N##_fetch_and(volatile T* a, T v, int mo) {                                \
    cuemu::atomic_access(const_cast<const T*>(a), N / 8);                                     \
    return __atomic_fetch_and(a, v, mo);                                                      \
  }                                                                                           \
  T __tsan_atomic##N##_fetch_or(volatile T* a, T v, int mo) {                                 \
    cuemu::atomic_access(const_cast<const T*>(a), N / 8);                                     \
    return __atomic_fetch_or(a, v, mo);                                                       \
  }                                                                                           \
  T __tsan_atomic##N##_fetch_xor(volatile T* a, T v, int mo) {                                \
    cuemu::atomic_access(const_cast<const T*>(a), N / 8);                                     \
    return __atomic_fetch_xor(a, v, mo);                                                      \
  }                                                                                           \
  int __tsan_atomic##N##_compare_exchange_strong(volatile T* a, T* c, T v, int mo, int fmo) { \
    cuemu::atomic_access(const_cast<const T*>(a), N / 8);                                     \
    return __atomic_compare_exchange_n(a, c, v, false, mo, fmo);                              \
  }                                                                                           \
  int __tsan_atomic##N##_compare_exchange_weak(volatile T* a, T* c, T v, int mo, int fmo) {   \
    cuemu::atomic_access(const_cast<const T*>(a), N / 8);                                     \
    return __atomic_compare_exchange_n(a, c, v, true, mo, fmo);                               \
  }                                                                                           \
  T __tsan_atomic##N##_compare_exchange_val(volatile T* a, T c, T v, int mo, int fmo) {       \
    cuemu::atomic_access(const_cast<const T*>(a), N / 8);                                     \
    __atomic_compare_exchange_n(a, &c, v, false, mo, fmo);                                    \
    return c;                                                                                 \
  }
CUEMU_ATOMIC(8, uint8_t)
CUEMU_ATOMIC(16, uint16_t)
CUEMU_ATOMIC(32, uint32_t)
CUEMU_ATOMIC(64, uint64_t)
#undef CUEMU_ATOMIC
void __tsan_atomic_thread_fence(int mo) {
  __atomic_thread_fence(mo);
}
void __tsan_atomic_signal_fence(int mo) {
  __atomic_signal_fence(mo);
}
}
#endif
