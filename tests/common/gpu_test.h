// Helpers shared by the tests.
#pragma once

#include <gtest/gtest.h>

#include "core/device_info.h"

namespace seqbench::testing {

// Probed once per test binary: the reason there is no GPU, or empty when there is one.
const std::string& gpu_absence_reason();

}  // namespace seqbench::testing

// First statement of every gpu-labelled test: without a device the test is reported as
// skipped, with the reason, rather than passing vacuously.
#define SEQBENCH_REQUIRE_GPU()                                                 \
  do {                                                                         \
    if (!::seqbench::testing::gpu_absence_reason().empty())                    \
      GTEST_SKIP() << "no GPU: " << ::seqbench::testing::gpu_absence_reason(); \
  } while (0)
