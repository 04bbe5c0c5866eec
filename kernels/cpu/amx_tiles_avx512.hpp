#pragma once
// What the AMX kernels share (gemm_amx_avx512.cpp, gemm_f16_amx_bf16_avx512.cpp and the probes
// probe_amx*_avx512.cpp): the tile configuration, every one of the eight tiles 16 rows of 64 bytes
// (palette 1); the GEMMs' job split; the probes' tile loop. Include only from files compiled with
// AMX-TILE.
#include <immintrin.h>

#include <algorithm>
#include <cstdint>

#include "kernels/cpu/kernels.hpp"

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

// How the AMX GEMMs share out their work: a job is a block of nc_block output columns of one
// weight of the group and a span of row blocks; it packs its block's weights for all of k once
// (`whole`: in the thread's buffer, up to kWholeMaxIn columns of k) and walks the span's row
// blocks over them. Spans as long as the threads allow (about four jobs a thread). Wider rows
// pack per k slice in jobs of one row block.
struct AmxJobs {
  static constexpr int64_t kWholeMaxIn = 16384;
  // What job j covers: weight `w` of the group, its output columns [n0, n0 + nc), row blocks
  // [rb0, rb1).
  struct Job {
    int w;
    int64_t n0, nc, rb0, rb1;
  };
  const Weight* ws;
  int64_t nc_block, row_blocks;
  bool whole = true;
  int64_t spans = 1, span = 1, n_jobs = 0;
  int64_t first_block[kMatmulGroupMax + 1] = {0};  // weight i's first column block

  AmxJobs(const Weight* ws_, int n, int64_t nc_block_, int64_t row_blocks_, int64_t threads)
      : ws(ws_), nc_block(nc_block_), row_blocks(row_blocks_), whole(ws_[0].n_in <= kWholeMaxIn) {
    for (int i = 0; i < n; ++i)
      first_block[i + 1] = first_block[i] + (ws[i].n_out + nc_block - 1) / nc_block;
    const int64_t col_blocks = first_block[n];
    spans = whole ? std::clamp<int64_t>((4 * threads + col_blocks - 1) / col_blocks, 1, row_blocks)
                  : row_blocks;
    span = (row_blocks + spans - 1) / spans;
    n_jobs = col_blocks * spans;
  }

  Job at(int64_t job) const {
    const int64_t cb = job / spans, sp = job % spans;
    int i = 0;
    while (cb >= first_block[i + 1]) ++i;
    const int64_t n0 = (cb - first_block[i]) * nc_block;
    return {i, n0, std::min(nc_block, ws[i].n_out - n0), sp * span,
            std::min(row_blocks, (sp + 1) * span)};
  }
};

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
