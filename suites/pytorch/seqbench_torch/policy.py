"""The timing policy, the same numbers as suites/gpu_timer.{h,cpp} (a test reads them from there).

1. warm-up runs first (compilation, autotuning, lazy allocation and CUDA-graph capture stay out);
2. before each sample an L2-sized buffer is overwritten, outside the event pair;
3. a sample is the time between two CUDA events around the experiment's `calls_per_sample` calls
   (each on its own copy of the inputs: see suites/gpu_timer.h, graph_calls_per_sample), divided
   by that count;
4. sampling stops after `max_samples`, or once `min_samples` are in and `budget_seconds` passed.
"""
from dataclasses import dataclass


@dataclass(frozen=True)
class TimerPolicy:
    warmup_runs: int = 3
    min_samples: int = 10
    max_samples: int = 200
    budget_seconds: float = 1.0
    flush_l2: bool = True

    @staticmethod
    def quick():
        """`--quick`: as TimerPolicy::quick() in suites/gpu_timer.cpp."""
        return TimerPolicy(warmup_runs=2, min_samples=5, max_samples=25, budget_seconds=0.2)

    def done(self, samples, elapsed_seconds):
        """Whether sampling stops after `samples` samples taken in `elapsed_seconds`."""
        if samples >= self.max_samples:
            return True
        return samples >= self.min_samples and elapsed_seconds >= self.budget_seconds
