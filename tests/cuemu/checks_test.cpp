// The emulation's own checks (cuemu.hpp): deliberately broken copies of project kernels and small
// kernels with one defect each (broken/broken.cu) must be reported under every thread schedule,
// and the schedules must really reorder the threads.
#include <algorithm>
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "broken/broken.hpp"
#include "core/half.hpp"
#include "support.hpp"

namespace latprof::cuemutest {

namespace {

std::string joined(const std::vector<std::string>& v) {
  std::string all;
  for (const std::string& s : v) all += "\n  " + s;
  return all;
}

// Runs `launch` under each schedule and expects a fault containing every one of `needles`.
void expect_caught(const std::function<void()>& launch, const std::vector<std::string>& needles,
                   const std::vector<uint64_t>& scheds = schedules(11)) {
  cuemu::take_faults();
  for (uint64_t s : scheds) {
    SCOPED_TRACE("thread schedule: " + schedule_name(s));
    cuemu::Options o = cuemu::options();
    o.schedule = s;
    cuemu::set_options(o);
    launch();
    const std::vector<std::string> f = cuemu::take_faults();
    if (std::getenv("CUEMU_VERBOSE")) std::cout << joined(f) << "\n";
    bool found = false;
    for (const std::string& line : f) {
      bool all = true;
      for (const std::string& n : needles) all = all && line.find(n) != std::string::npos;
      if (all && !found)
        std::cout << "[ info     ] caught (" << schedule_name(s) << "): " << line << "\n";
      found = found || all;
    }
    EXPECT_TRUE(found) << "no fault mentions \"" << needles.front() << "\"; faults:" << joined(f);
  }
  cuemu::Options o = cuemu::options();
  o.schedule = 0;
  cuemu::set_options(o);
}

#define REQUIRE_ACCESS_CHECKS()                                                                    \
  if (!cuemu::access_checks())                                                                     \
  GTEST_SKIP() << "shared-memory tracking needs the default build (LATPROF_SANITIZE builds check " \
                  "with ASan, which aborts on these accesses)"

}  // namespace

TEST(EmuChecks, MissingSyncthreadsInBlockSumIsCaught) {
  REQUIRE_ACCESS_CHECKS();
  const int64_t rows = 3, dim = 1000;
  auto x = upload_act(random_vector(size_t(rows * dim), 1, -1, 1));
  auto w = upload(std::vector<float>(size_t(dim), 1.f));
  DevBuf out(size_t(rows * dim) * 2);
  expect_caught(
      [&] {
        broken::rmsnorm_no_sync(x->as<__half>(), w->as<float>(), rows, dim, 1e-5f,
                                out.as<__half>());
      },
      {"rmsnorm_kernel", "partial"});
}

TEST(EmuChecks, IntegerSharedRaceInArgmaxIsCaught) {
  REQUIRE_ACCESS_CHECKS();
  const int64_t n_seq = 2, vocab = 5000;
  auto l = upload_act(random_vector(size_t(n_seq * vocab), 2, -4, 4));
  DevBuf tok(size_t(n_seq) * 4);
  auto launch = [&] { broken::argmax_no_sync(l->as<__half>(), n_seq, vocab, tok.as<int32_t>()); };
  expect_caught(launch, {"argmax_kernel", "shared si"});
  // Descending order: lane 0 of every other warp writes its index before warp 0 reads it, so the
  // read is of a written word; the last writer and its epoch show the race.
  expect_caught(launch, {"reads shared si", "written by thread", "race"}, {1});
}

TEST(EmuChecks, WriteAfterReadWithoutTrailingSyncIsCaught) {
  REQUIRE_ACCESS_CHECKS();
  const int64_t m = 20, n_out = 24, n_in = 64;
  auto w = upload_act(random_vector(size_t(n_out * n_in), 3, -1, 1));
  auto x = upload_act(random_vector(size_t(m * n_in), 4, -1, 1));
  DevBuf y(size_t(m * n_out) * 2);
  expect_caught(
      [&] {
        broken::gemm_no_trailing_sync(w->as<__half>(), x->as<__half>(), m, n_out, n_in,
                                      y.as<__half>());
      },
      {"gemm_tile_kernel", "writes shared", "race"});
}

TEST(EmuChecks, MissingSyncwarpIsCaught) {
  REQUIRE_ACCESS_CHECKS();
  DevBuf out(128 * 4);
  expect_caught([&] { broken::warp_tile_no_syncwarp(out.as<float>()); }, {"reads shared p + "});
}

TEST(EmuChecks, SharedOutOfBoundsIsCaught) {
  DevBuf out(32 * 4);
  if (!cuemu::access_checks()) {  // ASan build: the guard zones are poisoned for ASan
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    EXPECT_DEATH(broken::shared_off_by_one(out.as<float>()), "use-after-poison");
    return;
  }
  expect_caught([&] { broken::shared_off_by_one(out.as<float>()); },
                {"out of bounds", "past the end of a"});
}

TEST(EmuChecks, ReadOfUnwrittenSharedIsCaught) {
  REQUIRE_ACCESS_CHECKS();
  DevBuf out(32 * 4);
  expect_caught([&] { broken::shared_unwritten(out.as<int>()); },
                {"which no thread of the block wrote"});
}

TEST(EmuChecks, GlobalOutOfBoundsAndUseAfterFreeAreCaught) {
  DevBuf out(100 * 4);
  if (!cuemu::access_checks()) {  // ASan build: device buffers are heap blocks with red zones
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    EXPECT_DEATH(broken::global_off_by_one(out.as<float>(), 100), "heap-buffer-overflow");
    return;
  }
  expect_caught([&] { broken::global_off_by_one(out.as<float>(), 100); },
                {"global_off_by_one_kernel", "outside every allocation"});
  float* freed = nullptr;
  ASSERT_EQ(cudaMalloc(&freed, 64 * 4), cudaSuccess);
  ASSERT_EQ(cudaFree(freed), cudaSuccess);
  expect_caught([&] { broken::global_off_by_one(freed, 10); }, {"that was freed"});
}

TEST(EmuChecks, SyncthreadsReachedByPartOfTheBlockIsCaught) {
  DevBuf out(128 * 4);
  expect_caught([&] { broken::partial_barrier(out.as<int>()); },
                {"__syncthreads()", "reached by 64 of 128 threads"});
}

TEST(EmuChecks, ShuffleWithExitedLanesIsCaught) {
  DevBuf out(128 * 4);
  expect_caught([&] { broken::shuffle_with_exited_lanes(out.as<float>()); },
                {"warp collective with lane", "of the mask exited"});
}

TEST(EmuChecks, DeadlockIsReported) {
  DevBuf out(32 * 4);
  expect_caught([&] { broken::deadlock(out.as<float>()); }, {"deadlock"});
}

TEST(EmuChecks, SharedMemoryLimits) {
  DevBuf out(32 * 4);
  expect_caught([&] { broken::too_much_shared(out.as<float>()); }, {"exceeds the 48 KiB"});
  // Dynamic shared memory beyond 48 KiB is a launch error unless the kernel opted in.
  EXPECT_EQ(broken::dynamic_shared_64k(out.as<float>(), false), cudaErrorInvalidValue);
  EXPECT_EQ(broken::dynamic_shared_64k(out.as<float>(), true), cudaSuccess);
  expect_no_faults();
  EXPECT_EQ(broken::too_many_threads(), cudaErrorInvalidConfiguration);
}

TEST(EmuChecks, SchedulesReorderThreads) {
  std::vector<std::vector<int>> seen;
  for (uint64_t s : schedules(11)) {
    cuemu::Options o = cuemu::options();
    o.schedule = s;
    cuemu::set_options(o);
    auto counter = upload(std::vector<int>{0});
    DevBuf order(256 * 4);
    broken::record_order(counter->as<int>(), order.as<int>());
    seen.push_back(download<int>(order, 256));
    std::vector<int> sorted = seen.back();
    std::sort(sorted.begin(), sorted.end());
    for (int i = 0; i < 256; ++i) ASSERT_EQ(sorted[size_t(i)], i) << "a thread is missing";
  }
  cuemu::set_options({});
  expect_no_faults();
  ASSERT_EQ(seen.size(), 3u);
  for (int i = 0; i < 256; ++i) {
    EXPECT_EQ(seen[0][size_t(i)], i) << "ascending";
    EXPECT_EQ(seen[1][size_t(i)], 255 - i) << "descending";
  }
  EXPECT_NE(seen[2], seen[0]);
  EXPECT_NE(seen[2], seen[1]);
}

}  // namespace latprof::cuemutest
