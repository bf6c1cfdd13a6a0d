"""What every family shares: the plan an experiment maps to, parameter lookup, dtypes, and the
eager / torch.compile pair. Nothing here imports torch; `build(torch)` receives it."""
import math
from dataclasses import dataclass
from typing import Callable, Tuple

from ..errors import Unmapped

EAGER = "torch_eager"
COMPILE = "torch_compile"
FUSED = "torch_fused"

# seqbench's dtype names (core/dtype.h) -> torch attribute names.
DTYPES = {"f32": "float32", "f16": "float16", "bf16": "bfloat16"}


@dataclass(frozen=True)
class Plan:
    """How to measure one experiment in PyTorch. `build(torch)` allocates the inputs (on the GPU) and
    returns {variant name: work}, each `work()` enqueueing one call on the current stream and
    returning its outputs; `variants` lists the names in report order, the first being the baseline.
    `cuda_graph`: time each work through a CUDA graph (single small ops: launch overhead must not
    decide the result). `lazy`: build's values are factories, each making its variant's own state
    and returning its work, so that one variant's state is resident at a time (the trainer's)."""

    variants: Tuple[str, ...]
    cuda_graph: bool
    build: Callable
    note: str = ""
    lazy: bool = False


def need(params, *keys):
    """The values of `keys`; Unmapped naming the first missing one."""
    missing = [k for k in keys if k not in params]
    if missing:
        raise Unmapped(f"params lack '{missing[0]}'")
    return [params[k] for k in keys]


def first_of(params, *alternatives, default=None):
    """The value of the first key present, or `default`; Unmapped when none is and there is no default."""
    for k in alternatives:
        if k in params:
            return params[k]
    if default is not None:
        return default
    raise Unmapped("params lack any of " + ", ".join(f"'{k}'" for k in alternatives))


def positive_int(name, value):
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise Unmapped(f"params.{name} = {value!r} is not a positive integer")
    return value


def dtype_name(params):
    name = params.get("dtype")
    if name not in DTYPES:
        raise Unmapped(f"params.dtype {name!r} is not one of {', '.join(DTYPES)}")
    return name


def torch_dtype(torch, name):
    return getattr(torch, DTYPES[name])


def is_backward(experiment):
    """From the name ("..._bwd/...") or params.direction ("bwd", as every suite writes it)."""
    return experiment.family.endswith("_bwd") or experiment.params.get("direction") == "bwd"


def dropout_p(params):
    p = float(first_of(params, "p", "dropout", "dropout_p"))
    if not 0.0 <= p < 1.0:
        raise Unmapped(f"params.p = {p} is outside [0, 1)")
    return p


def operator_variants(torch, fn, args):
    """{torch_eager: fn(*args), torch_compile: compiled fn(*args)}: the same function, eager and
    through torch.compile with fixed shapes (dynamic=False) and no graph breaks (fullgraph=True, so
    that a silent fallback to eager cannot pass for compiled code)."""
    compiled = torch.compile(fn, dynamic=False, fullgraph=True)
    return {EAGER: lambda: fn(*args), COMPILE: lambda: compiled(*args)}


def autograd_variants(torch, forward, args, wrt):
    """Backward as autograd runs it, for families whose backward has no single aten op: the forward
    (eager, or compiled) runs once here, outside the timing, with `args[i]` for i in `wrt` requiring
    grad; each work() is then torch.autograd.grad(out, those args, dout, retain_graph=True), i.e. the
    eager backward kernels or the compiled (AOTAutograd) backward graph.
    Autograd runs each backward kernel on the stream its forward ran on, so the forward runs on a
    stream other than the timer's, named by each work's `capture_stream`: a CUDA graph is captured on that stream
    (timing.graphed), where the backward's kernels land; direct timing on another stream still
    brackets them, autograd ordering the backward after the caller's stream and the caller's stream
    after the backward. The stream is one for the whole run (forward_stream), so that the copies of
    an experiment (its calls_per_sample builds) can be captured into one graph."""
    leaves = [a.detach().requires_grad_(True) if i in wrt else a for i, a in enumerate(args)]
    inputs = [leaves[i] for i in wrt]
    compiled = torch.compile(forward, dynamic=False, fullgraph=True)
    stream = forward_stream(torch)
    torch.cuda.synchronize()  # the inputs were made on the default stream
    works = {}
    for name, fn in ((EAGER, forward), (COMPILE, compiled)):
        with torch.cuda.stream(stream):
            out = fn(*leaves)
            dout = torch.randn_like(out, dtype=torch.float32).to(out.dtype) if out.is_floating_point() else None
        torch.cuda.synchronize()

        def work(out=out, dout=dout):
            return torch.autograd.grad(out, inputs, dout, retain_graph=True)

        work.capture_stream = stream
        works[name] = work
    return works


_FORWARD_STREAMS = {}


def forward_stream(torch):
    """The one stream autograd_variants runs its forwards on, per torch module (tests use stand-ins)."""
    key = id(torch)
    if key not in _FORWARD_STREAMS:
        _FORWARD_STREAMS[key] = (torch, torch.cuda.Stream())  # the module kept alive with its id
    return _FORWARD_STREAMS[key][1]


def operator_plan(build, note=""):
    return Plan((EAGER, COMPILE), True, build, note)


def randn(torch, shape, dtype, scale=1.0, shift=0.0):
    return (torch.randn(shape, device="cuda", dtype=torch.float32) * scale + shift).to(dtype)


def gelu_approximate(activation):
    return {"gelu_erf": "none", "gelu_tanh": "tanh"}[activation]


SQRT_HALF = math.sqrt(0.5)
