#pragma once
// Deliberately broken copies of project kernels (and small kernels with one defect each) that the
// emulation must catch: tests/cuemu/checks_test.cpp asserts that each one is reported.
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

namespace latprof::cuemutest::broken {

// cuda::rmsnorm with the second __syncthreads() of block_sum missing (fp32 shared race).
void rmsnorm_no_sync(const __half* x, const float* w, int64_t rows, int64_t dim, float eps,
                     __half* out);
// cuda::argmax with the __syncthreads() before the cross-warp step missing (int32 indices: NaN
// poisoning cannot see this race, the last-writer tracking must).
void argmax_no_sync(const __half* logits, int64_t n_seq, int64_t vocab, int32_t* tokens);
// cuda::gemm_fallback (fp16) without the __syncthreads() that ends each k tile (write after read).
void gemm_no_trailing_sync(const __half* w, const __half* x, int64_t m, int64_t n_out, int64_t n_in,
                           __half* y);
// The prefill kernel's probability tile without its __syncwarp(): a race inside one warp.
void warp_tile_no_syncwarp(float* out);
// Reads one float past a 32-float shared array.
void shared_off_by_one(float* out);
// Reads a shared word that no thread wrote.
void shared_unwritten(int* out);
// __syncthreads() inside a branch half of the block takes; the other half exits.
void partial_barrier(int* out);
// Half of each warp exits, the other half calls warp_sum (a full-mask shuffle).
void shuffle_with_exited_lanes(float* out);
// Lanes 0..15 of warp 0 wait at __syncthreads() while lanes 16..31 wait at a shuffle: deadlock.
void deadlock(float* out);
// Writes one element past the end of its output (global out of bounds).
void global_off_by_one(float* out, int n);
// 40 KiB static + 16 KiB dynamic shared memory without cudaFuncSetAttribute (over 48 KiB).
void too_much_shared(float* out);
// 64 KiB of dynamic shared memory, with or without cudaFuncSetAttribute's opt-in first;
// returns cudaGetLastError() after the launch.
cudaError_t dynamic_shared_64k(float* out, bool opt_in);
// Not broken: records the order in which the 256 threads of one block pass a point between two
// barriers (order[k] = k-th thread), to show that the schedules differ.
void record_order(int* counter, int* order);
// A launch of 2048 threads per block (a configuration error: cudaGetLastError reports it).
cudaError_t too_many_threads();

}  // namespace latprof::cuemutest::broken
