"""The run's time budget (--budget-seconds): a lease's call is killed at its limit, and gpu.sh's
`timeout` ends the runner with SIGTERM before that; an experiment started too late would only be
cut off. So before each experiment the runner asks whether the time left still covers the margin,
the longest experiment this run has taken so far (the first ones compile with cold Inductor and
Triton caches, the costliest), and at least MARGIN_FLOOR seconds; if not, the experiment is not
started and the report says so ("not started: time budget")."""
import time

MARGIN_FLOOR = 15.0  # seconds: an experiment of the quick shapes, compile included, rarely takes less


class Budget:
    """`seconds` from now (None: no limit); `clock` is time.monotonic, or a test's stand-in."""

    def __init__(self, seconds=None, clock=time.monotonic):
        self.seconds = seconds
        self.clock = clock
        self.start = clock()
        self.longest = 0.0

    def elapsed(self):
        return self.clock() - self.start

    def left(self):
        """Seconds left, or None without a limit."""
        return None if self.seconds is None else self.seconds - self.elapsed()

    def margin(self):
        return max(MARGIN_FLOOR, self.longest)

    def may_start(self):
        """Whether an experiment may start now: no limit, or at least the margin left."""
        return self.seconds is None or self.left() >= self.margin()

    def took(self, seconds):
        """An experiment took `seconds`: the margin is at least that from now on."""
        self.longest = max(self.longest, seconds)
