"""Summary statistics of timing samples, exactly as suites/sample_stats.cpp computes them.

Percentiles follow numpy's default ("linear", Hyndman & Fan type 7): for a fraction q of n sorted
values x[0..n-1], h = (n - 1)·q, i = floor(h); the percentile is x[i] + (h - i)·(x[i+1] - x[i]),
or x[n-1] when i = n - 1, interpolated from the nearer end as numpy does, so that the result stays
within [x[i], x[i+1]]. p20 <= median <= p80 is then held explicitly, to the last bit.
"""
import math
from dataclasses import dataclass


@dataclass(frozen=True)
class SampleStats:
    samples: int
    median: float
    p20: float
    p80: float
    mean: float
    stddev: float  # divisor n - 1; 0 for one sample
    cv: float  # stddev / |mean|; 0 when stddev is 0


def percentile_of_sorted(values, fraction):
    if not values:
        raise ValueError("percentile of no values")
    if not 0.0 <= fraction <= 1.0:
        raise ValueError(f"percentile fraction {fraction} is outside [0, 1]")
    h = (len(values) - 1) * fraction
    i = math.floor(h)
    if i + 1 >= len(values):
        return values[-1]
    a, b, t = values[i], values[i + 1], h - i
    return a + (b - a) * t if t < 0.5 else b - (b - a) * (1.0 - t)


def summarize_samples(values):
    values = [float(v) for v in values]
    if not values:
        raise ValueError("cannot summarize an empty set of samples")
    for i, v in enumerate(values):
        if not math.isfinite(v):
            raise ValueError(f"sample {i} is {v}, not a finite number")
    values.sort()
    median = percentile_of_sorted(values, 0.5)
    p20 = min(percentile_of_sorted(values, 0.2), median)
    p80 = max(percentile_of_sorted(values, 0.8), median)
    mean = sum(values) / len(values)
    stddev = 0.0
    if len(values) > 1:
        stddev = math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))
    if stddev == 0.0:
        cv = 0.0
    else:
        cv = math.inf if mean == 0.0 else stddev / abs(mean)
    return SampleStats(len(values), median, p20, p80, mean, stddev, cv)
