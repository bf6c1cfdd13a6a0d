"""Measuring the planned experiments with torch and writing one report per suite (needs a GPU)."""
import gc
import os

from . import meta as meta_module
from . import precision
from .errors import RunnerError
from .policy import TimerPolicy
from .report import finalize_speedups, make_variant, new_report, write_json_atomic
from .stats import summarize_samples
from .timing import GraphIncomplete, TorchTimer, graphed, in_turn, measure_copy_gbps


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
            replay, keep = graphed(torch, works)
            samples = timer.sample_ms(replay, calls)
            del keep
            return samples, True, note
        except Exception as e:  # capture refused (a sync inside, an unsupported op): time it directly
            first = str(e).splitlines()[0] if str(e) else ""
            if isinstance(e, GraphIncomplete):
                note = f"CUDA graph refused ({first}); timed without"
            else:
                note = f"CUDA graph capture failed ({type(e).__name__}: {first}); timed without"
            torch.cuda.synchronize()
    return timer.sample_ms(in_turn(works), calls), False, note


def failure_reason(ex):
    return f"{type(ex).__name__}: {' '.join(str(ex).split())[:300]}"


def measure_experiment(torch, timer, e, plan, variants, copy_gbps, log):
    import torch._dynamo as dynamo

    dynamo.reset()
    minimal = e.minimal
    entry = {"name": e.name, "params": e.params, "baseline": None, "variants": []}
    failures = []
    # As many copies of the inputs as seqbench's samples hold calls (its list says how many), so that
    # no call of a sample finds its inputs in L2 (suites/gpu_timer.h, graph_calls_per_sample). A copy
    # that cannot be built (memory, a compile error) fails this experiment's variants, not the run.
    try:
        copies = [plan.build(torch) for _ in range(e.calls_per_sample)]
    except Exception as ex:
        reason = failure_reason(ex)
        log(f"  {e.suite}/{e.name}: FAILED building {e.calls_per_sample} cop{'y' if e.calls_per_sample == 1 else 'ies'} "
            f"of its inputs: {reason}")
        gc.collect()
        torch.cuda.empty_cache()
        return None, [{"experiment": e.name, "variant": name, "reason": f"failed: {reason}"} for name in variants]
    for name in variants:
        try:
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
        finally:
            if plan.lazy:
                gc.collect()
                torch.cuda.empty_cache()
    del copies
    gc.collect()
    torch.cuda.empty_cache()
    if entry["variants"]:
        measured = [v["name"] for v in entry["variants"]]
        entry["baseline"] = next(n for n in plan.variants if n in measured)  # torch_eager unless it failed
        finalize_speedups(entry)
        return entry, failures
    return None, failures


def measure_suites(torch, frameworks, info, suites, plans, args, out):
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

    failed = 0
    from .cli import compile_filter

    regex = compile_filter(args.filter)
    for s in suites:
        planned, unmapped = plans[s.name]
        log(f"suite '{s.name}': {len(planned)} experiment(s) mapped, {len(unmapped)} without a torch equivalent")
        for u in unmapped:
            log(f"  {s.name}/{u['experiment']}: {u['reason']}")
        report = new_report(s.name, meta)
        report["unmapped"] = list(unmapped)
        if args.parity:
            from .parity import parity_checks

            report["checks"] = parity_checks(torch, args.parity, s.name, regex)
            bad = [c for c in report["checks"] if not c["passed"]]
            failed += len(bad)
            log(f"  parity: {len(report['checks']) - len(bad)} passed, {len(bad)} failed")
            for c in bad:
                log(f"  FAIL {c['name']}: {c['max_abs_err']} > {c['tolerance']}")
        for e, plan, variants in planned:
            entry, failures = measure_experiment(torch, timer, e, plan, variants, copy_gbps, log)
            if entry:
                report["experiments"].append(entry)
            report["unmapped"].extend(failures)
            failed += len(failures)
        if not report["experiments"] and not report["unmapped"] and not report["checks"]:
            log(f"  nothing in suite '{s.name}' matches the filter; no report")
            continue
        path = os.path.join(out_dir, f"pytorch-{s.name}.json")
        write_json_atomic(path, report)
        log(f"  wrote {path}")
    log(f"seqbench-pytorch: {failed} variant(s) or parity check(s) failed" if failed else "seqbench-pytorch: done")
    return 1 if failed else 0
