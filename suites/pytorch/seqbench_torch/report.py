"""Schema seqbench.report/1 (reports/README.md), as suites/report.cpp writes it, and the atomic write.

The C++ validator (`seqbench table`, read_report) is the authority: the tests run it on what this
module writes.
"""
import json
import os
import tempfile

from .errors import RunnerError

SCHEMA = "seqbench.report/1"
RUNNER = "pytorch"


def make_variant(name, stats, nbytes, flops, copy_gbps):
    """One variant from its SampleStats, as make_variant() in suites/report.cpp: rates from the median,
    null where the amount is 0 or the copy bandwidth unknown; speedup filled by finalize_speedups."""
    if stats.samples < 1 or not stats.p20 > 0:
        raise RunnerError(f"variant '{name}': no positive samples")
    seconds = stats.median * 1e-3
    gbps = nbytes / seconds / 1e9 if nbytes > 0 else None
    tflops = flops / seconds / 1e12 if flops > 0 else None
    pct = 100.0 * gbps / copy_gbps if gbps is not None and copy_gbps else None
    return {
        "name": name,
        "samples": stats.samples,
        "median_ms": stats.median,
        "p20_ms": stats.p20,
        "p80_ms": stats.p80,
        "cv": stats.cv,
        "bytes": float(nbytes),
        "flops": float(flops),
        "gbps": gbps,
        "tflops": tflops,
        "pct_copy_bw": pct,
        "speedup": None,
    }


def finalize_speedups(experiment):
    """speedup = baseline median / variant median; exactly 1 for the baseline itself."""
    base = next((v for v in experiment["variants"] if v["name"] == experiment["baseline"]), None)
    if base is None:
        raise RunnerError(f"experiment {experiment['name']}: baseline '{experiment['baseline']}' was not measured")
    for v in experiment["variants"]:
        v["speedup"] = 1.0 if v is base else base["median_ms"] / v["median_ms"]


def check(name, passed, max_abs_err, max_rel_err, tolerance, detail=""):
    """A `checks` entry; non-finite numbers become null, and a null error or tolerance cannot pass."""

    def finite(x):
        return None if x is None or x != x or x in (float("inf"), float("-inf")) else float(x)

    out = {
        "name": name,
        "passed": bool(passed) and finite(max_abs_err) is not None and finite(tolerance) is not None,
        "max_abs_err": finite(max_abs_err),
        "max_rel_err": finite(max_rel_err),
        "tolerance": finite(tolerance),
    }
    if detail:
        out["detail"] = detail
    return out


def new_report(suite, meta):
    return {
        "schema": SCHEMA,
        "suite": suite,
        "meta": meta,
        "experiments": [],
        "checks": [],
        "skipped": [],
        # Experiments of the suite that this runner did not measure, each with the reason. Not part
        # of the schema's named fields (readers ignore it); `seqbench table` shows "—" for them.
        "unmapped": [],
    }


def write_json_atomic(path, doc):
    """`path` holds its old content or all of `doc`, never a part: a temporary file in the same folder
    (".<name>.tmp.<random>"), flushed and fsync'ed, then renamed over it. The folder must exist."""
    folder = os.path.dirname(os.path.abspath(path))
    text = json.dumps(doc, indent=2, allow_nan=False) + "\n"
    try:
        fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".tmp.", dir=folder)
    except OSError as e:
        raise RunnerError(f"cannot write '{path}': {e.strerror}") from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except BaseException as e:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        if isinstance(e, OSError):
            raise RunnerError(f"cannot write '{path}': {e.strerror}") from None
        raise


def _umask():
    mask = os.umask(0)
    os.umask(mask)
    return mask
