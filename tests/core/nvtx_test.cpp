// NVTX ranges must cost nothing and break nothing when no profiler is attached (every CPU run).
#include "core/nvtx.h"

#include <gtest/gtest.h>

namespace seqbench {
namespace {

int ranged_work(int x) {
  SEQBENCH_NVTX_RANGE("test_range");
  return x + 1;
}

TEST(Nvtx, RangesWithoutAProfilerAreHarmless) {
  int sum = 0;
  for (int i = 0; i < 1000; ++i) sum = ranged_work(sum);
  EXPECT_EQ(sum, 1000);
  { NvtxDynamicRange range("suite/experiment/variant"); }
  EXPECT_STREQ(NvtxDomain::name, "seqbench");
}

}  // namespace
}  // namespace seqbench
