"""`python3 suites/pytorch/run.py`: the command line, shaped like `seqbench run`.

Order of work: arguments and the --filter regex, then `seqbench list/info` (nothing written), then
torch and a CUDA device (a one-line error and nothing written when either is missing), then the
output folder, then the measurements: one report per suite, `DIR/pytorch-<suite>.json`, merged
into the one already there (merge.py) and rewritten after every experiment.

Exit codes: 0 done; 1 a failure (a variant, a parity check, or an error: one line on stderr,
SIGTERM included, after the reports are written); 2 bad usage; 3 nothing failed but --budget-seconds
left experiments unstarted (the reports list them).
"""
import argparse
import os
import re

from . import command, listing
from .budget import Budget
from .errors import RunnerError, Unmapped, UsageError
from .families import FAMILIES, plan_for
from .interrupt import Terminated, sigterm_raises
from .policy import TimerPolicy

PROG = "seqbench-pytorch"
EXIT_FAILURE = command.EXIT_FAILURE
EXIT_USAGE = command.EXIT_USAGE
EXIT_INCOMPLETE = 3  # measure.EXIT_INCOMPLETE
DEFAULT_SEED = 20261122  # RunOptions::seed in suites/runner.h


def parser():
    p = command.Parser(prog=PROG, description="PyTorch baselines (eager, torch.compile, fused optimizers) of seqbench's "
                "experiments, read from `seqbench list --json`, written as schema-v1 reports.")
    p.add_argument("--seqbench", required=True, help="the built seqbench binary (its experiment list is the source of truth)")
    p.add_argument("--suite", action="append", default=[], help="only these suites (repeatable); default: " + ", ".join(FAMILIES))
    p.add_argument("--filter", default="", help="regex (Python re, searched) over suite/experiment/variant names, "
                   "variants being torch_eager, torch_compile, torch_fused")
    p.add_argument("--out", default="", help="output folder (default: seqbench-out/<device>)")
    p.add_argument("--quick", action="store_true", help="the --quick shapes and fewer samples")
    p.add_argument("--seed", type=seed, default=DEFAULT_SEED, help="seed of every random draw (0 to 2^64 - 1)")
    p.add_argument("--parity", default="", metavar="DUMP_DIR",
                   help="also hold seqbench's outputs dumped there (`seqbench dump --out DUMP_DIR`) against PyTorch's "
                   "on the same inputs; the differences land in the reports' checks")
    p.add_argument("--budget-seconds", type=budget_seconds, default=None, metavar="N",
                   help="start no experiment once fewer seconds than the longest one so far (at least 15) are "
                   "left of N from the start; what was not started is listed in the reports (exit 3)")
    p.add_argument("--dry-run", action="store_true", help="print what maps to what and exit; needs no torch")
    return p


def budget_seconds(text):
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"--budget-seconds {text!r} is not a positive number of seconds")
    return value


def seed(text):
    """A seed as seqbench takes one: a plain decimal from 0 to 2^64 - 1 (int() alone takes -5,
    which the report schema refuses (meta.seed is non-negative), and 010 as 10)."""
    if not (text.isascii() and text.isdigit()) or (len(text) > 1 and text[0] == "0") or int(text) >= 2**64:
        raise argparse.ArgumentTypeError(f"--seed {text!r} is not an integer from 0 to {2**64 - 1} "
                                         "(decimal, no leading zeros)")
    return int(text)


def compile_filter(text):
    try:
        return re.compile(text or ".*")
    except re.error as e:
        raise UsageError(f"invalid --filter regex '{text}': {e}") from None


def select_suites(all_suites, names):
    by_name = {s.name: s for s in all_suites}
    chosen = []
    for name in names or [n for n in FAMILIES if n in by_name]:
        if name not in by_name:
            raise UsageError(f"unknown suite '{name}' (known: {', '.join(by_name)})")
        if name not in FAMILIES:
            raise UsageError(f"suite '{name}' has no PyTorch equivalent (mapped: {', '.join(FAMILIES)})")
        if by_name[name] not in chosen:
            chosen.append(by_name[name])
    return chosen


def plan_suite(suite, regex):
    """[(experiment, plan, variants to run)] and [unmapped entries] of a suite, under the filter."""
    planned, unmapped = [], []
    for e in suite.experiments:
        try:
            plan = plan_for(e)
        except Unmapped as why:
            if regex.search(f"{suite.name}/{e.name}"):
                unmapped.append({"experiment": e.name, "reason": f"skipped: {why}"})
            continue
        variants = [v for v in plan.variants if regex.search(f"{suite.name}/{e.name}/{v}")]
        if variants:
            planned.append((e, plan, variants))
    return planned, unmapped


def prepare_out_dir(path):
    try:
        os.makedirs(path, exist_ok=True)
        probe = os.path.join(path, ".seqbench-pytorch-write-probe")
        with open(probe, "w"):
            pass
        os.unlink(probe)
    except OSError as e:
        raise RunnerError(f"cannot write to output folder '{path}': {e.strerror}") from None


def run(args, out):
    budget = Budget(args.budget_seconds)  # from the start: listing and importing torch take seconds too
    regex = compile_filter(args.filter)
    suites = select_suites(listing.list_suites(args.seqbench, args.quick), args.suite)
    plans = {s.name: plan_suite(s, regex) for s in suites}
    if args.dry_run:
        for s in suites:
            planned, unmapped = plans[s.name]
            for e, plan, variants in planned:
                how = ["CUDA graph"] if plan.cuda_graph else []
                if e.calls_per_sample > 1:
                    how.append(f"{e.calls_per_sample} calls a sample")
                print(f"{s.name}/{e.name}: {' '.join(variants)}" + (f" ({', '.join(how)})" if how else ""), file=out)
            for u in unmapped:
                print(f"{s.name}/{u['experiment']}: {u['reason']}", file=out)
        return 0
    if args.parity and not os.path.isdir(args.parity):
        raise RunnerError(f"--parity folder '{args.parity}' not found (write it with `seqbench dump --out`)")
    info = listing.info(args.seqbench)

    from . import environment  # torch from here on

    torch = environment.require_torch_cuda()
    from .measure import measure_suites

    return measure_suites(torch, environment.frameworks(torch), info, suites, plans, args, out, budget)


def main(argv=None):
    # SIGTERM (gpu.sh's timeout) raises Terminated: measure.py writes what it has, then says so.
    return command.main(PROG, parser(), run, argv, around=sigterm_raises,
                        errors=((Terminated, "terminated by SIGTERM (nothing measured yet)"),))


def timer_policy(quick):
    return TimerPolicy.quick() if quick else TimerPolicy()
