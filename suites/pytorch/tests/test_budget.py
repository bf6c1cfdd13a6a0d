"""The run's time budget (budget.py), SIGTERM as an exception (interrupt.py) and the broken-context
test after a failure (cuda_state.py), on stand-ins: no torch, no GPU."""
import os
import signal
import threading
import unittest

from tests import support  # noqa: F401  (puts the runner on sys.path)
from seqbench_torch.budget import MARGIN_FLOOR, Budget
from seqbench_torch.cuda_state import CudaUnusable, release_memory, unusable
from seqbench_torch.interrupt import Terminated, sigterm_raises


class Clock:
    def __init__(self):
        self.now = 50.0

    def __call__(self):
        return self.now


class TimeBudget(unittest.TestCase):
    def test_without_a_limit_everything_starts(self):
        clock = Clock()
        b = Budget(None, clock)
        clock.now += 1e9
        self.assertTrue(b.may_start())
        self.assertIsNone(b.left())
        self.assertEqual(b.elapsed(), 1e9)

    def test_the_margin_is_the_longest_experiment_and_at_least_the_floor(self):
        clock = Clock()
        b = Budget(100.0, clock)
        self.assertEqual(b.margin(), MARGIN_FLOOR)
        b.took(5.0)
        self.assertEqual(b.margin(), MARGIN_FLOOR)
        b.took(40.0)
        b.took(20.0)
        self.assertEqual(b.margin(), 40.0)
        clock.now += 60.0  # 40 s left: exactly the margin, still starts
        self.assertTrue(b.may_start())
        clock.now += 0.5
        self.assertFalse(b.may_start())
        self.assertEqual(b.left(), 39.5)


class Sigterm(unittest.TestCase):
    def test_sigterm_raises_once_then_the_default_comes_back(self):
        before = signal.getsignal(signal.SIGTERM)
        with self.assertRaisesRegex(Terminated, "terminated by SIGTERM"):
            with sigterm_raises():
                os.kill(os.getpid(), signal.SIGTERM)
                for _ in range(1000):  # the handler runs between bytecodes
                    pass
        self.assertEqual(signal.getsignal(signal.SIGTERM), before)

    def test_not_taken_for_a_failed_variant(self):
        self.assertFalse(issubclass(Terminated, Exception))

    def test_outside_the_main_thread_nothing_changes(self):
        seen = []

        def body():
            with sigterm_raises():
                seen.append(signal.getsignal(signal.SIGTERM))

        t = threading.Thread(target=body)
        t.start()
        t.join()
        self.assertEqual(seen, [signal.getsignal(signal.SIGTERM)])


class FakeCuda:
    def __init__(self, sync_error=None, empty_error=None):
        self.sync_error, self.empty_error = sync_error, empty_error

    def synchronize(self):
        if self.sync_error:
            raise self.sync_error

    def empty_cache(self):
        if self.empty_error:
            raise self.empty_error


class FakeTorch:
    def __init__(self, **kw):
        self.cuda = FakeCuda(**kw)


class BrokenContext(unittest.TestCase):
    def test_sticky_messages(self):
        for text in ("CUDA error: an illegal memory access was encountered",
                     "CUDA error: device-side assert triggered", "CUDA error: unspecified launch failure",
                     "CUDA error: misaligned address"):
            self.assertTrue(unusable(FakeTorch(), RuntimeError(text)).startswith("RuntimeError: CUDA error"), text)

    def test_a_failure_the_device_survives(self):
        self.assertIsNone(unusable(FakeTorch(), RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB")))
        self.assertIsNone(unusable(FakeTorch(), ValueError("compile error")))

    def test_a_synchronize_that_fails_after_it(self):
        why = unusable(FakeTorch(sync_error=RuntimeError("CUDA error: unknown error")), ValueError("x"))
        self.assertEqual(why, "ValueError: x; then torch.cuda.synchronize() failed: "
                              "RuntimeError: CUDA error: unknown error")

    def test_release_memory(self):
        release_memory(FakeTorch())
        with self.assertRaisesRegex(CudaUnusable, r"torch.cuda.empty_cache\(\) failed: RuntimeError: CUDA error"):
            release_memory(FakeTorch(empty_error=RuntimeError("CUDA error: an illegal memory access")))


if __name__ == "__main__":
    unittest.main()
