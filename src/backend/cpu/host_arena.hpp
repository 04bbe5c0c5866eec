#pragma once
// Host memory for the CPU backend's buffers (weights, KV cache, activations), by size:
// - large (>= 2 MiB): an allocation of its own, 2 MiB aligned and asked to be backed by
//   transparent huge pages;
// - mid-sized (64 KiB to 2 MiB): carved, 4 KiB aligned, out of shared 2 MiB slabs that are
//   asked for huge pages the same way;
// - small: the heap, 64-byte aligned.
// Why the slabs: tinyllama-1.1b's K and V projections (512 KiB in INT8) came from the heap on
// 4 KiB pages, where the hardware prefetchers stop at every page and the TLB misses every 4 KiB:
// its decode read them at half the rate of the other weights (the q/k/v group 1.13x the time of
// the same bytes on huge pages; reports/cpu-kernels.md).
#include <cstddef>
#include <mutex>
#include <vector>

namespace latprof {

class HostArena {
 public:
  static constexpr size_t kHuge = size_t(2) << 20;  // a slab, and the large threshold
  static constexpr size_t kMid = size_t(64) << 10;  // smallest size carved from a slab
  static constexpr size_t kPage = size_t(4) << 10;  // alignment within a slab

  HostArena() = default;
  HostArena(const HostArena&) = delete;
  HostArena& operator=(const HostArena&) = delete;
  ~HostArena();

  // nullptr when the memory is not there (bytes == 0 gives a valid small allocation).
  void* allocate(size_t bytes);
  // p from allocate (nullptr: nothing). A slab is freed with its last allocation.
  void release(void* p);
  // Slabs held now (for tests).
  size_t slabs() const;

 private:
  struct Slab {
    char* base;
    size_t used;  // bytes handed out from base (the next allocation starts there, page aligned)
    int live;     // allocations not yet released
  };
  mutable std::mutex mu_;
  std::vector<Slab> slabs_;  // the last one takes new allocations
};

}  // namespace latprof
