#include "suites/sample_stats.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/error.h"

namespace seqbench {

double percentile_of_sorted(std::span<const double> sorted, double fraction) {
  SEQBENCH_REQUIRE(!sorted.empty(), "percentile of no values");
  SEQBENCH_REQUIRE(fraction >= 0.0 && fraction <= 1.0,
                   "percentile fraction " << fraction << " is outside [0, 1]");
  const double h = static_cast<double>(sorted.size() - 1) * fraction;
  const auto i = static_cast<std::size_t>(std::floor(h));
  if (i + 1 >= sorted.size()) return sorted.back();
  // numpy's own lerp: interpolating from the nearer end keeps the result within
  // [sorted[i], sorted[i + 1]] despite rounding, and equal to numpy's to the bit.
  const double a = sorted[i], b = sorted[i + 1], t = h - static_cast<double>(i);
  return t < 0.5 ? a + (b - a) * t : b - (b - a) * (1.0 - t);
}

SampleStats summarize_samples(std::vector<double> values) {
  SEQBENCH_REQUIRE(!values.empty(), "cannot summarize an empty set of samples");
  for (std::size_t i = 0; i < values.size(); ++i)
    SEQBENCH_REQUIRE(std::isfinite(values[i]),
                     "sample " << i << " is " << values[i] << ", not a finite number");

  std::sort(values.begin(), values.end());
  SampleStats s;
  s.samples = values.size();
  s.median = percentile_of_sorted(values, 0.5);
  s.p20 = percentile_of_sorted(values, 0.2);
  s.p80 = percentile_of_sorted(values, 0.8);
  // Exact arithmetic gives p20 <= median <= p80, and reports require it; rounding inside one
  // interval could in principle break it by an ulp, so hold it explicitly.
  s.p20 = std::min(s.p20, s.median);
  s.p80 = std::max(s.p80, s.median);

  double sum = 0.0;
  for (double v : values) sum += v;
  s.mean = sum / static_cast<double>(values.size());
  // Two passes (mean, then squared deviations) rather than sum of squares: timings are large
  // numbers with small spread, where the one-pass formula cancels catastrophically.
  if (values.size() > 1) {
    double squares = 0.0;
    for (double v : values) squares += (v - s.mean) * (v - s.mean);
    s.stddev = std::sqrt(squares / static_cast<double>(values.size() - 1));
  }
  if (s.stddev == 0.0)
    s.cv = 0.0;
  else
    s.cv = s.mean == 0.0 ? std::numeric_limits<double>::infinity() : s.stddev / std::fabs(s.mean);
  return s;
}

}  // namespace seqbench
