"""Numerical parity: the inputs `seqbench dump` wrote go through PyTorch, and its outputs are held
against seqbench's. An oracle nobody here wrote; the differences land in the report's `checks`.

The bound. Each output y is one well-defined real function of the inputs, which both
implementations compute with fp32 accumulation and round once to the output dtype (unit roundoff
u = 2^-p: 2^-24 fp32, 2^-11 fp16, 2^-8 bf16). Each then sits within u·|y| of the exact value plus
its fp32 arithmetic error, which grows like the reduction length n times 2^-24 (n = hidden for
LayerNorm's y, rows for dgamma and dbeta): so |ours - theirs| <= (2u + 2·n·2^-24)·scale, with
scale = max(1, |theirs|) (entries near 0 are held absolutely, since their relative error is
unbounded). For bf16 and fp16 the 2u term dominates; for fp32 the n term does.
"""
import json
import os

from . import npy
from .errors import RunnerError
from .report import check

UNIT_ROUNDOFF = {"f32": 2.0 ** -24, "f16": 2.0 ** -11, "bf16": 2.0 ** -8}
FP32_U = 2.0 ** -24


def tolerance(dtype, reduction_length):
    return 2.0 * UNIT_ROUNDOFF[dtype] + 2.0 * reduction_length * FP32_U


def scaled_errors(torch, ours, theirs):
    """(max |ours - theirs| / max(1, |theirs|), max |ours - theirs| / |theirs|, max abs error) in float64."""
    a, b = ours.double(), theirs.double()
    diff = (a - b).abs()
    scaled = (diff / b.abs().clamp_min(1.0)).max().item() if diff.numel() else 0.0
    rel = (diff / b.abs()).max().item() if diff.numel() else 0.0
    return scaled, rel, (diff.max().item() if diff.numel() else 0.0)


def layernorm_outputs(torch, arrays, params, backward):
    hidden = int(params["hidden"])
    eps = float(params.get("eps", 1e-5))
    x, gamma, beta = arrays["x"], arrays["gamma"], arrays["beta"]
    if not backward:
        y, mean, rstd = torch.ops.aten.native_layer_norm(x, [hidden], gamma, beta, eps)
        return {"y": (y, hidden), "mean": (mean.reshape(-1), hidden), "rstd": (rstd.reshape(-1), hidden)}
    mean = arrays["mean"].reshape(-1, 1)
    rstd = arrays["rstd"].reshape(-1, 1)
    dx, dgamma, dbeta = torch.ops.aten.native_layer_norm_backward(arrays["dy"], x, [hidden], mean, rstd, gamma, beta,
                                                                  [True, True, True])
    rows = int(params["tokens"])
    return {"dx": (dx, hidden), "dgamma": (dgamma, rows), "dbeta": (dbeta, rows)}


# family -> function(torch, arrays by name, params, backward) -> {output name: (tensor, reduction length)}
ORACLES = {"layernorm": layernorm_outputs}


def manifests(dump_dir, suite):
    root = os.path.join(dump_dir, suite)
    if not os.path.isdir(root):
        return []
    found = []
    for name in sorted(os.listdir(root)):
        path = os.path.join(root, name, "manifest.json")
        if os.path.isfile(path):
            with open(path, encoding="utf-8") as f:
                found.append((os.path.dirname(path), json.load(f)))
    return found


def parity_checks(torch, dump_dir, suite, regex):
    """The checks of every dumped experiment of `suite` selected by `regex` (over suite/experiment)."""
    checks = []
    for folder, manifest in manifests(dump_dir, suite):
        experiment = manifest.get("experiment", "")
        if manifest.get("schema") != "seqbench.dump/1":
            raise RunnerError(f"{folder}/manifest.json: expected schema 'seqbench.dump/1'")
        if not regex.search(f"{suite}/{experiment}"):
            continue
        family = experiment.split("/", 1)[0]
        base = family.rsplit("_", 1)[0] if family.endswith(("_fwd", "_bwd")) else family
        oracle = ORACLES.get(base)
        if oracle is None:
            continue
        arrays, ours, dtypes = {}, {}, {}
        for a in manifest["arrays"]:
            descr, shape, payload = npy.read(os.path.join(folder, a["file"]))
            t = npy.to_torch(torch, descr, shape, payload, a["dtype"])
            (arrays if a["role"] == "input" else ours)[a["name"]] = t
            dtypes[a["name"]] = a["dtype"]
        theirs = oracle(torch, arrays, manifest["params"], family.endswith("_bwd"))
        for name, (tensor, n) in theirs.items():
            if name not in ours:
                continue
            scaled, rel, abs_err = scaled_errors(torch, ours[name], tensor.to(ours[name].dtype))
            tol = tolerance(dtypes[name], n)
            checks.append(check(f"{experiment} {name} vs PyTorch {torch.__version__}", scaled <= tol, scaled, rel, tol,
                                f"max |seqbench - torch| / max(1, |torch|) over {tensor.numel()} elements; "
                                f"max abs {abs_err:.3e}; bound 2u + 2n·2^-24 with n = {n} (suites/pytorch parity.py)"))
    return checks
