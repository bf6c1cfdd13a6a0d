"""The CUDA-graph helpers of seqbench_torch/timing.py on a stand-in torch (no torch or GPU needed):
a capture goes on the stream autograd will use, a graph whose replay leaves an output unwritten
is refused rather than timed doing less work than a call, and a sample holds one call of each copy
of an experiment's inputs and is divided by their count."""
import math
import unittest

from tests import support  # noqa: F401  (puts the runner on sys.path)
from unittest import mock

from seqbench_torch.cuda_state import CudaUnusable
from seqbench_torch.families.common import forward_stream
from seqbench_torch.policy import TimerPolicy
from seqbench_torch.timing import (GraphIncomplete, TorchTimer, check_replay_writes_outputs, graph_launch, graphed,
                                   in_turn)


class FakeTensor:
    """A flat list of Python numbers with the few tensor methods the helpers use."""

    def __init__(self, values, floating=True):
        self.values = list(values)
        self.floating = floating

    def untyped_storage(self):
        return self  # one storage per tensor: no views here

    def data_ptr(self):
        return id(self)

    def is_floating_point(self):
        return self.floating

    def numel(self):
        return len(self.values)

    def clone(self):
        return FakeTensor(self.values, self.floating)

    def fill_(self, v):
        self.values = [v] * len(self.values)
        return self

    def copy_(self, other):
        self.values = list(other.values)
        return self

    def __and__(self, other):
        return FakeTensor([a and b for a, b in zip(self.values, other.values)], False)

    def __invert__(self):
        return FakeTensor([not a for a in self.values], False)

    def sum(self):
        return FakeTensor([sum(self.values)], False)

    def item(self):
        return self.values[0]


class FakeStream:
    def __init__(self, name):
        self.name = name
        self.cuda_stream = id(self)  # the raw handle graph launches are given

    def wait_stream(self, other):
        pass

    def synchronize(self):
        pass


class FakeTorch:
    """torch.Tensor, torch.isnan and the torch.cuda calls graphed() makes; it records which stream
    each call of the work ran on and which stream the capture used."""

    Tensor = FakeTensor

    GRAPH_EXEC = 0xC0DE  # the handle CUDAGraph.raw_cuda_graph_exec() gives

    def __init__(self, replay):
        fake = self
        self.current = FakeStream("default")
        self.made = 0
        self.captured_on = None
        self.replay = replay
        self.replays = 0  # CUDAGraph.replay() calls (which would run torch's RNG prologue)
        self.launches = []  # (graph exec, stream handle) of each driver launch
        self.capture_error = None  # raised by torch.cuda.graph's __exit__ (CUDA invalidated the capture)
        self.broken_probe = None  # the probe that fails after a failed capture: "empty_cache" or "rand"

        class Cuda:
            @staticmethod
            def Stream():
                fake.made += 1
                return FakeStream(f"side{fake.made}")

            @staticmethod
            def current_stream():
                return fake.current

            @staticmethod
            def synchronize():
                pass

            @staticmethod
            def set_stream(s):
                fake.current = s

            @staticmethod
            def empty_cache():
                if fake.broken_probe == "empty_cache":
                    raise RuntimeError("captures_underway.empty() INTERNAL ASSERT FAILED")

            class stream:
                def __init__(self, s):
                    self.s = s

                def __enter__(self):
                    self.before, fake.current = fake.current, self.s

                def __exit__(self, *exc):
                    fake.current = self.before

            class CUDAGraph:
                def replay(self):
                    fake.replays += 1
                    fake.replay()

                def raw_cuda_graph_exec(self):
                    return FakeTorch.GRAPH_EXEC

            class Event:
                """Every event pair is 6 ms apart."""

                def __init__(self, enable_timing=False):
                    pass

                def record(self, stream=None):
                    pass

                def synchronize(self):
                    pass

                def elapsed_time(self, other):
                    return 6.0

            class graph:
                def __init__(self, g, stream=None):
                    self.s = stream or FakeStream("torch's default capture stream")

                def __enter__(self):
                    fake.captured_on = self.s.name
                    self.before, fake.current = fake.current, self.s

                def __exit__(self, *exc):
                    if fake.capture_error is not None:  # as capture_end() does: the stream stays
                        raise fake.capture_error
                    fake.current = self.before

        self.cuda = Cuda

    def driver_launch(self, graph_exec, stream):
        """The driver's cuGraphLaunch: the graph alone, no RNG prologue; CUresult 0."""
        self.launches.append((graph_exec, stream))
        self.replay()
        return 0

    def rand(self, *shape, device=None):
        if self.broken_probe == "rand":
            raise RuntimeError("Offset increment outside graph capture encountered unexpectedly.")
        return FakeTensor([0.5] * shape[0])

    @staticmethod
    def isnan(t):
        return FakeTensor([isinstance(v, float) and math.isnan(v) for v in t.values], False)


class ReplayRewritesOutputs(unittest.TestCase):
    def test_a_replay_that_writes_every_output_passes_and_the_values_stay(self):
        a, b = FakeTensor([1.0, 2.0, 3.0]), FakeTensor([4.0])
        ids = FakeTensor([7, 8], floating=False)  # not floating: cannot hold the poison, not checked

        def replay():
            a.values, b.values = [1.0, 2.0, 3.0], [4.0]

        check_replay_writes_outputs(FakeTorch(replay), replay, (a, [b, ids], {"none": None}))
        self.assertEqual(a.values, [1.0, 2.0, 3.0])
        self.assertEqual(ids.values, [7, 8])

    def test_an_output_the_replay_leaves_alone_is_refused_with_its_count(self):
        a, b = FakeTensor([1.0, 2.0]), FakeTensor([3.0, 4.0, 5.0])

        def replay():  # the graph writes a, and only b's first element
            a.values = [1.0, 2.0]
            b.values[0] = 3.0

        with self.assertRaisesRegex(GraphIncomplete, r"output 1: 2 of 3 elements"):
            check_replay_writes_outputs(FakeTorch(replay), replay, (a, b))
        self.assertEqual(b.values, [3.0, 4.0, 5.0])  # the capture's values are put back

    def test_a_nan_the_work_itself_produced_is_not_counted_as_unwritten(self):
        a = FakeTensor([float("nan"), 1.0])

        def replay():
            a.values = [float("nan"), 1.0]

        check_replay_writes_outputs(FakeTorch(replay), replay, a)


class OwnOutputs(unittest.TestCase):
    """graphed() checks only the outputs each call makes afresh: one that is the same memory in every
    call (a view of an input) is neither poisoned nor required to be rewritten."""

    def run_graphed(self, replay_writes_fresh):
        alias = FakeTensor([5.0, 6.0])  # an input the work returns as it is

        def work():
            return FakeTensor([1.0, 2.0]), alias

        keep = []

        def capture():
            keep.append(work())
            return keep[-1]

        def replay():
            if replay_writes_fresh:
                keep[-1][0].values = [1.0, 2.0]

        torch = FakeTorch(replay)
        graphed(torch, capture, warmup=1)
        return alias

    def test_an_alias_of_an_input_is_left_alone(self):
        alias = self.run_graphed(replay_writes_fresh=True)
        self.assertEqual(alias.values, [5.0, 6.0])

    def test_a_fresh_output_the_replay_skips_is_still_refused(self):
        with self.assertRaisesRegex(GraphIncomplete, r"output 0: 2 of 2 elements"):
            self.run_graphed(replay_writes_fresh=False)


class CaptureStream(unittest.TestCase):
    def run_graphed(self, fn):
        out = FakeTensor([0.0])
        calls = []

        def work():
            calls.append(torch.current.name)
            out.values = [1.0]
            return out

        if fn is not None:
            work.capture_stream = fn
        torch = FakeTorch(lambda: work())
        replay, keep, note = graphed(torch, work, warmup=2, driver=torch.driver_launch)
        replay()
        return torch, calls

    def test_an_autograd_work_is_warmed_up_and_captured_on_its_forwards_stream(self):
        torch, calls = self.run_graphed(FakeStream("forward's"))
        self.assertEqual(torch.captured_on, "forward's")
        self.assertEqual(calls[:3], ["forward's"] * 3)  # two warm-ups and the capture

    def test_other_work_is_captured_on_a_side_stream_of_its_own(self):
        torch, calls = self.run_graphed(None)
        self.assertEqual(torch.captured_on, "side1")
        self.assertEqual(calls[:3], ["side1"] * 3)


class GraphLaunch(unittest.TestCase):
    """What is timed is the graph alone (the driver's cuGraphLaunch of torch's graph exec, on the
    current stream), not CUDAGraph.replay(), whose RNG prologue enqueues two fills before the graph."""

    def setUp(self):
        self.out = FakeTensor([0.0])
        self.torch = FakeTorch(lambda: self.out.fill_(1.0))

    def work(self):
        self.out.values = [1.0]
        return self.out

    def test_the_timed_launch_is_the_driver_launch_of_the_graph_exec_on_the_current_stream(self):
        launch, keep, note = graphed(self.torch, self.work, warmup=1, driver=self.torch.driver_launch)
        self.assertEqual(note, "")
        self.assertEqual(self.torch.replays, 1)  # the output check's replay, which sets the RNG state
        timer_stream = FakeStream("timer")
        with self.torch.cuda.stream(timer_stream):
            launch()
            launch()
        self.assertEqual(self.torch.replays, 1)
        self.assertEqual(self.torch.launches, [(FakeTorch.GRAPH_EXEC, timer_stream.cuda_stream)] * 2)

    def test_a_failed_launch_raises_with_the_driver_result(self):
        launch, note = graph_launch(self.torch, self.torch.cuda.CUDAGraph(), driver=lambda g, s: 400)
        with self.assertRaisesRegex(RuntimeError, "cuGraphLaunch failed: CUresult 400"):
            launch()

    def test_without_the_graph_exec_or_the_driver_replay_is_timed_and_the_note_says_so(self):
        class OldGraph:  # a torch without raw_cuda_graph_exec
            def replay(self):
                pass

        old = OldGraph()
        launch, note = graph_launch(self.torch, old, driver=self.torch.driver_launch)
        self.assertEqual(launch, old.replay)
        self.assertRegex(note, r"^timed with CUDAGraph.replay\(\) \(AttributeError: .*raw_cuda_graph_exec.*RNG-prologue")
        graph = self.torch.cuda.CUDAGraph()
        with mock.patch("seqbench_torch.timing.driver_graph_launch", return_value=None):
            launch, note = graph_launch(self.torch, graph)
        self.assertEqual(launch, graph.replay)
        self.assertIn("cuGraphLaunch could not be loaded", note)


class FailedCapture(unittest.TestCase):
    """A capture CUDA invalidated raises from torch.cuda.graph's __exit__ before torch has undone the
    capture: the stream is restored, and the work is timed directly only if torch still works."""

    def capture_fails(self, broken_probe):
        out = FakeTensor([0.0])
        torch = FakeTorch(lambda: None)
        torch.capture_error = RuntimeError("CUDA error: operation not permitted when stream is capturing")
        torch.broken_probe = broken_probe

        def work():
            out.values = [1.0]
            return out

        before = torch.current
        return torch, before, lambda: graphed(torch, work, warmup=1, driver=torch.driver_launch)

    def test_a_failure_that_leaves_torch_working_is_raised_as_it_is_with_the_stream_restored(self):
        torch, before, run = self.capture_fails(None)
        with self.assertRaisesRegex(RuntimeError, "operation not permitted when stream is capturing"):
            run()
        self.assertIs(torch.current, before)

    def test_an_allocator_or_generator_left_capturing_makes_the_context_unusable(self):
        for probe, says in (("empty_cache", r"torch.cuda.empty_cache\(\) failed: RuntimeError: captures_underway"),
                            ("rand", r"a random draw failed: RuntimeError: Offset increment outside graph capture")):
            torch, before, run = self.capture_fails(probe)
            with self.assertRaisesRegex(CudaUnusable, r"^CUDA graph capture failed \(RuntimeError: CUDA error: "
                                                      r"operation not permitted.*\) and left torch unusable: " + says):
                run()
            self.assertIs(torch.current, before)


class Copies(unittest.TestCase):
    """An experiment with calls_per_sample copies: one graph holds each copy's call once, in order."""

    def works(self, n, stream=None):
        outs = [None] * n  # each copy's latest output: a fresh tensor every call, as torch's ops make
        calls = []

        def make(i):
            def work():
                calls.append(i)
                outs[i] = FakeTensor([float(i)])
                return outs[i]

            if stream is not None:
                work.capture_stream = stream
            return work

        return [make(i) for i in range(n)], outs, calls

    def test_each_copy_is_warmed_up_then_captured_once_in_order(self):
        works, outs, calls = self.works(3)

        def replay():
            for i, o in enumerate(outs):
                o.values = [float(i)]

        replay_fn, (graph, keep), note = graphed(FakeTorch(replay), works, warmup=2, driver=lambda g, s: 0)
        self.assertEqual(calls, [0, 0, 1, 1, 2, 2, 0, 1, 2])  # warm-ups per copy, then the capture
        self.assertEqual(len(keep), 3)

    def test_a_copy_the_replay_leaves_alone_is_refused(self):
        works, outs, calls = self.works(3)

        def replay():  # copy 2's call missing from the graph
            outs[0].values, outs[1].values = [0.0], [1.0]

        with self.assertRaisesRegex(GraphIncomplete, r"output 2: 1 of 1 elements"):
            graphed(FakeTorch(replay), works, warmup=1)

    def test_copies_share_the_autograd_forward_stream(self):
        torch = FakeTorch(lambda: None)
        self.assertIs(forward_stream(torch), forward_stream(torch))
        self.assertIsNot(forward_stream(torch), forward_stream(FakeTorch(lambda: None)))
        works, outs, calls = self.works(2, FakeStream("forward's"))
        works[1].capture_stream = FakeStream("another")
        with self.assertRaisesRegex(ValueError, "different capture streams"):
            graphed(torch, works, warmup=1)
        with self.assertRaisesRegex(ValueError, "different capture streams"):
            in_turn(works)

    def test_in_turn_calls_each_copy_once_on_their_stream(self):
        stream = FakeStream("forward's")
        works, outs, calls = self.works(3, stream)
        work = in_turn(works)
        self.assertIs(work.capture_stream, stream)
        work()
        self.assertEqual(calls, [0, 1, 2])
        self.assertIs(in_turn(works[:1]), works[0])

    def test_a_sample_is_divided_by_its_calls(self):
        torch = FakeTorch(lambda: None)
        timer = TorchTimer(torch, TimerPolicy(warmup_runs=2, min_samples=4, max_samples=4, flush_l2=False))
        enqueued = []
        samples = timer.sample_ms(lambda: enqueued.append(torch.current.name), 3)
        self.assertEqual(samples, [2.0] * 4)  # 6 ms an event pair, 3 calls in it
        self.assertEqual(len(enqueued), 2 + 4)  # warm-ups, then one enqueue a sample
        self.assertEqual(timer.sample_ms(lambda: None), [6.0] * 4)
        for bad in (0, -1, 1.5, True):
            with self.assertRaisesRegex(ValueError, "calls"):
                timer.sample_ms(lambda: None, bad)


    def test_the_host_waits_for_the_flush_before_directly_launched_work_only(self):
        torch = FakeTorch(lambda: None)
        timer = TorchTimer(torch, TimerPolicy(warmup_runs=0, min_samples=2, max_samples=2, flush_l2=False))
        order = []

        class Flush:
            def sum(self):
                order.append("flush")

        class Stream(FakeStream):
            def synchronize(self):
                order.append("wait")

        class Start:
            def record(self, stream=None):
                order.append("start")

            def elapsed_time(self, other):
                return 6.0

        timer.flush_buffer, timer.stream, timer.start = Flush(), Stream("timer"), Start()
        timer.sample_ms(lambda: order.append("work"))
        # After the warm-up's wait: flush, the host waits, then the event pair around the work.
        self.assertEqual(order, ["wait"] + ["flush", "wait", "start", "work"] * 2)
        order.clear()
        timer.sample_ms(lambda: order.append("launch"), host_counts=False)  # a graph launch: no wait
        self.assertEqual(order, ["wait"] + ["flush", "start", "launch"] * 2)

if __name__ == "__main__":
    unittest.main()
