// Helpers shared by the tests.
#pragma once

#include <gtest/gtest.h>

#include "core/device_info.h"

namespace seqbench::testing {

// Probed once per test binary: the reason there is no GPU, or empty when there is one.
const std::string& gpu_absence_reason();

// Whether the environment says a GPU must be there: SEQBENCH_EXPECT_GPU set to anything but ""
// or "0" (tools/gpu.sh sets it on the GPU machine). Read at every call, not cached.
bool gpu_expected();

}  // namespace seqbench::testing

// First statement of every gpu-labelled test: without a device the test is reported as
// skipped, with the reason, rather than passing vacuously. Where a GPU is expected
// (SEQBENCH_EXPECT_GPU) its absence is a failure instead: on the GPU machine a driver or runtime
// that cannot reach the device must not turn every GPU test into a quiet skip.
#define SEQBENCH_REQUIRE_GPU()                                                    \
  do {                                                                            \
    if (!::seqbench::testing::gpu_absence_reason().empty()) {                     \
      if (::seqbench::testing::gpu_expected())                                    \
        GTEST_FAIL() << "SEQBENCH_EXPECT_GPU is set but there is no usable GPU: " \
                     << ::seqbench::testing::gpu_absence_reason();                \
      GTEST_SKIP() << "no GPU: " << ::seqbench::testing::gpu_absence_reason();    \
    }                                                                             \
  } while (0)
