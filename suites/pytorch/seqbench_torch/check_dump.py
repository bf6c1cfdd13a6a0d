"""`python3 suites/pytorch/check_dump.py --dump DIR`: seqbench's dumped outputs held against PyTorch
on the same inputs, on the GPU or on the CPU, printing the checks; nothing is timed or written.

The runner's --parity makes the same checks (parity.py) after its measurements and records them in
its reports. This command only prints them, and with --device cpu it needs no GPU: a dump written
by the simt build (`build/<preset>/tests/simt/simt_seqbench dump --quick --out DIR`, the device code
run on CPU fibers) is then held against PyTorch on the CPU. That tries the oracles, the dump and the
kernels' and layers' logic against code nobody here wrote, before a GPU is at hand. It does not
replace the GPU's parity: the simt build compiles the device code with the host compiler and libm
(no FMA contraction), not nvcc, and runs none of the hardware's own instructions.

Exit codes: 0 every check passed; 1 a check failed, no check was made, or an error (one line on
stderr); 2 bad usage.
"""
import importlib
import os
import re

from . import command, parity, precision
from .errors import RunnerError, UsageError, failure_reason

PROG = "check_dump"
SUITES = ("operators", "layers")  # the suites parity.oracle_for has oracles for


def parser():
    p = command.Parser(prog=PROG, description="Hold the outputs `seqbench dump` wrote against PyTorch's on the same "
                "inputs (the runner's --parity checks), and print them.")
    p.add_argument("--dump", required=True, metavar="DIR", help="the folder `seqbench dump --out DIR` wrote")
    p.add_argument("--suite", action="append", default=[], choices=SUITES,
                   help="only these suites (repeatable); default: each of " + ", ".join(SUITES) + " found in DIR")
    p.add_argument("--filter", default="", help="regex (Python re, searched) over suite/experiment names")
    p.add_argument("--device", default="cuda", help="where PyTorch computes the oracle: cuda (default) or cpu")
    return p


def import_torch(device):
    try:
        torch = importlib.import_module("torch")
    except ImportError as e:
        raise RunnerError(f"PyTorch is not importable ({' '.join(str(e).split())})") from None
    except Exception as e:
        raise RunnerError(f"PyTorch is not importable ({failure_reason(e)})") from None
    try:
        dev = torch.device(device)
    except Exception as e:
        raise RunnerError(f"--device '{device}' is not a torch device ({failure_reason(e)})") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise RunnerError(f"--device {device}: PyTorch {torch.__version__} sees no CUDA device (use --device cpu "
                          "for a dump of the simt build)")
    if dev.type not in ("cuda", "cpu"):
        raise RunnerError(f"--device '{device}' is neither cuda nor cpu")
    return torch, dev


def suites_to_check(dump_dir, names):
    if names:
        return list(dict.fromkeys(names))
    found = [s for s in SUITES if os.path.isdir(os.path.join(dump_dir, s))]
    if not found:
        raise RunnerError(f"'{dump_dir}' holds none of the folders {', '.join(SUITES)} (write it with "
                          "`seqbench dump --out DIR`)")
    return found


def line(c):
    verdict = "ok  " if c["passed"] else "FAIL"
    numbers = ""
    if c.get("max_abs_err") is not None and c.get("tolerance") is not None:
        numbers = f" (error {c['max_abs_err']:.3g}, bound {c['tolerance']:.3g})"
    detail = "" if c["passed"] else f": {c.get('detail', '')}"
    return f"  {verdict} {c['name']}{numbers}{detail}"


def run(args, out):
    try:
        regex = re.compile(args.filter or ".*")
    except re.error as e:
        raise UsageError(f"invalid --filter regex '{args.filter}': {e}") from None
    if not os.path.isdir(args.dump):
        raise RunnerError(f"--dump folder '{args.dump}' not found (write it with `seqbench dump --out DIR`)")
    suites = suites_to_check(args.dump, args.suite)
    try:
        totals = {suite: len(parity.selected(args.dump, suite, regex)) for suite in suites}
    except OSError as e:
        raise RunnerError(f"cannot read '{args.dump}': {failure_reason(e)}") from None
    if not any(totals.values()):
        raise RunnerError(f"nothing to check: no dumped experiment of {', '.join(suites)} in '{args.dump}' matches "
                          f"the filter '{args.filter or '.*'}'")
    torch, device = import_torch(args.device)
    precision.disable_tf32_matmul(torch)  # the oracles' fp32 matmuls in IEEE fp32, as the runner's
    passed = failed = experiments = 0
    for suite in suites:
        total = totals[suite]
        done = [0]

        def progress(experiment, suite=suite, total=total, done=done):
            done[0] += 1
            print(f"[{suite} {done[0]}/{total}] {experiment}", file=out, flush=True)
            return True

        for c in parity.parity_checks(torch, args.dump, suite, regex, may_start=progress, device=device):
            print(line(c), file=out, flush=True)
            passed += c["passed"]
            failed += not c["passed"]
        experiments += done[0]
    print(f"{PROG}: {passed} passed, {failed} failed, over {experiments} dumped experiment(s) of "
          f"{', '.join(suites)}; PyTorch {torch.__version__} on {device}", file=out, flush=True)
    if passed + failed == 0:
        raise RunnerError(f"no check was made: nothing in '{args.dump}' ({', '.join(suites)}) matches the filter "
                          "and has an oracle")
    return command.EXIT_FAILURE if failed else 0


def main(argv=None):
    return command.main(PROG, parser(), run, argv)
