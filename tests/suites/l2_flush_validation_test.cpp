// The L2 flush read's argument checks, without a GPU: each runs before any CUDA call.
#include <gtest/gtest.h>

#include <vector>

#include "suites/l2_flush.h"
#include "tests/common/expect_error.h"

namespace seqbench {
namespace {

TEST(L2FlushValidation, RefusesNullAndUnalignedBuffersBeforeAnyCudaCall) {
  alignas(16) unsigned char host[64] = {};
  unsigned int sink = 0;
  testing::expect_error([&] { launch_l2_flush_read(nullptr, 64, &sink, nullptr); }, "null buffer or sink");
  testing::expect_error([&] { launch_l2_flush_read(host, 64, nullptr, nullptr); }, "null buffer or sink");
  testing::expect_error([&] { launch_l2_flush_read(host, 40, &sink, nullptr); },
                        "40 bytes) must be 16-byte aligned and a multiple of 16");
  testing::expect_error([&] { launch_l2_flush_read(host + 4, 32, &sink, nullptr); },
                        "must be 16-byte aligned and a multiple of 16");
  EXPECT_NO_THROW(launch_l2_flush_read(host, 0, &sink, nullptr));  // nothing to read: no launch
}

}  // namespace
}  // namespace seqbench
