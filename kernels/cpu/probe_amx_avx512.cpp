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
  configure_tiles();
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  _tile_loadd(4, ab[0], kTileBytes);
  _tile_loadd(5, ab[1], kTileBytes);
  _tile_loadd(6, ab[1], kTileBytes);
  _tile_loadd(7, ab[0], kTileBytes);
  for (int64_t i = 0; i < iters; ++i) {
    _tile_dpbssd(0, 4, 6);
    _tile_dpbssd(1, 4, 7);
    _tile_dpbssd(2, 5, 6);
    _tile_dpbssd(3, 5, 7);
  }
  _tile_stored(0, c, kTileBytes);
  _tile_release();
  return c[0] + c[255];
}

}  // namespace latprof::cpu::detail
