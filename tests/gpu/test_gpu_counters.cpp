// The counter metric set is checked offline with the CUPTI profiler host API, which needs no GPU:
// it must be valid and single-pass on A100 (GA100) and H100/H200 (GH100), because latprof never
// replays a decode step. Runs everywhere libcupti and its libnvperf_host are installed.
#include <gtest/gtest.h>

#include "backend/cuda/range_counters.hpp"

namespace latprof::cuda {

class CounterSet : public ::testing::TestWithParam<const char*> {};

TEST_P(CounterSet, IsValidAndSinglePass) {
  std::string why;
  const int passes = counter_passes_for_chip(GetParam(), &why);
  ASSERT_GE(passes, 0) << GetParam() << ": " << why;
  EXPECT_EQ(passes, 1) << GetParam() << " needs " << passes << " passes";
}

INSTANTIATE_TEST_SUITE_P(Chips, CounterSet, ::testing::Values("GA100", "GH100"),
                         [](const ::testing::TestParamInfo<const char*>& i) {
                           return std::string(i.param);
                         });

}  // namespace latprof::cuda
