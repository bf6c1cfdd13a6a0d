"""measure_experiment on a stand-in torch (no torch or GPU needed): an experiment is built as many
times as seqbench's samples hold calls, each sample calls every copy once and is divided by their
count, a graph that leaves a copy's output unwritten is timed directly with the reason, and a copy
that cannot be built fails the experiment's variants without ending the run."""
import sys
import types
import unittest
from unittest import mock

from tests import support  # noqa: F401  (puts the runner on sys.path)
from tests.test_timing import FakeTensor, FakeTorch
from seqbench_torch import listing
from seqbench_torch.families.common import COMPILE, EAGER, Plan
from seqbench_torch.cuda_state import CudaUnusable
from seqbench_torch.measure import measure_experiment


class FakeTimer:
    """Calls the work once a sample, three samples of 6 ms an event pair, divided by `calls`."""

    def __init__(self):
        self.calls = []
        self.host_counts = []  # graph launches: False (the flush may hide their one launch)

    def sample_ms(self, work, calls=1, host_counts=True):
        self.calls.append(calls)
        self.host_counts.append(host_counts)
        work()
        return [6.0 / calls] * 3


def experiment(calls):
    return listing.Experiment("operators", "dropout_fwd/f32/elements=8", {}, "unfused",
                              (listing.Variant("unfused", 100.0, 0.0),), {}, calls)


class MeasureExperiment(unittest.TestCase):
    def setUp(self):
        self.latest = {}  # (variant, copy) -> that call's latest output
        self.replay_writes = False  # whether a graph replay rewrites the captured outputs
        self.torch = FakeTorch(self.replay)
        self.torch.cuda.empty_cache = staticmethod(lambda: None)
        self.built = 0
        self.ran = []  # (variant, copy) of every call
        dynamo = types.ModuleType("torch._dynamo")
        dynamo.reset = lambda: None
        self.modules = mock.patch.dict(sys.modules, {"torch": types.ModuleType("torch"), "torch._dynamo": dynamo})
        self.modules.start()
        self.addCleanup(self.modules.stop)
        # The driver's cuGraphLaunch: the stand-in's, which replays the graph without torch's prologue.
        driver = mock.patch("seqbench_torch.timing.driver_graph_launch", return_value=self.torch.driver_launch)
        driver.start()
        self.addCleanup(driver.stop)

    def replay(self):
        # The capture's outputs are each copy's latest; a replay that writes them rewrites every one.
        if self.replay_writes:
            for t in self.latest.values():
                t.values = [1.0]

    def plan(self, graph, fail_at=None):
        def build(torch):
            copy = self.built
            if copy == fail_at:
                raise MemoryError("CUDA out of memory")
            self.built += 1

            def work(name):
                def call():
                    self.ran.append((name, copy))
                    self.latest[(name, copy)] = FakeTensor([1.0])  # fresh every call, as torch's ops make
                    return self.latest[(name, copy)]

                return call

            return {EAGER: work(EAGER), COMPILE: work(COMPILE)}

        return Plan((EAGER, COMPILE), graph, build)

    def measure(self, calls, plan):
        lines = []
        self.timer = FakeTimer()
        entry, failures = measure_experiment(self.torch, self.timer, experiment(calls), plan, (EAGER, COMPILE),
                                             3000.0, lines.append)
        return entry, failures, lines

    def test_a_sample_calls_every_copy_once_and_is_divided_by_their_count(self):
        entry, failures, lines = self.measure(3, self.plan(graph=False))
        self.assertEqual(failures, [])
        self.assertEqual(self.built, 3)
        # One enqueue a sample (FakeTimer takes one): every copy once, in order.
        self.assertEqual(self.ran, [(EAGER, 0), (EAGER, 1), (EAGER, 2), (COMPILE, 0), (COMPILE, 1), (COMPILE, 2)])
        for v in entry["variants"]:
            self.assertEqual(v["calls_per_sample"], 3)
            self.assertEqual(v["median_ms"], 2.0)
            self.assertFalse(v["cuda_graph"])
        self.assertIn("3 calls a sample", lines[0])
        self.assertEqual(self.timer.calls, [3, 3])

    def test_a_graph_of_every_copy_is_timed_and_divided_by_their_count(self):
        self.replay_writes = True
        entry, failures, lines = self.measure(3, self.plan(graph=True))
        self.assertEqual(failures, [])
        self.assertEqual(self.timer.calls, [3, 3])
        self.assertEqual(self.timer.host_counts, [False, False])
        for v in entry["variants"]:
            self.assertTrue(v["cuda_graph"])
            self.assertNotIn("note", v)
            self.assertEqual(v["median_ms"], 2.0)  # 6 ms a replay of 3 calls
            self.assertEqual(v["calls_per_sample"], 3)
        # Each variant's graph: two CUDAGraph.replay() (the check that it writes every output, then
        # the one that sets torch's RNG state for the launches), then the timed samples as driver
        # launches of the graph alone.
        self.assertEqual(self.torch.replays, 4)
        self.assertEqual(len(self.torch.launches), 2)  # FakeTimer: one sample a variant
        self.assertTrue(all(g == FakeTorch.GRAPH_EXEC for g, _ in self.torch.launches))
        # Warm-ups (3 a copy), then the capture: each copy once, in order; the replays run nothing here.
        eager = [c for n, c in self.ran if n == EAGER]
        self.assertEqual(eager, [0, 0, 0, 1, 1, 1, 2, 2, 2, 0, 1, 2])

    def test_a_graph_that_writes_no_output_is_timed_directly_with_the_reason(self):
        entry, failures, lines = self.measure(2, self.plan(graph=True))
        self.assertEqual(failures, [])
        # After the refused capture (warm-ups and capture: 0 0 0 1 1 1 0 1), the direct sample calls
        # every copy once, in order.
        eager = [c for n, c in self.ran if n == EAGER]
        self.assertEqual(eager, [0, 0, 0, 1, 1, 1, 0, 1, 0, 1])
        self.assertEqual(self.timer.calls, [2, 2])
        self.assertEqual(self.timer.host_counts, [True, True])  # timed directly: launches count
        for v in entry["variants"]:
            self.assertFalse(v["cuda_graph"])
            self.assertRegex(v["note"], r"^CUDA graph refused \(a replay of the captured graph left outputs unwritten "
                                        r"\(output 0: 1 of 1 elements; output 1: 1 of 1 elements\)")
            self.assertEqual(v["calls_per_sample"], 2)

    def test_a_copy_that_cannot_be_built_fails_the_experiment_not_the_run(self):
        entry, failures, lines = self.measure(4, self.plan(graph=False, fail_at=2))
        self.assertIsNone(entry)
        self.assertEqual([f["variant"] for f in failures], [EAGER, COMPILE])
        self.assertTrue(all(f["reason"] == "failed: MemoryError: CUDA out of memory" for f in failures))
        self.assertEqual(self.ran, [])
        self.assertIn("FAILED building 4 copies of its inputs: MemoryError", lines[0])

    def test_a_sticky_error_building_the_inputs_stops_with_the_failures(self):
        def build(torch):
            raise RuntimeError("CUDA error: device-side assert triggered")

        with self.assertRaises(CudaUnusable) as caught:
            self.measure(2, Plan((EAGER, COMPILE), False, build))
        self.assertIsNone(caught.exception.entry)
        self.assertEqual([(f["variant"], f["reason"]) for f in caught.exception.failures],
                         [(v, "failed: RuntimeError: CUDA error: device-side assert triggered") for v in (EAGER, COMPILE)])

    def test_a_sticky_error_keeps_what_was_measured(self):
        plan = self.plan(graph=False)
        build = plan.build

        def failing_build(torch):
            works = build(torch)

            def compile_call():
                raise RuntimeError("CUDA error: an illegal memory access was encountered")

            works[COMPILE] = compile_call
            return works

        labels = []
        with self.assertRaises(CudaUnusable) as caught:
            measure_experiment(self.torch, FakeTimer(), experiment(1), Plan((EAGER, COMPILE), False, failing_build),
                               (EAGER, COMPILE), 3000.0, lambda line: None, labels.append)
        self.assertEqual(labels, ["operators/dropout_fwd/f32/elements=8/torch_eager",
                                  "operators/dropout_fwd/f32/elements=8/torch_compile"])
        self.assertEqual([v["name"] for v in caught.exception.entry["variants"]], [EAGER])
        self.assertEqual(caught.exception.entry["baseline"], EAGER)
        self.assertEqual([f["variant"] for f in caught.exception.failures], [COMPILE])


    def test_a_failed_capture_is_timed_directly_unless_it_left_torch_unusable(self):
        self.replay_writes = True
        self.torch.capture_error = RuntimeError("CUDA error: operation not permitted when stream is capturing")
        entry, failures, lines = self.measure(1, self.plan(graph=True))
        self.assertEqual(failures, [])
        for v in entry["variants"]:
            self.assertFalse(v["cuda_graph"])
            self.assertRegex(v["note"], r"^CUDA graph capture failed \(RuntimeError: CUDA error: operation not permitted")
        self.torch.broken_probe = "rand"
        with self.assertRaises(CudaUnusable) as caught:
            self.measure(1, self.plan(graph=True))
        self.assertRegex(caught.exception.reason, r"left torch unusable: a random draw failed")
        # Nothing measured: the first variant failed with the reason, the second was not run.
        self.assertIsNone(caught.exception.entry)
        self.assertEqual([(f["variant"], f["reason"].split(":")[0]) for f in caught.exception.failures],
                         [(EAGER, "failed"), (COMPILE, "not run")])

if __name__ == "__main__":
    unittest.main()
