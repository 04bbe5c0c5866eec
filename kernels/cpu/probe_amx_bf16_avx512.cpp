// The AMX-BF16 tile peak (probe.cpp's probe_amx_bf16_peak): tile products in registers only,
// four independent accumulators, as the AMX-INT8 probe's.
#include <immintrin.h>

#include <cstdint>

#include "kernels/cpu/amx_tiles_avx512.hpp"
#include "kernels/cpu/internal.hpp"

namespace latprof::cpu::detail {

int64_t tdpbf16ps_chains_amx(int64_t iters) {
  alignas(64) static thread_local uint16_t ab[2][512];
  alignas(64) static thread_local float c[256];
  for (int i = 0; i < 512; ++i) {  // small bf16 values (sign, exponent near 2^-10)
    ab[0][i] = uint16_t(0x3A80 + i % 7);
    ab[1][i] = uint16_t(0xBA80 + i % 5);
  }
  tile_chains(iters, ab[0], ab[1], c, [] {
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
  });
  return int64_t(c[0] + c[255]);
}

}  // namespace latprof::cpu::detail
