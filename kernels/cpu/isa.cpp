// Instruction-set detection and the run-time switch every kernel dispatches on.
#include <cpuid.h>

#include <atomic>
#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

#include "kernels/cpu/kernels.hpp"

namespace latprof::cpu {
namespace {

Isa detect() {
  __builtin_cpu_init();
  // The AVX-512 files are compiled with F, BW, VL, DQ (and FMA, F16C); require all of them.
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
      __builtin_cpu_supports("fma") && __builtin_cpu_supports("avx2"))
    return __builtin_cpu_supports("f16c") ? Isa::avx512 : Isa::scalar;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
      __builtin_cpu_supports("f16c"))
    return Isa::avx2;
  return Isa::scalar;
}

std::atomic<int> g_forced{-1};

}  // namespace

Isa detected_isa() {
  static const Isa isa = detect();
  return isa;
}

Isa active_isa() {
  const int f = g_forced.load(std::memory_order_relaxed);
  return f < 0 ? detected_isa() : Isa(f);
}

void force_isa(Isa isa) {
  const Isa best = detected_isa();
  g_forced.store(int(isa) > int(best) ? int(best) : int(isa), std::memory_order_relaxed);
}

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::scalar:
      return "scalar";
    case Isa::avx2:
      return "avx2";
    case Isa::avx512:
      return "avx512";
  }
  return "unknown";
}

bool has_vnni() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512vnni") || __builtin_cpu_supports("avxvnni");
}

namespace {

// AMX-TILE and the given feature bit of CPUID.(7, 0):EDX present, and the tile state granted by
// the OS (asked once).
bool amx_feature(int edx_bit) {
  static const bool tiles = [] {
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
    if (!((d >> 24) & 1u)) return false;  // AMX-TILE
#if defined(__linux__) && defined(SYS_arch_prctl)
    constexpr int kReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
    return syscall(SYS_arch_prctl, kReqXcompPerm, kXfeatureXtiledata) == 0;
#else
    return false;
#endif
  }();
  unsigned a = 0, b = 0, c = 0, d = 0;
  return tiles && __get_cpuid_count(7, 0, &a, &b, &c, &d) && ((d >> edx_bit) & 1u);
}

std::atomic<bool> g_amx_enabled{true};

}  // namespace

bool has_amx_int8() {
  static const bool ok = amx_feature(25);
  return ok;
}

bool has_amx_bf16() {
  static const bool ok = amx_feature(22) && has_avx512_bf16();
  return ok;
}

bool amx_int8_active() {
  return active_isa() == Isa::avx512 && g_amx_enabled.load(std::memory_order_relaxed) &&
         has_amx_int8();
}

bool amx_f16_active() {
  return active_isa() == Isa::avx512 && g_amx_enabled.load(std::memory_order_relaxed) &&
         has_amx_bf16();
}

void set_amx_enabled(bool on) {
  g_amx_enabled.store(on, std::memory_order_relaxed);
}

namespace {
// bit 0: set by hand; bit 1: i8_prefetch; bit 2: mha_k_prefetch; bit 3: i8_rows4; bit 4:
// bf16_kv_dot; and f16_one_row_f32_max_in
std::atomic<int> g_tuning{0};
std::atomic<int64_t> g_f32_max_in{0};
}  // namespace

StreamTuning vendor_stream_tuning() {
  static const StreamTuning t = [] {
    __builtin_cpu_init();
    const bool intel = __builtin_cpu_is("intel") != 0;
    StreamTuning v;
    v.i8_prefetch = intel;
    v.f16_one_row_f32_max_in = intel ? 8192 : 0;
    v.mha_k_prefetch = intel;
    v.i8_rows4 = !intel;
    v.bf16_kv_dot = !intel;
    return v;
  }();
  return t;
}

StreamTuning stream_tuning() {
  const int f = g_tuning.load(std::memory_order_relaxed);
  if (!(f & 1)) return vendor_stream_tuning();
  StreamTuning t;
  t.i8_prefetch = (f & 2) != 0;
  t.mha_k_prefetch = (f & 4) != 0;
  t.i8_rows4 = (f & 8) != 0;
  t.bf16_kv_dot = (f & 16) != 0;
  t.f16_one_row_f32_max_in = g_f32_max_in.load(std::memory_order_relaxed);
  return t;
}

void set_stream_tuning(const StreamTuning& t) {
  g_f32_max_in.store(t.f16_one_row_f32_max_in, std::memory_order_relaxed);
  g_tuning.store(1 | (t.i8_prefetch ? 2 : 0) | (t.mha_k_prefetch ? 4 : 0) | (t.i8_rows4 ? 8 : 0) |
                     (t.bf16_kv_dot ? 16 : 0),
                 std::memory_order_relaxed);
}

void reset_stream_tuning() {
  g_tuning.store(0, std::memory_order_relaxed);
}

bool has_avx512_bf16() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512bf16");
}

}  // namespace latprof::cpu
