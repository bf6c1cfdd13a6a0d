// TimerPolicy's host-side validation and the rule for calls per graphed sample (no GPU needed).
#include <gtest/gtest.h>

#include <limits>

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

TEST(GraphCallsPerSample, FewestCallsReachingTheSampleBytesAtMostTheCap) {
  constexpr double MiB = 1024.0 * 1024.0;
  // As much as the 1 GiB copy that measures the copy rate (gpu_timer.h says why).
  EXPECT_EQ(kGraphSampleBytes, 1024 * MiB);
  EXPECT_EQ(kMaxCallsPerSample, 64);
  EXPECT_EQ(graph_calls_per_sample(0.0), 1);  // no bytes declared: nothing to base N on
  EXPECT_EQ(graph_calls_per_sample(-1.0), 1);
  EXPECT_EQ(graph_calls_per_sample(std::numeric_limits<double>::quiet_NaN()), 1);
  EXPECT_EQ(graph_calls_per_sample(4096 * MiB), 1);
  EXPECT_EQ(graph_calls_per_sample(1024 * MiB), 1);
  EXPECT_EQ(graph_calls_per_sample(1024 * MiB - 1), 2);
  EXPECT_EQ(graph_calls_per_sample(512 * MiB), 2);
  EXPECT_EQ(graph_calls_per_sample(341 * MiB), 4);  // 3 x 341 MiB = 1023 MiB falls short
  EXPECT_EQ(graph_calls_per_sample(64 * MiB), 16);
  EXPECT_EQ(graph_calls_per_sample(17.6 * MiB), 59);
  EXPECT_EQ(graph_calls_per_sample(16 * MiB), 64);
  EXPECT_EQ(graph_calls_per_sample(1 * MiB), 64);
  EXPECT_EQ(graph_calls_per_sample(1000.0), 64);
}

}  // namespace
}  // namespace seqbench
