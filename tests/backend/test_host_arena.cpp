// The CPU backend's host memory (backend/cpu/host_arena.hpp): alignment by size class, mid-sized
// buffers sharing 2 MiB slabs without overlapping, a slab freed with its last buffer.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "backend/cpu/host_arena.hpp"

namespace latprof {
namespace {

uintptr_t addr(const void* p) {
  return reinterpret_cast<uintptr_t>(p);
}

TEST(HostArena, AlignsBySizeClass) {
  HostArena a;
  void* small = a.allocate(100);
  void* mid = a.allocate(HostArena::kMid + 1);
  void* large = a.allocate(3 * HostArena::kHuge + 5);
  ASSERT_NE(small, nullptr);
  ASSERT_NE(mid, nullptr);
  ASSERT_NE(large, nullptr);
  EXPECT_EQ(addr(small) % 64, 0u);
  EXPECT_EQ(addr(mid) % HostArena::kPage, 0u);
  EXPECT_EQ(addr(large) % HostArena::kHuge, 0u);
  EXPECT_EQ(a.slabs(), 1u);  // only the mid-sized buffer comes from a slab
  std::memset(large, 0x5a, 3 * HostArena::kHuge + 5);
  a.release(small);
  a.release(mid);
  a.release(large);
  EXPECT_EQ(a.slabs(), 0u);
}

TEST(HostArena, MidSizedBuffersShareSlabsWithoutOverlap) {
  HostArena a;
  // tinyllama-1.1b's INT8 K and V projections: 512 KiB each, four to a slab; the fifth opens a
  // second slab. A size that is not a page multiple takes whole pages: the buffer after it starts
  // on a page.
  const size_t sizes[] = {512 << 10, 512 << 10, 512 << 10,      512 << 10,
                          512 << 10, 100 << 10, (64 << 10) + 1, 80 << 10};
  std::vector<unsigned char*> p;
  for (size_t s : sizes) p.push_back(static_cast<unsigned char*>(a.allocate(s)));
  for (size_t i = 0; i < p.size(); ++i) {
    ASSERT_NE(p[i], nullptr);
    EXPECT_EQ(addr(p[i]) % HostArena::kPage, 0u) << i;
    std::memset(p[i], int(i + 1), sizes[i]);  // every byte written: a second owner would clobber
  }
  for (size_t i = 0; i < 4; ++i)
    EXPECT_EQ(addr(p[i]) / HostArena::kHuge, addr(p[0]) / HostArena::kHuge) << i;
  EXPECT_NE(addr(p[4]) / HostArena::kHuge, addr(p[0]) / HostArena::kHuge);
  EXPECT_EQ(a.slabs(), 2u);
  for (size_t i = 0; i < p.size(); ++i)
    for (size_t j = 0; j < sizes[i]; ++j)
      ASSERT_EQ(p[i][j], i + 1) << "buffer " << i << " byte " << j;
  // The first slab goes with its last buffer, not before.
  for (size_t i = 0; i < 3; ++i) a.release(p[i]);
  EXPECT_EQ(a.slabs(), 2u);
  a.release(p[3]);
  EXPECT_EQ(a.slabs(), 1u);
  for (size_t i = 4; i < p.size(); ++i) a.release(p[i]);
  EXPECT_EQ(a.slabs(), 0u);
  // And it takes buffers again afterwards.
  void* again = a.allocate(1 << 20);
  ASSERT_NE(again, nullptr);
  EXPECT_EQ(a.slabs(), 1u);
  a.release(again);
  a.release(nullptr);
  EXPECT_EQ(a.slabs(), 0u);
}

}  // namespace
}  // namespace latprof
