"""Measuring the planned experiments with torch and writing one report per suite (needs a GPU).

How a run ends. Each suite's report is rewritten after every experiment (suite_report.py), merged
into the part already in the folder (merge.py). Before each experiment the time budget
(--budget-seconds, budget.py) may say it is too late to start it: then it and the rest are listed
as "not started: time budget" (said once) and the exit code is 3 when nothing failed. SIGTERM
(gpu.sh's `timeout`; interrupt.py) or Ctrl-C ends the experiment in flight: it and the rest are
listed as "not run: ...", the reports written, and the run ends with a one-line error (exit 1). A
sticky CUDA error (cuda_state.py) is recorded as the failure it is, then handled the same way.
Parity runs after the suite's timing, so that an oracle cannot cost a measurement, and an error in
one dumped experiment is that experiment's failed check (parity.py).
"""
import os

from . import merge
from . import meta as meta_module
from . import precision
from .budget import MARGIN_FLOOR, Budget
from .cuda_state import CudaUnusable, release_memory, unusable
from .errors import RunnerError, failure_reason
from .interrupt import Terminated
from .policy import TimerPolicy
from .report import finalize_speedups, make_variant
from .stats import summarize_samples
from .suite_report import SuiteRun
from .timing import GraphIncomplete, TorchTimer, graphed, in_turn, measure_copy_gbps

EXIT_INCOMPLETE = 3  # nothing failed, but the time budget left experiments unstarted (cli.py documents it)


def configure(torch, seed):
    torch.manual_seed(seed)
    # One compiled graph per experiment and shape: far more than dynamo's default recompile limit
    # (8), past which it would silently run eager. Reset between experiments as well.
    import torch._dynamo as dynamo

    for name in ("cache_size_limit", "recompile_limit", "accumulated_cache_size_limit", "accumulated_recompile_limit"):
        if hasattr(dynamo.config, name):
            setattr(dynamo.config, name, max(getattr(dynamo.config, name), 4096))
    precision.disable_tf32_matmul(torch)  # the new switch on PyTorch >= 2.9, allow_tf32 before
    # The backward experiments time autograd.grad(..., retain_graph=True) of one forward, again and
    # again; AOTAutograd's donated buffers (the flag exists from PyTorch 2.5, on by default from 2.6)
    # let the compiled backward reuse saved activations' memory, and a backward compiled with them
    # raises on retain_graph=True ("... non-empty donated buffers which requires create_graph=False
    # and retain_graph=False ..."). Off before anything compiles, so the compiled backward can rerun.
    import torch._functorch.config as functorch_config

    if hasattr(functorch_config, "donated_buffer"):
        functorch_config.donated_buffer = False


def measure_variant(torch, timer, plan, works):
    """Samples of one variant, whose `works` are its calls on each copy of the inputs (a sample calls
    each once, as seqbench's do); whether it went through a CUDA graph, and if not, why."""
    note = ""
    calls = len(works)
    if plan.cuda_graph:
        try:
            replay, keep, note = graphed(torch, works)
            samples = timer.sample_ms(replay, calls, host_counts=False)
            del keep
            return samples, True, note
        except CudaUnusable:
            raise
        except Exception as e:  # capture refused (a sync inside, an unsupported op): time it directly
            first = str(e).splitlines()[0] if str(e) else ""
            if isinstance(e, GraphIncomplete):
                note = f"CUDA graph refused ({first}); timed without"
            else:
                note = f"CUDA graph capture failed ({type(e).__name__}: {first}); timed without"
            torch.cuda.synchronize()
    return timer.sample_ms(in_turn(works), calls), False, note


def raise_if_unusable(torch, ex):
    if isinstance(ex, CudaUnusable):
        raise ex
    broken = unusable(torch, ex)
    if broken:
        raise CudaUnusable(broken)


def finish(entry, plan):
    """The experiment's entry with its baseline and speedups, or None when no variant was measured."""
    if not entry["variants"]:
        return None
    measured = [v["name"] for v in entry["variants"]]
    entry["baseline"] = next(n for n in plan.variants if n in measured)  # torch_eager unless it failed
    finalize_speedups(entry)
    return entry


def measure_experiment(torch, timer, e, plan, variants, copy_gbps, log, progress=None):
    """(entry or None, failed variants) of one experiment; `progress(label)` is called before each
    variant is measured (a cold torch.compile takes long: the log says what is running). On a
    sticky CUDA error, CudaUnusable carrying the entry so far, the failure and the variants not run."""
    import torch._dynamo as dynamo

    dynamo.reset()
    minimal = e.minimal
    entry = {"name": e.name, "params": e.params, "baseline": None, "variants": []}
    failures = []
    try:
        # As many copies of the inputs as seqbench's samples hold calls (its list says how many), so
        # that no call of a sample finds its inputs in L2 (suites/gpu_timer.h, graph_calls_per_sample).
        # A copy that cannot be built (memory, a compile error) fails this experiment's variants, not the run.
        try:
            copies = [plan.build(torch) for _ in range(e.calls_per_sample)]
        except Exception as ex:
            reason = failure_reason(ex)
            log(f"  {e.suite}/{e.name}: FAILED building {e.calls_per_sample} cop{'y' if e.calls_per_sample == 1 else 'ies'} "
                f"of its inputs: {reason}")
            failures.extend({"experiment": e.name, "variant": name, "reason": f"failed: {reason}"} for name in variants)
            raise_if_unusable(torch, ex)
            release_memory(torch)
            return None, failures
        for name in variants:
            try:
                if progress is not None:
                    progress(f"{e.suite}/{e.name}/{name}")
                works = [c[name]() if plan.lazy else c[name] for c in copies]
                samples, graph, note = measure_variant(torch, timer, plan, works)
                del works
                v = make_variant(name, summarize_samples(samples), minimal.bytes, minimal.flops, copy_gbps)
                v["cuda_graph"] = graph
                v["calls_per_sample"] = e.calls_per_sample
                if note or plan.note:
                    v["note"] = "; ".join(x for x in (plan.note, note) if x)
                entry["variants"].append(v)
                log(f"  {e.suite}/{e.name}/{name}: median {v['median_ms']:.4g} ms (p20 {v['p20_ms']:.4g}, p80 "
                    f"{v['p80_ms']:.4g}, {v['samples']} samples{', CUDA graph' if graph else ''}"
                    f"{f', {e.calls_per_sample} calls a sample' if e.calls_per_sample > 1 else ''})")
            except Exception as ex:
                reason = failure_reason(ex)
                failures.append({"experiment": e.name, "variant": name, "reason": f"failed: {reason}"})
                log(f"  {e.suite}/{e.name}/{name}: FAILED {reason}")
                raise_if_unusable(torch, ex)
            if plan.lazy:
                release_memory(torch)
        del copies
        release_memory(torch)
    except CudaUnusable as gone:
        recorded = {f["variant"] for f in failures} | {v["name"] for v in entry["variants"]}
        gone.failures = failures + [{"experiment": e.name, "variant": name,
                                     "reason": f"not run: CUDA context unusable ({gone.reason})"}
                                    for name in variants if name not in recorded]
        gone.entry = finish(entry, plan)
        raise
    return finish(entry, plan), failures


def report_path(out_dir, suite):
    return os.path.join(out_dir, f"pytorch-{suite}.json")


class _Stop:
    """Why the run stops starting work (None: it does not), and the one-line error it ends with."""

    def __init__(self):
        self.reason = None
        self.error = None
        self.budget_said = False
        self.not_started = 0  # experiments and parity checks the time budget left out
        self.parity_checks = 0  # the parity checks made, passed or failed


def run_suites(torch, timer, copy_gbps, meta, suites, plans, args, out_dir, log, budget=None, validate=None):
    """Measures every planned experiment, suite by suite, and writes the reports; the exit code.
    `validate(path)`: None for a report seqbench can read, else the problem (listing.validate_report)."""
    from . import parity
    from .cli import compile_filter

    budget = budget or Budget()
    validate = validate or (lambda path: None)
    regex = compile_filter(args.filter)
    part = merge.new_part(meta, args.filter, args.quick)
    # What each report merges into, checked before anything is measured: a part that cannot join
    # it (another git sha, torch or device) is an error now, not after the call's minutes are spent.
    runs = []
    for s in suites:
        planned, unmapped = plans[s.name]
        path = report_path(out_dir, s.name)
        touched = planned or unmapped or (args.parity and parity.selected(args.parity, s.name, regex))
        existing = merge.load_existing(path, s.name, meta, validate, log, args.quick) if touched else None
        runs.append(SuiteRun(s.name, meta, path, existing, part, planned, unmapped))

    stop = _Stop()
    failed = 0
    where = "the start"

    def progress(label):
        log(f"  [{budget.elapsed():7.1f} s] {label} ...")

    def budget_allows(margin=None):
        if budget.seconds is None or budget.left() >= (margin or budget.margin()):
            return True
        if not stop.budget_said:
            stop.budget_said = True
            log(f"  time budget: {max(0.0, budget.left()):.0f} s of {budget.seconds:.0f} s left, under the "
                f"{margin or budget.margin():.0f} s margin: what follows is not started")
        return False

    def cuda_gone(after, reason):
        stop.reason = f"not run: CUDA context unusable after {after} failed ({reason})"
        stop.error = (f"the CUDA context is unusable after {after} failed ({reason}); the rest was not run "
                      "and the reports say so")
        log(f"  STOP: {stop.error}")

    def parity_of(run):
        def may_start(experiment):
            if stop.reason:
                run.absent(experiment, ("parity",), stop.reason)
                return False
            if not budget_allows(MARGIN_FLOOR):
                run.absent(experiment, ("parity",), "not started: time budget")
                stop.not_started += 1
                return False
            return True

        def on_error(ex):
            broken = unusable(torch, ex)
            if broken and not stop.reason:
                cuda_gone(f"{run.suite} parity", broken)

        checks = parity.parity_checks(torch, args.parity, run.suite, regex, may_start, on_error)
        stop.parity_checks += len(checks)
        run.add_checks(checks)
        bad = [c for c in checks if not c["passed"]]
        log(f"  parity: {len(checks) - len(bad)} passed, {len(bad)} failed"
            + (f" ({sum(1 for c in bad if c.get('unchecked'))} of them dumped outputs no oracle checks)"
               if any(c.get("unchecked") for c in bad) else ""))
        for c in bad:
            log(f"  FAIL {c['name']}: {c['max_abs_err']} > {c['tolerance']}" if c["max_abs_err"] is not None
                else f"  FAIL {c['name']}: {c.get('detail', '')}")
        return len(bad)

    current = 0
    try:
        for current, (s, run) in enumerate(zip(suites, runs)):
            planned, unmapped = plans[s.name]
            log(f"suite '{s.name}': {len(planned)} experiment(s) mapped, {len(unmapped)} without a torch equivalent")
            for u in unmapped:
                log(f"  {s.name}/{u['experiment']}: {u['reason']}")
            for e, plan, variants in planned:
                if stop.reason:
                    break
                if not budget_allows():
                    run.absent(e.name, variants, "not started: time budget")
                    stop.not_started += 1
                    continue
                where = f"{s.name}/{e.name}"
                began = budget.elapsed()
                try:
                    entry, failures = measure_experiment(torch, timer, e, plan, variants, copy_gbps, log, progress)
                except CudaUnusable as gone:
                    run.add(e.name, gone.entry, gone.failures)
                    failed += sum(1 for f in gone.failures if f["reason"].startswith("failed"))
                    cuda_gone(where, gone.reason)
                    break
                budget.took(budget.elapsed() - began)
                run.add(e.name, entry, failures)
                failed += len(failures)
                run.write()
            if stop.reason:
                rest = run.absent_rest(stop.reason)
                if rest:
                    log(f"  {rest} experiment(s) not run (CUDA context unusable)")
            if args.parity:
                where = f"{s.name} parity"
                failed += parity_of(run)
            if run.empty():
                log(f"  nothing in suite '{s.name}' matches the filter; no report")
                continue
            log(f"  wrote {run.write()}")
    except (Terminated, KeyboardInterrupt) as why:
        what = "terminated by SIGTERM" if isinstance(why, Terminated) else "interrupted"
        written = []
        for run in runs[current:]:
            run.absent_rest(f"not run: {what}")
            if not run.empty():
                written.append(run.write())
        raise RunnerError(f"{what} during {where}; " + (f"wrote {', '.join(written)} with what was measured "
                          "and the rest listed as not run" if written else "nothing to write")) from None
    if args.parity and stop.parity_checks == 0 and not stop.not_started and not stop.reason:
        # A dump folder without this filter's manifests (a seqbench dump that timed out) checked
        # nothing: that is no pass (check_dump.py says the same with exit 1).
        log(f"seqbench-pytorch: --parity {args.parity}: no dumped experiment of the selected suites was found, "
            "so nothing was checked")
        failed += 1
    if stop.not_started:
        log(f"seqbench-pytorch: {stop.not_started} experiment(s) or parity check(s) not started (time budget); "
            "run them with --filter (gpu.sh: TORCH_FILTER)")
    if stop.error:
        raise RunnerError(stop.error)
    log(f"seqbench-pytorch: {failed} variant(s) or parity check(s) failed" if failed else "seqbench-pytorch: done")
    if failed:
        return 1
    return EXIT_INCOMPLETE if stop.not_started else 0


def measure_suites(torch, frameworks, info, suites, plans, args, out, budget=None):
    def log(line):
        print(line, file=out, flush=True)

    torch_name = torch.cuda.get_device_name(torch.cuda.current_device())
    device = info["device"]
    if device is None:
        raise RunnerError(f"PyTorch sees {torch_name} but seqbench sees no device; "
                          "run both on the same GPU (check CUDA_VISIBLE_DEVICES and the driver)")
    if device["name"] != torch_name:
        raise RunnerError(f"PyTorch sees '{torch_name}' but seqbench sees '{device['name']}': run both on the same GPU")
    out_dir = args.out or os.path.join("seqbench-out", meta_module.device_slug(device["name"]))
    from . import listing
    from .cli import prepare_out_dir

    prepare_out_dir(out_dir)
    configure(torch, args.seed)
    timer = TorchTimer(torch, TimerPolicy.quick() if args.quick else TimerPolicy())
    log(f"seqbench-pytorch: torch {torch.__version__} on {torch_name}; measuring the copy bandwidth ...")
    # 1 GiB in quick runs too, as suites/runner.cpp: the L2 flush's dirty lines written back inside
    # the timed copy cost up to ~9% against 2 x 256 MiB, ~2.4% against 2 x 1 GiB.
    copy_gbps = measure_copy_gbps(torch, timer, 1 << 30)
    log(f"  {copy_gbps:.1f} GB/s")
    meta = meta_module.collect_meta(info, args.seed, frameworks, copy_gbps)
    return run_suites(torch, timer, copy_gbps, meta, suites, plans, args, out_dir, log, budget,
                      lambda path: listing.validate_report(args.seqbench, path))
