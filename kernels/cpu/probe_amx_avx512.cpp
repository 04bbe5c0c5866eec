// The AMX-INT8 tile peak (probe.cpp's probe_amx_int8_peak): tile products in registers only,
// four independent accumulators, as the fp32 FMA probe's chains.
#include <immintrin.h>

#include <cstdint>

#include "kernels/cpu/amx_tiles_avx512.hpp"
#include "kernels/cpu/internal.hpp"

namespace latprof::cpu::detail {

int64_t tdpbssd_chains_amx(int64_t iters) {
  alignas(64) static thread_local int8_t ab[2][1024];
  alignas(64) static thread_local int32_t c[256];
  for (int i = 0; i < 1024; ++i) {
    ab[0][i] = int8_t(i % 7 - 3);
    ab[1][i] = int8_t(i % 5 - 2);
  }
  tile_chains(iters, ab[0], ab[1], c, [] {
    _tile_dpbssd(0, 4, 6);
    _tile_dpbssd(1, 4, 7);
    _tile_dpbssd(2, 5, 6);
    _tile_dpbssd(3, 5, 7);
  });
  return c[0] + c[255];
}

}  // namespace latprof::cpu::detail
