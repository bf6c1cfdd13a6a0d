"""The GPU timer of the PyTorch runner: the same policy as suites/gpu_timer.cpp (policy.py), with
torch's CUDA events, and CUDA graphs for single small ops. Needs torch and a device."""
import ctypes
import time

from .cuda_state import CudaUnusable, state_after_failed_capture
from .errors import failure_reason
from .policy import TimerPolicy


class TorchTimer:
    def __init__(self, torch, policy=TimerPolicy()):
        self.torch = torch
        self.policy = policy
        self.stream = torch.cuda.Stream()
        self.start = torch.cuda.Event(enable_timing=True)
        self.stop = torch.cuda.Event(enable_timing=True)
        self.flush_buffer = None
        if policy.flush_l2:
            l2 = int(getattr(torch.cuda.get_device_properties(torch.cuda.current_device()), "L2_cache_size", 0))
            # 64 MiB when torch does not say: more than any current GPU's L2. Twice L2, read (not
            # written) before each sample, as suites/l2_flush.h explains: a write leaves dirty
            # lines whose write-back would fall inside the timed work.
            l2 = l2 if l2 > 0 else 64 << 20
            self.flush_buffer = torch.zeros((2 * l2 + 3) // 4, dtype=torch.int32, device="cuda")

    def sample_ms(self, work, calls=1, host_counts=True):
        """Milliseconds per call, one per sample: `work()` enqueues one sample's `calls` calls on the
        current stream (a graph replay of them, or each copy of an experiment called once), and each
        sample is divided by `calls`. `host_counts` (directly launched work): the host waits for the
        flush before it records the start event, so that its launch costs fall inside the event pair
        rather than behind the flush, as seqbench's timer does; False for a graph launch."""
        torch, policy = self.torch, self.policy
        if isinstance(calls, bool) or not isinstance(calls, int) or calls < 1:
            raise ValueError(f"calls {calls!r} is not a positive integer")
        # Inputs were made on the default stream: they must be complete before this stream reads them.
        torch.cuda.synchronize()
        # A work whose kernels autograd places on its forward's stream is timed on that stream, so that
        # the events bracket it without cross-stream waits (see families/common.autograd_variants).
        stream = getattr(work, "capture_stream", None) or self.stream
        with torch.cuda.stream(stream):
            for _ in range(policy.warmup_runs):
                work()
            stream.synchronize()
            samples = []
            begin = time.monotonic()
            while True:
                if self.flush_buffer is not None:
                    # A read of the whole buffer, outside the event pair, as the C++ timer does.
                    self.flush_buffer.sum()
                    if host_counts:
                        stream.synchronize()
                self.start.record(stream)
                work()
                self.stop.record(stream)
                self.stop.synchronize()
                samples.append(self.start.elapsed_time(self.stop) / calls)
                if policy.done(len(samples), time.monotonic() - begin):
                    return samples


def capture_stream(works):
    """The stream the works' kernels must be captured and timed on (`capture_stream`, see
    autograd_variants), or None; ValueError if the copies of one variant disagree."""
    streams = [getattr(w, "capture_stream", None) for w in works]
    if any(s is not streams[0] for s in streams):
        raise ValueError("the copies of a variant name different capture streams: one graph cannot hold them")
    return streams[0]


def in_turn(works):
    """One sample's direct calls: each copy's work once, in order (the C++ runner's rotation), on the
    works' capture stream when they name one."""
    works = list(works)
    if len(works) == 1:
        return works[0]

    def work():
        return [w() for w in works]

    work.capture_stream = capture_stream(works)
    return work


def graphed(torch, fns, warmup=3, driver=None):
    """`fns` (one work, or a list: one per copy of an experiment's inputs, called in order) captured
    once into a CUDA graph; returns (replay, keep, note) where replay() enqueues the graph on the
    current stream (graph_launch: the graph alone; `note` says when it could not be), and `keep`
    holds the outputs of the capture (their memory is the graph's). A capture that fails and leaves
    torch unusable raises CudaUnusable (state_after_failed_capture). Warm-up on a
    side stream first, as torch.cuda.graphs requires (and so that torch.compile has compiled and
    autotuned before the capture), each copy max(1, warmup) times. A work whose kernels autograd
    places on a stream of its own (`capture_stream`: the stream its forward ran on, see
    autograd_variants, shared by every copy) is warmed up and captured on that stream, since
    autograd runs each backward kernel on its forward's stream. Before returning, one replay must
    rewrite every output (check_replay_writes_outputs)."""
    fns = list(fns) if isinstance(fns, (list, tuple)) else [fns]
    side = capture_stream(fns) or torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    warm = []
    with torch.cuda.stream(side):
        for fn in fns:
            for _ in range(max(1, warmup)):
                out = fn()
            warm.append(out)
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    before = torch.cuda.current_stream()
    try:
        with torch.cuda.graph(graph, stream=side):
            keep = [fn() for fn in fns]
    except Exception as ex:
        # A capture that CUDA invalidated (a sync or a refused call inside) makes capture_end()
        # raise inside torch.cuda.graph's __exit__, before torch has undone the capture's state;
        # the caller's fallback (time the work directly) is sound only if torch still works.
        broken = state_after_failed_capture(torch, before)
        if broken:
            raise CudaUnusable(f"CUDA graph capture failed ({failure_reason(ex)}) and left torch unusable: "
                               f"{broken}") from ex
        raise
    keep = keep[0] if len(keep) == 1 else keep
    torch.cuda.synchronize()
    # An output in the same memory as a warm-up call's is not the call's own (a view of an input,
    # say): the graph need not write it, and poisoning it would poison the input.
    not_own = {storage_ptr(t) for t in floating_tensors(torch, warm)}
    check_replay_writes_outputs(torch, graph.replay, keep, not_own)
    del warm
    launch, note = graph_launch(torch, graph, driver)
    return launch, (graph, keep), note


def driver_graph_launch():
    """The CUDA driver's cuGraphLaunch (libcuda, already loaded by torch's CUDA runtime), or None."""
    try:
        libcuda = ctypes.CDLL("libcuda.so.1")
        launch = libcuda.cuGraphLaunch
    except (OSError, AttributeError):
        return None
    launch.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
    launch.restype = ctypes.c_int
    return launch


def graph_launch(torch, graph, driver=None):
    """(launch, note): launch() enqueues the captured graph on the current stream and nothing else,
    as seqbench's timer launches its graph exec. CUDAGraph.replay() is not that: for a graph that
    draws random numbers (dropout) it first runs torch's RNG prologue, two small fill kernels (the
    seed and offset the graph reads) on the same stream, which would fall between the events and
    count against torch. So the instantiated graph (torch's raw_cuda_graph_exec) is launched
    through the driver's cuGraphLaunch; every launch then reuses the seed and offset of one untimed
    replay() made here first: the same work, the same mask. Where torch or the
    driver cannot give that launch, replay() is timed and the note says so. `driver` stands in for
    the driver's cuGraphLaunch (tests); None loads it."""
    # One replay() first, untimed: it instantiates the graph where torch has not yet, and for a graph
    # that draws random numbers its RNG prologue fills the seed and offset the graph reads, which the
    # launches below then reuse.
    graph.replay()
    try:
        exec_handle = int(graph.raw_cuda_graph_exec())
    except Exception as ex:  # an older torch, or no instantiated graph
        exec_handle, why = None, failure_reason(ex)
    cu_graph_launch = None
    if exec_handle is not None:
        cu_graph_launch = driver if driver is not None else driver_graph_launch()
        why = "the CUDA driver's cuGraphLaunch could not be loaded"
    if exec_handle is None or cu_graph_launch is None:
        return graph.replay, (f"timed with CUDAGraph.replay() ({why}): a graph that draws random numbers "
                              f"includes torch's two RNG-prologue fills in each sample")

    def launch():
        rc = cu_graph_launch(exec_handle, torch.cuda.current_stream().cuda_stream)
        if rc != 0:
            raise RuntimeError(f"cuGraphLaunch failed: CUresult {rc}")

    return launch, ""


class GraphIncomplete(Exception):
    """A replay of a captured graph left outputs unwritten: part of the work ran outside it."""


def floating_tensors(torch, value):
    """The non-empty floating-point tensors in `value` (a tensor, or tuples, lists and dicts of them)."""
    if isinstance(value, torch.Tensor):
        return [value] if value.is_floating_point() and value.numel() > 0 else []
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, (tuple, list)):
        return [t for v in value for t in floating_tensors(torch, v)]
    return []


def storage_ptr(tensor):
    return tensor.untyped_storage().data_ptr()


def check_replay_writes_outputs(torch, replay, outputs, not_own=frozenset()):
    """Raises GraphIncomplete when one `replay()` does not rewrite every element of the floating-point
    `outputs` of the capture. Work enqueued during the capture on a stream the capture does not follow
    runs once, eagerly, and is missing from the graph; its outputs then look right after the capture
    but a replay never touches them, and the graph would be timed doing less work than a call. So:
    each output is poisoned with NaN, the graph replayed once, and any element still NaN (that was not
    NaN after the capture) is an element the graph does not write. The outputs' values from the
    capture are put back afterwards, in case one of them is memory the work also reads. Outputs whose
    storage is in `not_own` (memory that existed before the capture) are neither poisoned nor checked."""
    tensors = [t for t in floating_tensors(torch, outputs) if storage_ptr(t) not in not_own]
    if not tensors:
        return
    captured = [t.clone() for t in tensors]
    for t in tensors:
        t.fill_(float("nan"))
    replay()
    torch.cuda.synchronize()
    unwritten = []
    for i, (t, before) in enumerate(zip(tensors, captured)):
        missing = int((torch.isnan(t) & ~torch.isnan(before)).sum().item())
        if missing:
            unwritten.append(f"output {i}: {missing} of {t.numel()} elements")
        t.copy_(before)
    torch.cuda.synchronize()
    if unwritten:
        raise GraphIncomplete("a replay of the captured graph left outputs unwritten (" + "; ".join(unwritten) +
                              "): part of the work ran outside the capture")


def measure_copy_gbps(torch, timer, nbytes):
    """Device-to-device copy bandwidth (read + write) through torch, as measure_copy_gbps() in C++."""
    from .stats import summarize_samples

    src = torch.empty(nbytes, dtype=torch.uint8, device="cuda").fill_(1)
    dst = torch.empty_like(src)
    median = summarize_samples(timer.sample_ms(lambda: dst.copy_(src))).median
    return 2.0 * nbytes / (median * 1e-3) / 1e9
