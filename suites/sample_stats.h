// Summary statistics of a set of timing samples: the numbers every report variant carries.
//
// Percentiles follow numpy's default method ("linear", Hyndman & Fan type 7): for a fraction q in
// [0, 1] of n sorted values x[0..n-1], let h = (n − 1)·q, i = floor(h); the percentile is
// x[i] + (h − i)·(x[i+1] − x[i]) (just x[n−1] when i = n − 1). So the median of an even count is the
// mean of the two middle values, and p20/p80 of {1,2,3,4,5} are 1.8 and 4.2, exactly as
// numpy.percentile(x, [20, 80]) gives (with numpy's rounding: it interpolates from the nearer
// end). summarize_samples also guarantees p20 <= median <= p80 to the last bit, as reports require.
#pragma once

#include <cstddef>
#include <span>
#include <vector>

namespace seqbench {

struct SampleStats {
  std::size_t samples = 0;
  double median = 0.0;
  double p20 = 0.0;
  double p80 = 0.0;
  double mean = 0.0;
  double stddev = 0.0;  // the sample standard deviation (divides by n − 1); 0 for one sample
  // stddev / |mean|; 0 when stddev is 0 (so also for one sample); +inf when the mean is 0 but the
  // spread is not, which needs mixed-sign values and so never happens with durations.
  double cv = 0.0;
};

// The percentile of already sorted, finite values at `fraction` in [0, 1], by the rule above.
// Throws seqbench::Error on an empty span or a fraction outside [0, 1].
double percentile_of_sorted(std::span<const double> sorted, double fraction);

// Takes the samples by value because it sorts them. Throws seqbench::Error on an empty vector or
// on any NaN or infinite value (naming its index and value): one bad sample would otherwise
// silently poison the mean and the order statistics.
SampleStats summarize_samples(std::vector<double> values);

}  // namespace seqbench
