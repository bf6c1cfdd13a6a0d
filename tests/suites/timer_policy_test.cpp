// TimerPolicy's host-side validation (no GPU needed).
#include <gtest/gtest.h>

#include "suites/gpu_timer.h"

namespace seqbench {
namespace {

TEST(TimerPolicy, ValidateNamesTheBadField) {
  TimerPolicy policy;
  policy.max_samples = 2;
  policy.min_samples = 5;
  try {
    policy.validate();
    FAIL() << "accepted max_samples < min_samples";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("max_samples 2 < min_samples 5"), std::string::npos) << e.what();
  }
  EXPECT_NO_THROW(TimerPolicy::quick().validate());
}

}  // namespace
}  // namespace seqbench
