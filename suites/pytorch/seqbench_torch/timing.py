"""The GPU timer of the PyTorch runner: the same policy as suites/gpu_timer.cpp (policy.py), with
torch's CUDA events, and CUDA graphs for single small ops. Needs torch and a device."""
import time

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
            # 64 MiB when torch does not say: more than any current GPU's L2.
            self.flush_buffer = torch.empty(l2 if l2 > 0 else 64 << 20, dtype=torch.uint8, device="cuda")

    def sample_ms(self, work):
        """Milliseconds per call of `work()` (which enqueues on the current stream), one per sample."""
        torch, policy = self.torch, self.policy
        # Inputs were made on the default stream: they must be complete before this stream reads them.
        torch.cuda.synchronize()
        with torch.cuda.stream(self.stream):
            for _ in range(policy.warmup_runs):
                work()
            self.stream.synchronize()
            samples = []
            begin = time.monotonic()
            while True:
                if self.flush_buffer is not None:
                    # A different byte each time, outside the event pair, as the C++ timer does.
                    self.flush_buffer.fill_(len(samples) & 0xFF)
                self.start.record(self.stream)
                for _ in range(policy.runs_per_sample):
                    work()
                self.stop.record(self.stream)
                self.stop.synchronize()
                samples.append(self.start.elapsed_time(self.stop) / policy.runs_per_sample)
                if policy.done(len(samples), time.monotonic() - begin):
                    return samples


def graphed(torch, fn, warmup=3):
    """`fn` captured once into a CUDA graph; returns (replay, keep) where replay() enqueues the graph
    on the current stream and `keep` holds the outputs of the capture (their memory is the graph's).
    Warm-up on a side stream first, as torch.cuda.graphs requires (and so that torch.compile has
    compiled and autotuned before the capture)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(warmup):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        keep = fn()
    torch.cuda.synchronize()
    return graph.replay, (graph, keep)


def measure_copy_gbps(torch, timer, nbytes):
    """Device-to-device copy bandwidth (read + write) through torch, as measure_copy_gbps() in C++."""
    from .stats import summarize_samples

    src = torch.empty(nbytes, dtype=torch.uint8, device="cuda").fill_(1)
    dst = torch.empty_like(src)
    median = summarize_samples(timer.sample_ms(lambda: dst.copy_(src))).median
    return 2.0 * nbytes / (median * 1e-3) / 1e9
