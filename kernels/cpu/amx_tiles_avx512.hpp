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

}  // namespace latprof::cpu::detail
