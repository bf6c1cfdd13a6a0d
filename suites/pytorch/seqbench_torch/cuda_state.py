"""Whether the CUDA context still works after a failure. Most failures (a compile error, out of
memory, a refused graph capture) cost one variant; a sticky error (an illegal address, a device-side
assert) breaks the context for the rest of the process: every later call, torch.cuda.empty_cache()
included, raises it again. Measuring on would fill the report with copies of that error, and the
cleanup calls would raise out of the run before anything was written. So after a failure the
runner asks here, and on a sticky error it records the rest as not run, writes the reports and stops."""
import gc

from .errors import failure_reason

# What CUDA's sticky errors say (cudaGetErrorString, as torch's messages quote it), lower case.
STICKY_MESSAGES = (
    "illegal memory access",
    "illegal instruction",
    "misaligned address",
    "device-side assert",
    "unspecified launch failure",
    "uncorrectable ecc error",
    "hardware stack error",
    "illegal address",
    "launch timed out",
)


class CudaUnusable(Exception):
    """The CUDA context is gone. `entry` and `failures` carry what the experiment in flight had
    measured and what failed (measure_experiment fills them in on the way out)."""

    def __init__(self, reason, entry=None, failures=()):
        super().__init__(reason)
        self.reason = reason
        self.entry = entry
        self.failures = list(failures)


def unusable(torch, ex):
    """Why the context cannot run work after `ex`, or None: `ex` names a sticky error, or a
    torch.cuda.synchronize() after it fails (which a sticky error makes it do)."""
    if any(m in str(ex).lower() for m in STICKY_MESSAGES):
        return failure_reason(ex)
    try:
        torch.cuda.synchronize()
    except Exception as probe:
        return f"{failure_reason(ex)}; then torch.cuda.synchronize() failed: {failure_reason(probe)}"
    return None


def release_memory(torch):
    """gc and torch.cuda.empty_cache() between variants and experiments; a failure there is a
    context that no longer works (CudaUnusable), not an exception out of the run."""
    gc.collect()
    try:
        torch.cuda.empty_cache()
    except Exception as ex:
        raise CudaUnusable(f"torch.cuda.empty_cache() failed: {failure_reason(ex)}") from None


def state_after_failed_capture(torch, stream_before):
    """Why torch cannot go on after a CUDA graph capture raised, or None. When CUDA invalidates a
    capture (a synchronizing or refused call inside it), torch.cuda.graph's __exit__ raises from
    capture_end() before it ends the allocator's capture pool, the RNG generator's capture mode and
    the stream context: the stream is put back here; the allocator and the generator are probed
    (torch.cuda.empty_cache() asserts while a capture is still listed as underway, and a random draw
    raises while the generator still thinks it is capturing). None: the failure was the work's own
    (a Python error, a refused op before anything was captured) and the work may be timed directly."""
    try:
        torch.cuda.set_stream(stream_before)
    except Exception as ex:
        return f"the stream could not be restored: {failure_reason(ex)}"
    probes = (("torch.cuda.synchronize()", lambda: torch.cuda.synchronize()),
              ("torch.cuda.empty_cache()", lambda: torch.cuda.empty_cache()),
              ("a random draw", lambda: torch.rand(1, device="cuda")))
    for what, probe in probes:
        try:
            probe()
        except Exception as ex:
            return f"{what} failed: {failure_reason(ex)}"
    return None
