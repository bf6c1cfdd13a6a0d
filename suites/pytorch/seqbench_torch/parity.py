"""Numerical parity: the inputs `seqbench dump` wrote go through PyTorch, and its outputs are held
against seqbench's. An oracle nobody here wrote; the differences land in the report's `checks`.

The bound. Each output y is one well-defined real function of the inputs, which both
implementations compute with fp32 accumulation and round once to the output dtype (unit roundoff
u = 2^-p: 2^-24 fp32, 2^-11 fp16, 2^-8 bf16). Each then sits within u·|y| of the exact value plus
its fp32 arithmetic error, which grows like the reduction length n times 2^-24 (n = hidden for
LayerNorm's y, rows for dgamma and dbeta): so |ours - theirs| <= (2u + 2·n·2^-24)·scale, with
scale = max(1, |theirs|) (entries near 0 are held absolutely, since their relative error is
unbounded). For bf16 and fp16 the 2u term dominates; for fp32 the n term does.

Elementwise families have no reduction; their n counts the fp32 roundings along the chain, with a
libm call (erff, tanhf, sinf) at its ulp bound, times the input magnitude where a cancellation
turns a relative error into an absolute one (GELU's 1 + erf for z < 0, |z| <= 3 in the
experiments). Each oracle says what its n is. Outputs are computed from the dumped inputs in fp32
with torch's own ops and rounded once to the output dtype, as seqbench's kernels round them.

Dropout cannot match torch's RNG: a dropout family dumps the uint8 keep mask its kernel used
(`keep`, 1 = kept), and the oracle applies it with aten.native_dropout_backward(values, keep,
1/(1-p)), the masked scaling autograd runs for dropout, with 1/(1-p) formed in float as the
kernels form it (keep_scale).
"""
import json
import math
import os
import struct

from . import npy
from .errors import RunnerError, failure_reason
from .report import check

# Integer outputs (counts) are exact: u = 0, and with n = 0 their bound is 0.
UNIT_ROUNDOFF = {"f32": 2.0 ** -24, "f16": 2.0 ** -11, "bf16": 2.0 ** -8, "i32": 0.0, "u8": 0.0}
FP32_U = 2.0 ** -24


def tolerance(dtype, reduction_length):
    return 2.0 * UNIT_ROUNDOFF[dtype] + 2.0 * reduction_length * FP32_U


def scaled_errors(torch, ours, theirs):
    """(max |ours - theirs| / max(1, |theirs|), max |ours - theirs| / |theirs|, max abs error) in float64.
    The relative error of an exact match is 0, also where theirs is 0: as 0/0 it would be NaN, and
    torch's max propagates NaN, so one exact zero (a dropped or ReLU'd element, a padding row) would
    blank the whole max_rel_err; a mismatch at theirs = 0 is infinite (null in the report), as it is.
    A NaN of ours still comes out NaN."""
    a, b = ours.double(), theirs.double()
    diff = (a - b).abs()
    scaled = (diff / b.abs().clamp_min(1.0)).max().item() if diff.numel() else 0.0
    rel = torch.where(diff == 0, torch.zeros_like(diff), diff / b.abs()).max().item() if diff.numel() else 0.0
    return scaled, rel, (diff.max().item() if diff.numel() else 0.0)


def layernorm_outputs(torch, arrays, params, backward):
    hidden = int(params["hidden"])
    eps = float(params["eps"])
    # In fp32 from the dumped values (exact), each output rounded once by the comparison. Not in the
    # dump's dtype: CUDA's kernels would compute a bf16/f16 input in fp32 too and return fp32 mean and
    # rstd, but the CPU's return them in the input's dtype (rounded) and its backward refuses fp32
    # mean/rstd beside a bf16 x, so an oracle in the input's dtype would depend on the device.
    x, gamma, beta = arrays["x"].float(), arrays["gamma"].float(), arrays["beta"].float()
    if not backward:
        y, mean, rstd = torch.ops.aten.native_layer_norm(x, [hidden], gamma, beta, eps)
        return {"y": (y, hidden), "mean": (mean.reshape(-1), hidden), "rstd": (rstd.reshape(-1), hidden)}
    mean = arrays["mean"].float().reshape(-1, 1)
    rstd = arrays["rstd"].float().reshape(-1, 1)
    dx, dgamma, dbeta = torch.ops.aten.native_layer_norm_backward(arrays["dy"].float(), x, [hidden], mean, rstd, gamma,
                                                                  beta, [True, True, True])
    rows = int(params["tokens"])
    return {"dx": (dx, hidden), "dgamma": (dgamma, rows), "dbeta": (dbeta, rows)}


def f32(x):
    """x rounded to float32 (round to nearest even), as a Python float."""
    return struct.unpack("<f", struct.pack("<f", float(x)))[0]


def keep_scale(p):
    """kernels/dropout_mask.h dropout_keep_scale: 1/(1-p) in float, 0 for p = 1."""
    p = f32(p)
    return f32(1.0 / f32(1.0 - p)) if p < 1.0 else 0.0


def apply_keep(torch, values, keep, p):
    """values · keep · 1/(1-p) in fp32: what dropout's forward and backward apply for a given mask."""
    return torch.ops.aten.native_dropout_backward(values.float(), keep.bool(), keep_scale(p))


def softmax_outputs(torch, arrays, params, backward):
    """softmax_fwd: softmax(scale·x) over the key axis, masked keys -inf and fully-masked rows 0 (as
    seqbench writes them); softmax_bwd: scale · _softmax_backward_data(dy, y). n = k_len + 16: the
    row sum plus exp's 2 ulp and the scale·x and shift roundings (|scale·x| <= 1 in the experiments)."""
    k_len = int(params["k_len"])
    scale = f32(params["scale"])
    n = k_len + 16
    if backward:
        dx = torch.ops.aten._softmax_backward_data(arrays["dy"].float(), arrays["y"].float(), -1, torch.float32)
        return {"dx": (dx * scale, n)}
    z = arrays["x"].float() * scale
    mask = params.get("mask", "none")
    if mask not in ("none", "causal"):
        raise RunnerError(f"softmax parity: params.mask {mask!r} is not 'none' or 'causal'")
    q_len = z.shape[-2]
    keys = torch.arange(k_len, device=z.device)
    masked = torch.zeros(z.shape, dtype=torch.bool, device=z.device)
    if mask == "causal":
        offset = int(params.get("causal_offset", 0))
        queries = torch.arange(q_len, device=z.device)
        masked = masked | (keys[None, :] > queries[:, None] + offset)
    if "key_lengths" in arrays:  # int32 [batch]: keys j >= key_lengths[b] are masked
        lengths = arrays["key_lengths"].long().clamp(0, k_len)
        masked = masked | (keys[None, None, None, :] >= lengths[:, None, None, None])
    y = torch.softmax(z.masked_fill(masked, float("-inf")), -1)
    return {"y": (torch.nan_to_num(y, nan=0.0), n)}


def torch_label_smoothing(convention, smoothing, vocab):
    """F.cross_entropy's label_smoothing ls (target 1 - ls + ls/V, others ls/V) giving seqbench's
    convention (kernels/cross_entropy.h): paper w_o = α/V is ls = α; fairseq w_o = ε/(V-1),
    w_t = 1 - ε is ls = ε·V/(V-1) (then 1 - ls + ls/V = 1 - ε); V = 1 has no other class: ls = 0."""
    if convention == "paper":
        return float(smoothing)
    if convention == "fairseq":
        return float(smoothing) * vocab / (vocab - 1) if vocab > 1 else 0.0
    raise RunnerError(f"cross_entropy parity: params.convention {convention!r} is not 'paper' or 'fairseq'")


def cross_entropy_outputs(torch, arrays, params, backward):
    """F.cross_entropy(logits, targets, ignore_index, label_smoothing, reduction='none') in fp32: loss;
    without smoothing: nll; logsumexp (0 on ignored rows): lse; backward by autograd with grad_loss as
    the upstream gradient. n = V + 16: the row's sums plus the exp/log roundings."""
    vocab = int(params["vocab"])
    ignore = int(params["ignore_index"])
    ls = torch_label_smoothing(params["convention"], f32(params["smoothing"]), vocab)
    x = arrays["logits"].float()
    t = arrays["targets"].long()
    bad = ((t < 0) | (t >= vocab)) & (t != ignore)
    if bool(bad.any()):
        raise RunnerError(f"cross_entropy parity: {int(bad.sum())} target(s) outside [0, {vocab})")
    ce = torch.nn.functional.cross_entropy
    n = vocab + 16
    if backward:
        leaf = x.detach().requires_grad_(True)
        loss = ce(leaf, t, ignore_index=ignore, label_smoothing=ls, reduction="none")
        (dlogits,) = torch.autograd.grad(loss, leaf, arrays["grad_loss"].float())
        return {"dlogits": (dlogits, n)}
    loss = ce(x, t, ignore_index=ignore, label_smoothing=ls, reduction="none")
    nll = ce(x, t, ignore_index=ignore, reduction="none")
    lse = torch.logsumexp(x, -1).masked_fill(t == ignore, 0.0)
    return {"loss": (loss, n), "nll": (nll, n), "lse": (lse, n)}


def heads_dims(params):
    batch, length, heads, hidden = (int(params[k]) for k in ("batch", "seq_len", "heads", "hidden"))
    return batch, length, heads, hidden, int(params.get("projections", 1)), hidden // heads


def qkv_split_outputs(torch, arrays, params, backward):
    """split: heads[p, b, h, l, j] = (projected + bias)[b·L + l, p·H + h·d + j], one fp32 add rounded
    once (n = 1); backward: the inverse permutation (exact) and dbias = Σ_rows d_projected (n = rows)."""
    batch, length, heads, hidden, projections, d = heads_dims(params)
    if not backward:
        z = arrays["projected"].float() + arrays["bias"].float()
        return {"heads": (z.view(batch, length, projections, heads, d).permute(2, 0, 3, 1, 4).contiguous(), 1)}
    dp = arrays["d_heads"].float().permute(1, 3, 0, 2, 4).reshape(batch * length, projections * hidden)
    return {"d_projected": (dp, 1), "dbias": (dp.sum(0), batch * length)}


def merge_heads_outputs(torch, arrays, params, backward):
    """merge: projected[b·L + l, h·d + j] = heads[0, b, h, l, j]: a permutation, exact (n = 1)."""
    batch, length, heads, hidden, _, d = heads_dims(params)
    h = arrays["heads"].float().reshape(batch, heads, length, d)
    return {"projected": (h.permute(0, 2, 1, 3).reshape(batch * length, hidden), 1)}


def dropout_outputs(torch, arrays, params, backward):
    """y = x·keep/(1-p) (forward) and dx = dy·keep/(1-p) (backward): one product, n = 1."""
    p = float(params["p"])
    if backward:
        return {"dx": (apply_keep(torch, arrays["dy"], arrays["keep"], p), 1)}
    return {"y": (apply_keep(torch, arrays["x"], arrays["keep"], p), 1)}


ACTIVATION_ROUNDINGS = {"relu": 2, "gelu_erf": 16, "gelu_tanh": 16}


def bias_act_dropout_outputs(torch, arrays, params, backward):
    """y = dropout(act(x + bias)) with the dumped keep mask; backward dx = act'(z)·dy·keep/(1-p)
    (threshold_backward / gelu_backward, what autograd runs), dbias = Σ_rows dx. n: relu 2 roundings;
    GELU 16 (erff/tanhf at 2 ulp times |z| <= 3 through the cancellation, plus its 5 products and
    sums); dbias adds rows."""
    act = params["activation"]
    if act not in ACTIVATION_ROUNDINGS:
        raise RunnerError(f"bias_act_dropout parity: unknown activation {act!r}")
    n = ACTIVATION_ROUNDINGS[act]
    p = float(params["p"])
    z = arrays["x"].float() + arrays["bias"].float()
    approximate = "tanh" if act == "gelu_tanh" else "none"
    if not backward:
        a = torch.relu(z) if act == "relu" else torch.nn.functional.gelu(z, approximate=approximate)
        return {"y": (apply_keep(torch, a, arrays["keep"], p), n)}
    g = apply_keep(torch, arrays["dy"], arrays["keep"], p)
    if act == "relu":
        dx = torch.ops.aten.threshold_backward(g, z, 0)
    else:
        dx = torch.ops.aten.gelu_backward(g, z, approximate=approximate)
    return {"dx": (dx, n), "dbias": (dx.sum(0), int(params["rows"]) + n)}


def bias_dropout_residual_outputs(torch, arrays, params, backward):
    """y = residual + dropout(x + bias) with the dumped keep mask. z = x + bias is the same fp32 add on
    both sides; what may differ is a fused fma(z, 1/(1-p), residual) against a product and an add:
    u·|z|/(1-p) <= 2.3u (x, bias in [-1, 1) in the experiments) against max(1, |y|): n = 4. Backward
    dx = dy·keep/(1-p) (n = 1), dbias = Σ_rows dx (n = rows)."""
    p = float(params["p"])
    if backward:
        dx = apply_keep(torch, arrays["dy"], arrays["keep"], p)
        return {"dx": (dx, 1), "dbias": (dx.sum(0), int(params["rows"]))}
    d = apply_keep(torch, arrays["x"].float() + arrays["bias"].float(), arrays["keep"], p)
    return {"y": (arrays["residual"].float() + d, 4)}


def sinusoid_frequencies(hidden):
    """reference/embedding.h: 10000^(-k/(half-1)) for k < half = H/2 (the single frequency 1 for half = 1)."""
    half = hidden // 2
    step = math.log(10000.0) / (half - 1) if half > 1 else 0.0
    return [math.exp(-k * step) for k in range(half)]


def embedding_positions(torch, tokens, padding_idx, indexing, offset):
    """reference/embedding.h: offset + l (slot) or offset + the non-padding tokens before slot l."""
    batch, length = tokens.shape
    if indexing == "slot":
        return offset + torch.arange(length, device=tokens.device).expand(batch, length)
    if indexing == "nonpad_count":
        nonpad = (tokens != padding_idx).long()
        return offset + torch.cumsum(nonpad, 1) - nonpad
    raise RunnerError(f"embedding parity: unknown position indexing {indexing!r}")


def embedding_outputs(torch, arrays, params, backward):
    """forward: y = dropout(E[tok]·scale + P[position]) with the dumped keep mask, padding rows 0;
    sinusoidal P computed in float64 (seqbench's kernel computes it to 16 u_f32), so n = 24; backward:
    g = dy·keep/(1-p) on non-padding rows, dE = scale·Σ g per token (index_add_), dP = Σ g per
    position (learned). n = the most uses of one row + 2 (the additions and the product), times
    ceil(scale) for dE: the two sums add the same terms in different orders, each addition erring by
    u times a partial sum, and a partial sum of scale·g terms is held to scale times max(1, |dE|/scale)
    (random-sign terms: this is the realistic size, not a worst case; as dbias's n = rows)."""
    tokens = arrays["tokens"].long()
    batch, length = tokens.shape
    hidden, vocab = int(params["hidden"]), int(params["vocab"])
    pad, scale, offset = int(params["padding_idx"]), f32(params["scale"]), int(params.get("position_offset", 0))
    kind, indexing = str(params["positions"]).split("/", 1)
    if kind not in ("sinusoidal", "learned"):
        raise RunnerError(f"embedding parity: unknown positions {kind!r}")
    bad = ((tokens < 0) | (tokens >= vocab)) & (tokens != pad)
    if bool(bad.any()):
        raise RunnerError(f"embedding parity: {int(bad.sum())} token id(s) outside [0, {vocab})")
    positions = embedding_positions(torch, tokens, pad, indexing, offset).reshape(-1)
    flat = tokens.reshape(-1)
    valid = flat != pad
    keep = arrays["keep"].reshape(batch * length, hidden)
    p = float(params["p"])
    if backward:
        g = apply_keep(torch, arrays["dy"].reshape(batch * length, hidden), keep, p)[valid]
        ids, pos = flat[valid], positions[valid]
        uses = int(torch.bincount(ids, minlength=vocab).max()) if ids.numel() else 0
        # Summed, then scaled, as the sorted backward does (scale·Σg rounded once).
        d_tok = torch.zeros(vocab, hidden, device=g.device, dtype=torch.float32).index_add_(0, ids, g) * scale
        out = {"d_token_table": (d_tok, (uses + 2) * math.ceil(abs(scale)))}
        if kind == "learned":
            rows = int(params.get("num_positions", length + offset))
            uses = int(torch.bincount(pos, minlength=rows).max()) if pos.numel() else 0
            d_pos = torch.zeros(rows, hidden, device=g.device, dtype=torch.float32).index_add_(0, pos, g)
            out["d_position_table"] = (d_pos, uses + 2)
        return out
    if kind == "learned":
        table = arrays["position_table"].float()
    else:
        rows = int(positions.max()) + 1 if positions.numel() else 0
        freq = torch.tensor(sinusoid_frequencies(hidden), dtype=torch.float64, device=tokens.device)
        angle = torch.arange(rows, dtype=torch.float64, device=tokens.device)[:, None] * freq[None, :]
        table = torch.zeros(rows, hidden, dtype=torch.float64, device=tokens.device)
        half = hidden // 2
        table[:, :half] = torch.sin(angle)
        table[:, half:2 * half] = torch.cos(angle)
        table = table.float()
    e = arrays["token_table"].float()[flat.clamp(0, vocab - 1)] * scale + table[positions]
    e = e.masked_fill(~valid[:, None], 0.0)
    return {"y": (apply_keep(torch, e, keep, p), 24)}


# family -> function(torch, arrays by name, params, backward) -> {output name: (tensor, reduction length)}
# A family's name up to "_fwd"/"_bwd" ("qkv_split_bwd" -> "qkv_split"; "merge_heads" as it is).
ORACLES = {
    "layernorm": layernorm_outputs,
    "softmax": softmax_outputs,
    "cross_entropy": cross_entropy_outputs,
    "qkv_split": qkv_split_outputs,
    "merge_heads": merge_heads_outputs,
    "dropout": dropout_outputs,
    "bias_act_dropout": bias_act_dropout_outputs,
    "bias_dropout_residual": bias_dropout_residual_outputs,
    "embedding": embedding_outputs,
}


def oracle_for(experiment, suite="operators"):
    """(oracle or None, backward) of an experiment name ("softmax_bwd/bf16/..." -> softmax, True) in
    its suite: the layers suite's families (encoder, decoder, embedding, criterion) have their own
    oracles (parity_layers.py; its embedding and criterion are layers, not the operator families)."""
    family = experiment.split("/", 1)[0]
    base = family.rsplit("_", 1)[0] if family.endswith(("_fwd", "_bwd")) else family
    if suite == "layers":
        from .parity_layers import LAYER_ORACLES
        return LAYER_ORACLES.get(base), family.endswith("_bwd")
    if suite != "operators":
        return None, False
    return ORACLES.get(base), family.endswith("_bwd")


def manifests(dump_dir, suite):
    """[(folder, manifest, problem)] of every dumped experiment of `suite`, by folder name: the
    manifest's JSON, or None and why it could not be read."""
    root = os.path.join(dump_dir, suite)
    if not os.path.isdir(root):
        return []
    found = []
    for name in sorted(os.listdir(root)):
        path = os.path.join(root, name, "manifest.json")
        if os.path.isfile(path):
            try:
                with open(path, encoding="utf-8") as f:
                    found.append((os.path.dirname(path), json.load(f), None))
            except (OSError, ValueError) as e:
                found.append((os.path.dirname(path), None, f"{path}: {failure_reason(e)}"))
    return found


def selected(dump_dir, suite, regex):
    """[(folder, experiment, manifest, problem)] that `regex` selects (over suite/experiment); a
    manifest that cannot be read goes by its folder's name."""
    out = []
    for folder, manifest, problem in manifests(dump_dir, suite):
        experiment = manifest.get("experiment") if isinstance(manifest, dict) else None
        if not isinstance(experiment, str) or not experiment:
            experiment = os.path.basename(folder)
            problem = problem or f"{folder}/manifest.json: no experiment name"
        if regex.search(f"{suite}/{experiment}"):
            out.append((folder, experiment, manifest, problem))
    return out


def torch_version(torch):
    return getattr(torch, "__version__", "?")


def failed_check(torch, experiment, detail):
    """A check that could not be made: passed false, no numbers, `detail` says why."""
    c = check(f"{experiment} vs PyTorch {torch_version(torch)}", False, None, None, None, detail)
    c["experiment"] = experiment
    return c


def unchecked(torch, experiment, name, computed):
    """A dumped output that no oracle output compares with: missing coverage, shown as a check that
    did not pass (the schema has no third state; `unchecked: true` tells it from a mismatch)."""
    c = check(f"{experiment} {name} vs PyTorch {torch_version(torch)}", False, None, None, None,
              f"unchecked: seqbench dumped '{name}' but no PyTorch oracle output has that name "
              f"(the oracle computes: {', '.join(computed) or 'nothing'}; parity.py / parity_layers.py)")
    c["experiment"] = experiment
    c["unchecked"] = True
    return c


def manifest_checks(torch, folder, manifest, suite, device="cuda"):
    """The checks of one dumped experiment: one per output seqbench dumped, its arrays loaded onto
    `device` (the oracles run wherever their inputs are)."""
    experiment = manifest.get("experiment", "")
    if manifest.get("schema") != "seqbench.dump/1":
        raise RunnerError(f"{folder}/manifest.json: expected schema 'seqbench.dump/1', got {manifest.get('schema')!r}")
    oracle, backward = oracle_for(experiment, suite)
    if oracle is None:
        return []
    checks = []
    arrays, ours, dtypes = {}, {}, {}
    for a in manifest["arrays"]:
        descr, shape, payload = npy.read(os.path.join(folder, a["file"]))
        t = npy.to_torch(torch, descr, shape, payload, a["dtype"], device)
        (arrays if a["role"] == "input" else ours)[a["name"]] = t
        dtypes[a["name"]] = a["dtype"]
    theirs = oracle(torch, arrays, manifest["params"], backward)
    for name, (tensor, n) in theirs.items():
        if name not in ours:  # torch computes more than seqbench dumped: nothing to compare with
            continue
        if tensor.numel() != ours[name].numel():
            raise RunnerError(f"{folder}: {name} has {ours[name].numel()} elements, torch's {tensor.numel()}")
        tensor = tensor.reshape(ours[name].shape)
        title = f"{experiment} {name} vs PyTorch {torch_version(torch)}"
        if hasattr(n, "tolerance"):  # a layer's normwise bound (parity_layers.LayerBound)
            from .parity_layers import normwise_check
            a, b = ours[name].double(), tensor.to(ours[name].dtype).double()
            err = (a - b).abs().max().item() if a.numel() else 0.0
            scale = b.abs().max().item() if b.numel() else 0.0
            passed, ratio, tol = normwise_check(err, scale, dtypes[name], n)
            checks.append(check(title, passed, ratio, ratio, tol,
                                f"max |seqbench - torch| / max |torch| over {tensor.numel()} elements; "
                                f"max abs {err:.3e}, max |torch| {scale:.3e}; {n.describe()}"))
            continue
        scaled, rel, abs_err = scaled_errors(torch, ours[name], tensor.to(ours[name].dtype))
        tol = tolerance(dtypes[name], n)
        checks.append(check(title, scaled <= tol, scaled, rel, tol,
                            f"max |seqbench - torch| / max(1, |torch|) over {tensor.numel()} elements; "
                            f"max abs {abs_err:.3e}; bound 2u + 2n·2^-24 with n = {n} (suites/pytorch parity.py)"))
    for c in checks:
        c["experiment"] = experiment
    # A dumped output that no oracle output compares with is missing coverage (a new output, a
    # renamed one), not a pass: it is listed, not skipped.
    checks.extend(unchecked(torch, experiment, name, list(theirs)) for name in ours if name not in theirs)
    return checks


def parity_checks(torch, dump_dir, suite, regex, may_start=None, on_error=None, device="cuda"):
    """The checks of every dumped experiment of `suite` selected by `regex` (over suite/experiment),
    each tagged with its `experiment`. An error in one of them (a manifest that cannot be read or
    has another schema, an oracle that raises, sizes that differ) is that experiment's failed check,
    the reason in its detail, and the others still run; `on_error(exception)` is then called (it may
    raise: the runner stops on a broken CUDA context). `may_start(experiment)` false: not checked
    (the caller records why)."""
    checks = []
    for folder, experiment, manifest, problem in selected(dump_dir, suite, regex):
        if may_start is not None and not may_start(experiment):
            continue
        try:
            if problem is not None:
                raise RunnerError(problem)
            checks.extend(manifest_checks(torch, folder, manifest, suite, device))
        except Exception as ex:
            checks.append(failed_check(torch, experiment, f"error: {failure_reason(ex)}"))
            if on_error is not None:
                on_error(ex)
    return checks
