"""Percentiles and summaries equal suites/sample_stats.cpp's (the cases of tests/suites/sample_stats_test.cpp)."""
import math
import unittest

from tests import support  # noqa: F401  (puts the runner on sys.path)
from seqbench_torch.stats import percentile_of_sorted, summarize_samples


class SummarizeSamples(unittest.TestCase):
    def test_odd_count(self):
        s = summarize_samples([5, 1, 4, 2, 3])
        self.assertEqual(s.samples, 5)
        self.assertEqual(s.median, 3.0)
        self.assertAlmostEqual(s.p20, 1.8, places=15)
        self.assertAlmostEqual(s.p80, 4.2, places=15)
        self.assertAlmostEqual(s.stddev, math.sqrt(2.5), places=15)
        self.assertAlmostEqual(s.cv, math.sqrt(2.5) / 3.0, places=15)

    def test_even_count_interpolates_the_median(self):
        s = summarize_samples([40, 10, 30, 20])
        self.assertEqual((s.median, s.p20, s.p80), (25.0, 16.0, 34.0))
        self.assertAlmostEqual(s.stddev, math.sqrt(500.0 / 3.0), places=12)

    def test_two_and_one_samples(self):
        s = summarize_samples([2, 1])
        self.assertAlmostEqual(s.p20, 1.2, places=15)
        self.assertAlmostEqual(s.p80, 1.8, places=15)
        self.assertEqual(s.median, 1.5)
        one = summarize_samples([0.125])
        self.assertEqual((one.median, one.p20, one.p80, one.stddev, one.cv), (0.125, 0.125, 0.125, 0.0, 0.0))

    def test_identical_samples_and_large_offsets(self):
        self.assertEqual(summarize_samples([7.0] * 9).cv, 0.0)
        self.assertAlmostEqual(summarize_samples([1e9 + 4, 1e9 + 7, 1e9 + 13, 1e9 + 16]).stddev ** 2, 30.0, places=6)

    def test_nearer_end_interpolation_keeps_the_order(self):
        # numpy's lerp from the nearer end: the result never leaves [x[i], x[i+1]].
        for n in range(1, 40):
            values = sorted(0.1 * (k * k % 17) + 1e-3 * k for k in range(n))
            s = summarize_samples(values)
            self.assertLessEqual(s.p20, s.median)
            self.assertLessEqual(s.median, s.p80)
            for q in (0.0, 0.2, 0.5, 0.8, 1.0):
                h = (n - 1) * q
                i = math.floor(h)
                x = percentile_of_sorted(values, q)
                self.assertGreaterEqual(x, values[i])
                self.assertLessEqual(x, values[min(i + 1, n - 1)])

    def test_rejects_empty_and_non_finite(self):
        with self.assertRaisesRegex(ValueError, "cannot summarize an empty set of samples"):
            summarize_samples([])
        with self.assertRaisesRegex(ValueError, "sample 1 is nan, not a finite number"):
            summarize_samples([1.0, float("nan")])
        with self.assertRaisesRegex(ValueError, "outside"):
            percentile_of_sorted([1.0], 1.5)


if __name__ == "__main__":
    unittest.main()
