"""The experiment definitions, read from `seqbench list --json` so that shapes never drift apart,
and the build and device from `seqbench info --json`."""
import json
import os
import subprocess
from dataclasses import dataclass, field

from .errors import RunnerError

LIST_SCHEMA = "seqbench.list/1"
MAX_CALLS_PER_SAMPLE = 64  # kMaxCallsPerSample, suites/gpu_timer.h


@dataclass(frozen=True)
class Variant:
    name: str
    bytes: float
    flops: float


@dataclass(frozen=True)
class Experiment:
    suite: str
    name: str
    params: dict
    baseline: str
    variants: tuple
    inputs: dict = field(default_factory=dict)
    # Calls per timed sample, each on its own copy of the inputs (seqbench's graph_calls_per_sample,
    # suites/gpu_timer.h): what seqbench's own samples of this experiment hold.
    calls_per_sample: int = 1

    @property
    def family(self):
        """The part of the name before the first '/': "layernorm_fwd", "adam"."""
        return self.name.split("/", 1)[0]

    @property
    def minimal(self):
        """The baseline variant's minimal bytes and flops: what the operation must do, whoever does it."""
        for v in self.variants:
            if v.name == self.baseline:
                return v
        raise RunnerError(f"experiment {self.suite}/{self.name}: baseline '{self.baseline}' is not a variant")


@dataclass(frozen=True)
class Suite:
    name: str
    description: str
    needs_gpu: bool
    experiments: tuple


def _run(seqbench, args):
    if not seqbench:
        raise RunnerError("--seqbench is required: the path of the built seqbench binary")
    if not os.path.isfile(seqbench) or not os.access(seqbench, os.X_OK):
        raise RunnerError(f"seqbench binary '{seqbench}' not found or not executable")
    try:
        done = subprocess.run([seqbench, *args], capture_output=True, text=True, timeout=300, check=False)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise RunnerError(f"cannot run '{seqbench} {' '.join(args)}': {e}") from None
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no message"])[-1]
        raise RunnerError(f"'{seqbench} {' '.join(args)}' exited {done.returncode}: {last}")
    try:
        return json.loads(done.stdout)
    except json.JSONDecodeError as e:
        raise RunnerError(f"'{seqbench} {' '.join(args)}' printed no valid JSON: {e}") from None


def calls_per_sample(suite, e):
    """An experiment's calls_per_sample: an integer in 1..64 (1 when a list predates the field, as
    that seqbench timed it)."""
    calls = e.get("calls_per_sample", 1)
    if isinstance(calls, bool) or not isinstance(calls, int) or not 1 <= calls <= MAX_CALLS_PER_SAMPLE:
        raise RunnerError(f"seqbench list --json: {suite}/{e['name']}: calls_per_sample {calls!r} is not an integer "
                          f"in 1..{MAX_CALLS_PER_SAMPLE}")
    return calls


def parse_list(doc):
    """The suites of a `seqbench list --json` document; RunnerError on a layout this runner does not know."""
    if not isinstance(doc, dict) or doc.get("schema") != LIST_SCHEMA:
        got = doc.get("schema") if isinstance(doc, dict) else type(doc).__name__
        raise RunnerError(f"seqbench list --json: expected schema '{LIST_SCHEMA}', got {got!r}")
    suites = []
    try:
        for s in doc["suites"]:
            experiments = []
            for e in s["experiments"]:
                variants = tuple(Variant(v["name"], float(v["bytes"]), float(v["flops"])) for v in e["variants"])
                experiments.append(
                    Experiment(s["name"], e["name"], dict(e["params"]), e["baseline"], variants, dict(e.get("inputs", {})),
                               calls_per_sample(s["name"], e))
                )
            suites.append(Suite(s["name"], s["description"], bool(s["needs_gpu"]), tuple(experiments)))
    except (KeyError, TypeError, ValueError) as e:
        raise RunnerError(f"seqbench list --json: unexpected layout ({type(e).__name__}: {e})") from None
    return suites


def list_suites(seqbench, quick):
    return parse_list(_run(seqbench, ["list", "--json"] + (["--quick"] if quick else [])))


def info(seqbench):
    """`seqbench info --json`: version, git sha, build and the device as the C++ side sees it."""
    doc = _run(seqbench, ["info", "--json"])
    for key in ("seqbench_version", "git_sha", "git_dirty", "build", "device"):
        if key not in doc:
            raise RunnerError(f"seqbench info --json: missing '{key}'")
    return doc


def validate_report(seqbench, path):
    """None when `seqbench table` reads the report at `path` (read_report: the schema's validator,
    the authority), else its one-line reason; what merge.py asks before merging into a report."""
    try:
        done = subprocess.run([seqbench, "table", path], capture_output=True, text=True, timeout=300, check=False)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise RunnerError(f"cannot run '{seqbench} table {path}': {e}") from None
    if done.returncode == 0:
        return None
    return (done.stderr.strip().splitlines() or [f"exited {done.returncode}"])[-1]
