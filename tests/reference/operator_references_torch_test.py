"""reference/'s operator functions against PyTorch itself, in float64: LayerNorm (forward and
backward), the attention softmax (scale, causal with an offset, key lengths; forward and backward),
scaled dot-product attention (the same masks; out and the probabilities, dq, dk, dv against
F.scaled_dot_product_attention),
label-smoothed cross-entropy (both conventions, ignore_index; loss, nll, their sums, dlogits for a
per-row upstream gradient) and bias + activation (ReLU, GELU erf, GELU tanh; forward, dx, dbias).
Every kernel test trusts these references, and their docs name PyTorch's semantics: this holds
them to it at double precision, where the kernels' dtype tolerances cannot see a convention slip
(eps inside or outside the square root, a smoothing convention, a scale applied after the max).
Run by ctest as reference_operators_vs_torch through tests/common/torch_test.sh (skipped without
torch):

    python3 operator_references_torch_test.py TOOL    (TOOL: the built operator_references_tool)

Tolerance: both sides evaluate the same real function in double, in different orders; an output
reduced over n terms differs by at most about (32 + 4n)·2^-53·κ relative to max(1, |value|)
elementwise (n = the reduction length: H, rows, k_len, V, N·V for the sums). κ = 1, except for
LayerNorm, whose x - mean cancels: each side's mean errs by about 2^-53·|x|, which x̂ = (x - mean)·rstd
carries as 2^-53·|x|·rstd, so κ = max(1, max over rows of max|x|·rstd) (a row of one element has
x̂ = 0 exactly; with eps = 1e-5 and x near 10, torch's x̂ is 1e-13 off it). A different convention
moves values by far more (the cases keep eps, smoothing and scales large enough for that).
"""
import json
import math
import random
import subprocess
import sys

import torch
import torch.nn.functional as F

U = 2.0 ** -53


def matrix(rng, rows, cols, lo=-1.0, hi=1.0):
    return [[rng.uniform(lo, hi) for _ in range(cols)] for _ in range(rows)]


def t(values):
    return torch.tensor(values, dtype=torch.float64)


def layernorm_case(rng):
    rows, h = rng.choice([1, 3, 17]), rng.choice([1, 2, 7, 64, 257])
    shift = rng.choice([0.0, 10.0])
    x = [[v + shift for v in row] for row in matrix(rng, rows, h, -2, 2)]
    case = {"op": "layernorm", "x": x, "gamma": [rng.uniform(0.5, 1.5) for _ in range(h)],
            "beta": [rng.uniform(-1, 1) for _ in range(h)], "eps": rng.choice([1e-5, 1e-2, 0.5]),
            "dy": matrix(rng, rows, h)}

    def torch_side():
        x_, g, b = t(case["x"]).requires_grad_(), t(case["gamma"]).requires_grad_(), t(case["beta"]).requires_grad_()
        y, mean, rstd = torch.ops.aten.native_layer_norm(x_, [h], g, b, case["eps"])
        dx, dg, db = torch.autograd.grad(y, (x_, g, b), t(case["dy"]))
        kappa = max(1.0, (x_.detach().abs().amax(dim=1) * rstd.reshape(-1)).max().item())
        return {"y": (y, h, kappa), "mean": (mean.reshape(-1), h), "rstd": (rstd.reshape(-1), h), "dx": (dx, h, kappa),
                "dgamma": (dg, rows * h, kappa), "dbeta": (db, rows)}

    return case, torch_side


def softmax_case(rng):
    batch, heads, q_len = rng.choice([1, 2, 3]), rng.choice([1, 2]), rng.choice([1, 2, 5])
    k_len = rng.choice([1, 2, 9, 40])
    rows = batch * heads * q_len
    case = {"op": "softmax", "x": matrix(rng, rows, k_len, -4, 4), "batch": batch, "heads": heads, "q_len": q_len,
            "k_len": k_len, "scale": rng.choice([1.0, 0.125, 3.0]), **attention_mask_fields(rng, batch, q_len, k_len),
            "dy": matrix(rng, rows, k_len)}

    def torch_side():
        x_ = t(case["x"]).requires_grad_()
        z = (case["scale"] * x_).reshape(batch, heads, q_len, k_len).masked_fill(masked_of(case), -math.inf)
        y = torch.softmax(z, dim=-1).reshape(rows, k_len)
        (dx,) = torch.autograd.grad(y, x_, t(case["dy"]))
        return {"y": (y, k_len), "dx": (dx, k_len)}

    return case, torch_side


def attention_mask_fields(rng, batch, q_len, k_len):
    """A causal mask (with the offset of the last q_len of k_len positions) and/or key lengths; key 0
    stays visible to every query, so no row is fully masked (the reference's zeros, torch's NaN)."""
    causal = k_len >= q_len and rng.random() < 0.5
    lengths = [rng.randint(1, k_len) for _ in range(batch)] if rng.random() < 0.5 else []
    return {"causal": causal, "causal_offset": k_len - q_len if causal else 0, "key_lengths": lengths}


def masked_of(case):
    """bool [batch, 1, q_len, k_len]: True where the reference masks the key."""
    batch, q_len, k_len = case["batch"], case["q_len"], case["k_len"]
    masked = torch.zeros(batch, 1, q_len, k_len, dtype=torch.bool)
    j = torch.arange(k_len)
    if case["causal"]:  # query i sees keys j <= i + offset
        masked |= j[None, :] > (torch.arange(q_len)[:, None] + case["causal_offset"])
    for b, length in enumerate(case["key_lengths"]):
        masked[b] |= j >= length
    return masked


def attention_case(rng):
    batch, heads, q_len, k_len = rng.choice([1, 2]), rng.choice([1, 3]), rng.choice([1, 4]), rng.choice([1, 5, 17])
    d, dv = rng.choice([1, 8]), rng.choice([2, 8])
    case = {"op": "attention", "batch": batch, "heads": heads, "q_len": q_len, "k_len": k_len,
            "scale": rng.choice([1.0 / math.sqrt(d), 0.5, 2.0]), **attention_mask_fields(rng, batch, q_len, k_len),
            "q": matrix(rng, batch * heads * q_len, d, -2, 2), "k": matrix(rng, batch * heads * k_len, d, -2, 2),
            "v": matrix(rng, batch * heads * k_len, dv), "dout": matrix(rng, batch * heads * q_len, dv)}

    def torch_side():
        q = t(case["q"]).reshape(batch, heads, q_len, d).requires_grad_()
        k = t(case["k"]).reshape(batch, heads, k_len, d).requires_grad_()
        v = t(case["v"]).reshape(batch, heads, k_len, dv).requires_grad_()
        masked = masked_of(case)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=~masked, scale=case["scale"])
        dq, dk, dv_ = torch.autograd.grad(out, (q, k, v), t(case["dout"]).reshape(out.shape))
        probs = torch.softmax((case["scale"] * q @ k.transpose(-1, -2)).masked_fill(masked, -math.inf), dim=-1)
        n = max(d, k_len, q_len)
        return {"out": (out, n), "probs": (probs.detach(), n), "dq": (dq, n), "dk": (dk, n), "dv": (dv_, n)}

    return case, torch_side


def cross_entropy_case(rng):
    convention = rng.choice(["paper", "fairseq"])
    n = rng.choice([1, 5, 13])
    v = rng.choice([1, 2, 7, 50, 1000] if convention == "paper" else [2, 7, 50, 1000])
    smoothing = rng.choice([0.0, 0.1, 0.6])
    if convention == "fairseq" and smoothing * v / (v - 1) > 1.0:
        smoothing = 0.1  # torch's α = ε·V/(V-1) must stay in [0, 1]
    ignore = rng.choice([None, 0, v - 1]) if v > 1 else None
    targets = [rng.randrange(v) for _ in range(n)]
    if ignore is not None:
        targets[rng.randrange(n)] = ignore
    case = {"op": "cross_entropy", "logits": matrix(rng, n, v, -5, 5), "targets": targets, "smoothing": smoothing,
            "convention": convention, "ignore_index": ignore, "grad_loss": [rng.uniform(-1, 2) for _ in range(n)]}

    def torch_side():
        logits = t(case["logits"]).requires_grad_()
        tgt = torch.tensor(targets, dtype=torch.int64)
        # torch's label_smoothing is the paper's α; fairseq's ε is α = ε·V/(V-1)
        alpha = smoothing if convention == "paper" else smoothing * v / (v - 1)
        ii = -100 if ignore is None else ignore
        loss = F.cross_entropy(logits, tgt, ignore_index=ii, label_smoothing=alpha, reduction="none")
        nll = F.cross_entropy(logits.detach(), tgt, ignore_index=ii, reduction="none")
        (dlogits,) = torch.autograd.grad(loss, logits, t(case["grad_loss"]))
        return {"loss": (loss, v), "nll": (nll, v), "loss_sum": (loss.sum(), n * v), "nll_sum": (nll.sum(), n * v),
                "dlogits": (dlogits, v)}

    return case, torch_side


def bias_act_case(rng):
    rows, h = rng.choice([1, 4, 9]), rng.choice([1, 3, 70])
    act = rng.choice(["relu", "gelu_erf", "gelu_tanh"])
    case = {"op": "bias_act", "x": matrix(rng, rows, h, -4, 4), "bias": [rng.uniform(-1, 1) for _ in range(h)],
            "activation": act, "dy": matrix(rng, rows, h)}

    def torch_side():
        x_, b = t(case["x"]).requires_grad_(), t(case["bias"]).requires_grad_()
        z = x_ + b
        y = torch.relu(z) if act == "relu" else F.gelu(z, approximate="none" if act == "gelu_erf" else "tanh")
        dx, db = torch.autograd.grad(y, (x_, b), t(case["dy"]))
        return {"y": (y, 1), "dx": (dx, 1), "dbias": (db, rows)}

    return case, torch_side


def main(tool):
    rng = random.Random(20261124)
    makers = [layernorm_case, softmax_case, attention_case, cross_entropy_case, bias_act_case]
    cases = [maker(rng) for maker in makers for _ in range(60)]
    done = subprocess.run([tool], input=json.dumps({"cases": [c for c, _ in cases]}), text=True, capture_output=True,
                          check=False)
    if done.returncode != 0:
        print(f"FAIL: {tool} exited {done.returncode}: {done.stderr.strip()}")
        return 1
    ours = json.loads(done.stdout)["cases"]
    failures, worst, checked = 0, {}, 0
    for (case, torch_side), result in zip(cases, ours, strict=True):
        try:
            theirs = torch_side()
        except Exception as e:  # a case torch refuses is this test's mistake: a failure, not a traceback
            failures += 1
            print(f"FAIL: {case['op']}: torch raised {type(e).__name__}: {e}")
            continue
        if set(theirs) != set(result):
            failures += 1
            print(f"FAIL: {case['op']}: outputs {sorted(result)} against torch's {sorted(theirs)}")
            continue
        for name, (value, n, *conditioning) in theirs.items():
            a, b = t(result[name]).reshape(-1), value.detach().reshape(-1)
            if a.numel() != b.numel():
                failures += 1
                print(f"FAIL: {case['op']} {name}: {a.numel()} values against torch's {b.numel()}")
                continue
            err = ((a - b).abs() / b.abs().clamp_min(1.0)).max().item() if a.numel() else 0.0
            tol = (32 + 4 * n) * U * (conditioning[0] if conditioning else 1.0)
            checked += 1
            key = f"{case['op']}.{name}"
            worst[key] = max(worst.get(key, 0.0), err / tol)
            if not err <= tol:  # NaN fails too
                failures += 1
                settings = {k: v for k, v in case.items() if not isinstance(v, list) or k == "key_lengths"}
                print(f"FAIL: {key} {settings}: max |reference - torch| / max(1, |torch|) = {err:.3e} > {tol:.3e}")
    for key in sorted(worst):
        print(f"{key}: worst error / bound = {worst[key]:.3f}")
    print(f"PyTorch {torch.__version__}: {checked} outputs of {len(cases)} random cases; "
          f"{'FAILED ' + str(failures) if failures else 'all passed'}")
    return 1 if failures else 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print("usage: operator_references_torch_test.py OPERATOR_REFERENCES_TOOL", file=sys.stderr)
        sys.exit(2)
    sys.exit(main(sys.argv[1]))
