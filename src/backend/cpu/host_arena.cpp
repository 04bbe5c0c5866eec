#include "backend/cpu/host_arena.hpp"

#include <sys/mman.h>

#include <cstdint>
#include <cstdlib>

namespace latprof {
namespace {

// size bytes rounded up to a multiple of align (nullptr where that overflows or the memory is not
// there); a 2 MiB-aligned block is asked to be backed by transparent huge pages.
void* aligned_block(size_t size, size_t align) {
  if (size > SIZE_MAX - align) return nullptr;
  size = (size + align - 1) / align * align;
  void* p = std::aligned_alloc(align, size);
#if defined(MADV_HUGEPAGE)
  if (p && align == HostArena::kHuge) madvise(p, size, MADV_HUGEPAGE);
#endif
  return p;
}

}  // namespace

HostArena::~HostArena() {
  for (const Slab& s : slabs_) std::free(s.base);
}

void* HostArena::allocate(size_t bytes) {
  if (bytes >= kHuge) return aligned_block(bytes, kHuge);
  if (bytes < kMid) return aligned_block(bytes == 0 ? 1 : bytes, 64);
  const size_t size = (bytes + kPage - 1) / kPage * kPage;
  std::lock_guard<std::mutex> lock(mu_);
  if (slabs_.empty() || kHuge - slabs_.back().used < size) {
    char* base = static_cast<char*>(aligned_block(kHuge, kHuge));
    if (!base) return nullptr;
    slabs_.push_back({base, 0, 0});
  }
  Slab& s = slabs_.back();
  void* p = s.base + s.used;
  s.used += size;
  ++s.live;
  return p;
}

void HostArena::release(void* p) {
  if (!p) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (size_t i = 0; i < slabs_.size(); ++i) {
      Slab& s = slabs_[i];
      if (static_cast<char*>(p) < s.base || static_cast<char*>(p) >= s.base + kHuge) continue;
      if (--s.live == 0) {
        std::free(s.base);
        slabs_.erase(slabs_.begin() + std::ptrdiff_t(i));
      }
      return;
    }
  }
  std::free(p);
}

size_t HostArena::slabs() const {
  std::lock_guard<std::mutex> lock(mu_);
  return slabs_.size();
}

}  // namespace latprof
