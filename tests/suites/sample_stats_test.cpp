#include "suites/sample_stats.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "suites_test_util.h"

namespace seqbench {
namespace {

using testing::error_message;

// Expected values are worked by hand from the definition in sample_stats.h (h = (n−1)·q) and
// agree with numpy.percentile / numpy.std(ddof=1).

TEST(SummarizeSamples, OddCount) {
  const SampleStats s = summarize_samples({5, 1, 4, 2, 3});  // unsorted on purpose
  EXPECT_EQ(s.samples, 5u);
  EXPECT_DOUBLE_EQ(s.median, 3.0);
  EXPECT_DOUBLE_EQ(s.p20, 1.8);  // h = 0.8: 1 + 0.8·(2 − 1)
  EXPECT_DOUBLE_EQ(s.p80, 4.2);  // h = 3.2: 4 + 0.2·(5 − 4)
  EXPECT_DOUBLE_EQ(s.mean, 3.0);
  EXPECT_DOUBLE_EQ(s.stddev, std::sqrt(2.5));  // (4 + 1 + 0 + 1 + 4) / 4
  EXPECT_DOUBLE_EQ(s.cv, std::sqrt(2.5) / 3.0);
}

TEST(SummarizeSamples, EvenCountInterpolatesTheMedian) {
  const SampleStats s = summarize_samples({40, 10, 30, 20});
  EXPECT_EQ(s.samples, 4u);
  EXPECT_DOUBLE_EQ(s.median, 25.0);  // h = 1.5
  EXPECT_DOUBLE_EQ(s.p20, 16.0);     // h = 0.6: 10 + 0.6·10
  EXPECT_DOUBLE_EQ(s.p80, 34.0);     // h = 2.4: 30 + 0.4·10
  EXPECT_DOUBLE_EQ(s.mean, 25.0);
  EXPECT_DOUBLE_EQ(s.stddev, std::sqrt(500.0 / 3.0));  // (225 + 25 + 25 + 225) / 3
  EXPECT_DOUBLE_EQ(s.cv, std::sqrt(500.0 / 3.0) / 25.0);
}

TEST(SummarizeSamples, TwoSamples) {
  const SampleStats s = summarize_samples({2.0, 1.0});
  EXPECT_DOUBLE_EQ(s.median, 1.5);
  EXPECT_DOUBLE_EQ(s.p20, 1.2);
  EXPECT_DOUBLE_EQ(s.p80, 1.8);
  EXPECT_DOUBLE_EQ(s.stddev, std::sqrt(0.5));
}

TEST(SummarizeSamples, SingleSampleHasNoSpread) {
  const SampleStats s = summarize_samples({0.125});
  EXPECT_EQ(s.samples, 1u);
  EXPECT_EQ(s.median, 0.125);
  EXPECT_EQ(s.p20, 0.125);
  EXPECT_EQ(s.p80, 0.125);
  EXPECT_EQ(s.mean, 0.125);
  EXPECT_EQ(s.stddev, 0.0);
  EXPECT_EQ(s.cv, 0.0);
}

TEST(SummarizeSamples, IdenticalSamplesHaveZeroCv) {
  const SampleStats s = summarize_samples({7, 7, 7});
  EXPECT_EQ(s.stddev, 0.0);
  EXPECT_EQ(s.cv, 0.0);
}

TEST(SummarizeSamples, LargeOffsetSmallSpreadKeepsPrecision) {
  // The one-pass sum-of-squares formula loses every digit here; the two-pass one does not.
  const SampleStats s = summarize_samples({1e9 + 1, 1e9 + 2, 1e9 + 3});
  EXPECT_DOUBLE_EQ(s.stddev, 1.0);
}

TEST(SummarizeSamples, RejectsEmptyInput) {
  EXPECT_EQ(error_message([] { summarize_samples({}); }), "cannot summarize an empty set of samples");
}

TEST(SummarizeSamples, RejectsNonFiniteValuesNamingIndexAndValue) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  EXPECT_EQ(error_message([&] {
              summarize_samples({1.0, 2.0, nan});
            }),
            "sample 2 is nan, not a finite number");
  EXPECT_EQ(error_message([&] { summarize_samples({-inf, 2.0}); }), "sample 0 is -inf, not a finite number");
}

TEST(PercentileOfSorted, EndpointsAndRangeChecks) {
  const std::vector<double> x = {1, 2, 4, 8};
  EXPECT_EQ(percentile_of_sorted(x, 0.0), 1.0);
  EXPECT_EQ(percentile_of_sorted(x, 1.0), 8.0);
  EXPECT_DOUBLE_EQ(percentile_of_sorted(x, 0.9), 6.8);  // h = 2.7: 4 + 0.7·4
  EXPECT_EQ(error_message([&] { percentile_of_sorted(x, 1.5); }),
            "percentile fraction 1.5 is outside [0, 1]");
  EXPECT_EQ(error_message([] { percentile_of_sorted({}, 0.5); }), "percentile of no values");
}

}  // namespace
}  // namespace seqbench
