// The module's C ABI and its no-device path: this test runs everywhere (it is not skipped). On a
// machine without a driver latprof_cuda_device_count must return <= 0 with a reason, which is
// what `latprof --backend cuda` prints before exiting 2.
#include <gtest/gtest.h>

#include <cstring>

#include "backend/cuda_module.hpp"
#include "gpu/gpu_support.hpp"

namespace latprof::gputest {

TEST(GpuModule, LoadsAndExportsTheAbi) {
  const Module& m = module();
  ASSERT_TRUE(m.create) << m.error;
  EXPECT_STREQ(m.abi_id(), LATPROF_BACKEND_ABI);
}

TEST(GpuModule, DeviceCountGivesAReasonWhenThereIsNoDevice) {
  const Module& m = module();
  ASSERT_TRUE(m.device_count) << m.error;
  char why[512];
  std::memset(why, 0, sizeof(why));
  const int n = m.device_count(why, sizeof(why));
  if (n > 0) {
    std::string reason;
    Backend* b = cuda_backend(&reason);
    ASSERT_NE(b, nullptr) << reason;
    EXPECT_EQ(b->device().backend, "cuda");
    EXPECT_FALSE(b->device().name.empty());
    std::cout << "[ info ] " << n << " CUDA device(s): " << b->device().details << "\n";
  } else {
    EXPECT_GT(std::strlen(why), 10u) << "no reason given for " << n << " devices";
    std::cout << "[ info ] latprof_cuda_device_count = " << n << ": " << why << "\n";
  }
}

TEST(GpuModule, CreateFailsCleanlyWithoutADevice) {
  const Module& m = module();
  ASSERT_TRUE(m.create) << m.error;
  char why[512] = {0};
  if (m.device_count(why, sizeof(why)) > 0) GTEST_SKIP() << "a CUDA device is present";
  BackendOptions opt;
  opt.kind = "cuda";
  char buf[512] = {0};
  Backend* b = m.create(&opt, buf, sizeof(buf));
  EXPECT_EQ(b, nullptr);
  EXPECT_GT(std::strlen(buf), 0u);
  delete b;
}

}  // namespace latprof::gputest
