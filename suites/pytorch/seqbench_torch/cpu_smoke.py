"""`python3 suites/pytorch/cpu_smoke.py --seqbench BIN`: every planned experiment's PyTorch code run
once (twice, in fact) on the CPU, so that what the runner would do on a GPU (build the inputs, make
each variant, call it) is tried before a GPU is at hand. Nothing is timed or written.

The families put their tensors on "cuda" and use torch.cuda's streams and generators. Here
a TorchFunctionMode moves every tensor made with device "cuda" to the CPU, and torch.cuda's
Stream, stream, synchronize, current_stream and torch.Generator(device="cuda") are stood in for
(streams order nothing on the CPU). torch.compile keeps its arguments (fullgraph=True included, so
a graph break still fails) but, by default, takes the "aot_eager" backend: Dynamo's capture and
AOTAutograd run as on the GPU, Inductor's CPU code generation (not the Triton code a GPU gets) only
with --backend inductor. CUDA graphs are not tried.

Each variant's work is called twice, as the timing calls it again and again (a backward with
retain_graph, an optimizer step, a compiled graph's second call); the floating outputs of the
second call must be finite. The trainer's works return nothing (an optimizer step), so for them
this only shows that they run; their rules are torch's own.
What it cannot find: anything of CUDA's own (graph capture, Triton, fused CUDA kernels, dtype
support that differs between the CPU's and CUDA's kernels), and the speed of anything.

Exit codes: 0 every variant ran; 1 a variant failed, or an error; 2 bad usage.
"""
import contextlib
import functools
import importlib
import time

from . import command, listing
from .errors import RunnerError, Unmapped, failure_reason

PROG = "cpu_smoke"
SUITES = ("operators", "trainer", "layers")


def parser():
    p = command.Parser(prog=PROG, description="Run each planned experiment's PyTorch variants once on the CPU.")
    p.add_argument("--seqbench", required=True, help="the built seqbench binary (for `seqbench list --json`)")
    p.add_argument("--suite", action="append", default=[], choices=SUITES, help="only these suites (repeatable)")
    p.add_argument("--filter", default="", help="regex (Python re, searched) over suite/experiment/variant names")
    p.add_argument("--full", action="store_true", help="the full shapes (default: the --quick shapes)")
    p.add_argument("--backend", default="aot_eager", help="torch.compile's backend (default aot_eager; inductor)")
    return p


class _Stream:
    """A CUDA stream's stand-in: on the CPU everything is already in order."""

    def wait_stream(self, _other):
        pass

    def synchronize(self):
        pass

    def record_event(self, event=None):
        return event


@contextlib.contextmanager
def cpu_for_cuda(torch):
    """Tensors asked for on "cuda" made on the CPU, and torch.cuda's streams stood in for."""
    from torch.overrides import TorchFunctionMode

    def on_cpu(device):
        try:
            return device is not None and torch.device(device).type == "cuda"
        except (RuntimeError, TypeError):
            return False

    class CudaToCpu(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = dict(kwargs or {})
            if on_cpu(kwargs.get("device")):
                kwargs["device"] = "cpu"
            if func is torch.Tensor.cuda:
                return args[0]
            if func is torch.Tensor.to:
                args = tuple("cpu" if isinstance(a, (str, torch.device)) and on_cpu(a) else a for a in args)
            return func(*args, **kwargs)

    real_generator = torch.Generator

    class GeneratorType(type):
        """torch.Generator(device="cuda") makes a CPU generator; isinstance(g, torch.Generator) still
        holds for every real generator (Inductor asks it of graph inputs)."""

        def __call__(cls, device="cpu"):
            return real_generator("cpu" if on_cpu(device) else device)

        def __instancecheck__(cls, obj):
            return isinstance(obj, real_generator)

        def __subclasscheck__(cls, sub):
            return issubclass(sub, real_generator)

    class Generator(metaclass=GeneratorType):
        pass

    saved = {name: getattr(torch.cuda, name) for name in ("Stream", "stream", "synchronize", "current_stream")}
    torch.Generator = Generator
    torch.cuda.Stream = lambda *a, **k: _Stream()
    torch.cuda.stream = lambda _stream=None: contextlib.nullcontext()
    torch.cuda.synchronize = lambda *a, **k: None
    torch.cuda.current_stream = lambda *a, **k: _Stream()
    try:
        with CudaToCpu():
            yield
    finally:
        torch.Generator = real_generator
        for name, value in saved.items():
            setattr(torch.cuda, name, value)


@contextlib.contextmanager
def compile_backend(torch, backend):
    real = torch.compile

    @functools.wraps(real)
    def compile_with_backend(*args, **kwargs):
        kwargs.setdefault("backend", backend)
        return real(*args, **kwargs)

    torch.compile = compile_with_backend
    try:
        yield
    finally:
        torch.compile = real


def tensors(out):
    """The tensors in a work's result (a tensor, a tuple or list of them, None)."""
    if out is None:
        return []
    if isinstance(out, (tuple, list)):
        return [t for o in out for t in tensors(o)]
    return [out] if hasattr(out, "is_floating_point") else []


def run_variant(torch, work):
    """Calls `work` twice; RunnerError when a floating output is not finite."""
    for _ in range(2):
        out = work()
    for t in tensors(out):
        if t.is_floating_point() and t.numel() and not bool(torch.isfinite(t.float()).all()):
            raise RunnerError(f"a {tuple(t.shape)} {t.dtype} output holds non-finite values")


def run(args, out):
    from .cli import compile_filter, select_suites
    from .families import plan_for
    from .measure import configure

    regex = compile_filter(args.filter)
    suites = select_suites(listing.list_suites(args.seqbench, not args.full), args.suite)
    try:
        torch = importlib.import_module("torch")
        dynamo = importlib.import_module("torch._dynamo")
        configure(torch, 20261122)
    except Exception as e:
        raise RunnerError(f"PyTorch is not importable or not configurable ({failure_reason(e)})") from None
    ok = failed = skipped = 0
    with cpu_for_cuda(torch), compile_backend(torch, args.backend):
        for suite in suites:
            for e in suite.experiments:
                try:
                    plan = plan_for(e)
                except Unmapped as why:
                    if regex.search(f"{suite.name}/{e.name}"):
                        print(f"{suite.name}/{e.name}: skipped ({why})", file=out, flush=True)
                        skipped += 1
                    continue
                variants = [v for v in plan.variants if regex.search(f"{suite.name}/{e.name}/{v}")]
                if not variants:
                    continue
                dynamo.reset()
                try:
                    built = plan.build(torch)
                except Exception as ex:
                    print(f"{suite.name}/{e.name}: FAILED building its inputs: {failure_reason(ex)}", file=out, flush=True)
                    failed += len(variants)
                    continue
                for name in variants:
                    start = time.monotonic()
                    try:
                        run_variant(torch, built[name]() if plan.lazy else built[name])
                        ok += 1
                        print(f"{suite.name}/{e.name}/{name}: ok ({time.monotonic() - start:.1f} s)", file=out,
                              flush=True)
                    except Exception as ex:
                        failed += 1
                        print(f"{suite.name}/{e.name}/{name}: FAILED {failure_reason(ex)}", file=out, flush=True)
                del built
    print(f"{PROG}: {ok} variant(s) ran, {failed} failed, {skipped} experiment(s) skipped; PyTorch "
          f"{torch.__version__} on the CPU, torch.compile backend {args.backend}", file=out, flush=True)
    if ok + failed == 0:
        raise RunnerError("nothing ran: no planned experiment matches the filter")
    return 1 if failed else 0


def main(argv=None):
    return command.main(PROG, parser(), run, argv)
