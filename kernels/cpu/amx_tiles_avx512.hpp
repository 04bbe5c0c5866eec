#pragma once
// The AMX tile configuration the kernels use (gemm_amx_avx512.cpp, probe_amx_avx512.cpp): every
// one of the eight tiles 16 rows of 64 bytes (palette 1). Include only from files compiled with
// AMX-TILE.
#include <immintrin.h>

#include <cstdint>

namespace latprof::cpu::detail {

inline constexpr int64_t kTileRows = 16, kTileBytes = 64, kTile = kTileRows * kTileBytes;

// Loads the configuration on the calling thread (each thread that runs tile instructions; undo
// with _tile_release()).
inline void configure_tiles() {
  struct alignas(64) {
    uint8_t palette = 1, start_row = 0, reserved[14] = {};
    uint16_t colsb[16] = {};
    uint8_t rows[16] = {};
  } c;
  static_assert(sizeof(c) == 64);
  for (int t = 0; t < 8; ++t) {
    c.colsb[t] = kTileBytes;
    c.rows[t] = kTileRows;
  }
  _tile_loadconfig(&c);
}

// The tile peaks' probes (probe_amx*_avx512.cpp): the A tiles 4-5 and B tiles 6-7 loaded from a
// and b (1 KB each), the C tiles 0-3 zeroed, then `iters` times dp4(), which runs four independent
// tile products in registers; C tile 0 is stored to c (1 KB) and the tiles released.
template <class Dp4>
inline void tile_chains(int64_t iters, const void* a, const void* b, void* c, Dp4 dp4) {
  configure_tiles();
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  _tile_loadd(4, a, kTileBytes);
  _tile_loadd(5, b, kTileBytes);
  _tile_loadd(6, b, kTileBytes);
  _tile_loadd(7, a, kTileBytes);
  for (int64_t i = 0; i < iters; ++i) dp4();
  _tile_stored(0, c, kTileBytes);
  _tile_release();
}

}  // namespace latprof::cpu::detail
