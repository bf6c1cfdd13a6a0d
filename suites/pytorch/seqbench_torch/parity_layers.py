"""Numerical parity for the layers suite: the oracles of the encoder, decoder, embedding and
criterion experiments that `seqbench dump` wrote (suites/layers/dump.cu; parity.py dispatches here
for suite "layers").

What was dumped. Dropout cannot match torch's RNG and the layers draw their masks inside fused
kernels, so seqbench dumps SEPARATE parity instances of the managed layer with every dropout ratio
0 (params.parity_dropout = 0), at params.parity_batch sentences of the experiment's length
(parity_tokens <= 1024; the decoder's source length parity_src_len = L), once per dtype in
params.parity_dtypes (the experiment's, then f32). Every array is named "<dtype>.<name>"; an oracle
handles each dtype's group on its own and returns "<dtype>.<output>".

What torch computes, in fp32 from the dumped (already rounded) inputs, TF32 off:
  encoder, decoder  families/layers.py's TransformerLayer (the module the timing runs), its weights
                    copied from the dumped tensors by PARAMETERS (seqbench's parameter names ->
                    the module's), attention through SDPA's math backend (explicit softmax in fp32),
                    eval mode (the dropouts are 0 anyway); y, then torch.autograd.grad(y, [x,
                    (encoder_out), parameters...], dy): dx, d_encoder_out, d_<parameter>.
  embedding         parity.embedding_outputs (the operator family's oracle: the same kernels) with
                    p = 0 and an all-ones keep mask: y; d_token_table.
  criterion         parity.cross_entropy_outputs (the operator family's) with grad_loss = 1 per row
                    (the layer's backward for grad_loss_sum = 1): loss, nll, lse, dlogits; and the
                    totals loss_sum, nll_sum (sums of the per-row values) and counted_tokens.

The bound of the transformer layers (LayerBound) is tests/layers' model (tests/layers/layer_check.h,
derived in tests/layers/encoder_layer_test.cu and decoder_layer_test.cu), normwise per tensor:
    max |seqbench - torch| <= tol · max |torch| + η_T,   tol = n · (G·u_T + 3 (k + 2)·2^-24)
n is the number of roundings to T on the longest path from an input to the output (the managed
layer's: encoder 16 forward, 32 backward; decoder 26 and 52: the encoder's 16 plus the
cross-attention sub-layer's 10, and the backward reads the forward's and adds as many), each
contributing u_T times the magnitude it rounds, carried to the output by the Jacobian of the rest
of the layer; with the dumped inputs (x, dy, encoder_out U(-1, 1), weights U(±1/√fan_in): unit
mean-square gain, gammas U(0.5, 1.5), softmax gain <= 1) G = 4 bounds those gains relative to the
output's own scale, as tests/layers states (a modelling assumption, not a proof; a failure is to be
analysed, never answered by raising G). k is the longest inner dimension (3H, ffn, the B·L and B·S
rows of a weight gradient, L and S): each fp32 accumulation errs by at most (k + 2)·2^-24 relative;
tests/layers allows 2 of them for seqbench's side (tensor cores may truncate their fp32 sums) against
an exact double reference, and torch's fp32 side here is one more (fp32 GEMMs with TF32 off): 3.
With dropout 0 the layer has at most these roundings (a dropout fused into a kernel rounds with it).
η_T is half T's smallest subnormal (check_util.h underflow_error).

Embedding and criterion keep their operator oracles' elementwise bound (parity.tolerance) and n;
the totals: loss_sum and nll_sum add rows terms each within (V + 16)·2^-24 relative of its own
(non-negative) value: n = V + 16 + rows; counted_tokens is an integer, n = 0 (exact).
"""
import re

from . import parity, precision
from .errors import RunnerError, Unmapped
from .families import layers as layer_families

GAIN_ALLOWANCE = 4.0  # G of tests/layers/layer_check.h
FP32_U = 2.0 ** -24
# half T's smallest subnormal (suites/operators/check_util.h underflow_error)
UNDERFLOW = {"f32": 2.0 ** -150, "f16": 2.0 ** -25, "bf16": 2.0 ** -134}
# (forward, backward) roundings of the managed layers (tests/layers/*_layer_test.cu)
ROUNDINGS = {"encoder": (16, 32), "decoder": (26, 52)}

# seqbench's parameter names (layers/encoder_layer.h for_each_encoder_tensor, decoder_layer.h
# for_each_decoder_tensor, in that order) -> the TransformerLayer module's parameter. The fused QKV
# [3H, H] is the Q, K, V rows (the module's heads are views of the same columns); the decoder's
# cross K/V [2H, H] is the K, then V rows, as kv_proj's.
_FFN = (("ffn_ln_gamma", "ffn_norm.weight"), ("ffn_ln_beta", "ffn_norm.bias"),
        ("fc1_weight", "ffn.fc1.weight"), ("fc1_bias", "ffn.fc1.bias"),
        ("fc2_weight", "ffn.fc2.weight"), ("fc2_bias", "ffn.fc2.bias"))
PARAMETERS = {
    "encoder": (("attn_ln_gamma", "self_norm.weight"), ("attn_ln_beta", "self_norm.bias"),
                ("qkv_weight", "self_attn.qkv_proj.weight"), ("qkv_bias", "self_attn.qkv_proj.bias"),
                ("out_weight", "self_attn.out_proj.weight"), ("out_bias", "self_attn.out_proj.bias")) + _FFN,
    "decoder": (("self_ln_gamma", "self_norm.weight"), ("self_ln_beta", "self_norm.bias"),
                ("self_qkv_weight", "self_attn.qkv_proj.weight"), ("self_qkv_bias", "self_attn.qkv_proj.bias"),
                ("self_out_weight", "self_attn.out_proj.weight"), ("self_out_bias", "self_attn.out_proj.bias"),
                ("cross_ln_gamma", "cross_norm.weight"), ("cross_ln_beta", "cross_norm.bias"),
                ("cross_q_weight", "cross_attn.q_proj.weight"), ("cross_q_bias", "cross_attn.q_proj.bias"),
                ("cross_kv_weight", "cross_attn.kv_proj.weight"), ("cross_kv_bias", "cross_attn.kv_proj.bias"),
                ("cross_out_weight", "cross_attn.out_proj.weight"), ("cross_out_bias", "cross_attn.out_proj.bias"))
    + _FFN,
}

INSTANCE = re.compile(r"^(f32|f16|bf16)\.(.+)$")


class LayerBound:
    """tests/layers' normwise bound: tol = roundings · (G·u_T + 3 (k + 2)·2^-24) (see the top).
    relu_margin (the dump's params.parity_relu_margin of the instance, in units of its u_T) is only
    described: how far the instance's fc1 pre-activations lie from ReLU's kink (ReLU flips, above)."""

    def __init__(self, roundings, k_max, relu_margin_u=None):
        self.roundings, self.k_max = int(roundings), int(k_max)
        self.relu_margin_u = relu_margin_u

    def tolerance(self, dtype):
        return self.roundings * (GAIN_ALLOWANCE * parity.UNIT_ROUNDOFF[dtype] + 3.0 * (self.k_max + 2) * FP32_U)

    def describe(self):
        text = (f"normwise max |seqbench - torch| <= tol·max |torch| + η, tol = n·(G·u + 3(k+2)·2^-24) with "
                f"n = {self.roundings}, G = {GAIN_ALLOWANCE:g}, k = {self.k_max} (suites/pytorch parity_layers.py)")
        if self.relu_margin_u is not None:
            text += (f"; fc1's ReLU pre-activations lie at least {self.relu_margin_u:.3g} u_T from 0, relative to "
                     "their column (the dump's parity_relu_margin)")
        return text

    def __eq__(self, other):
        return isinstance(other, LayerBound) and (self.roundings, self.k_max) == (other.roundings, other.k_max)

    def __repr__(self):
        return f"LayerBound({self.roundings}, {self.k_max})"


def normwise_check(err, scale, dtype, bound):
    """(passed, ratio, tolerance) of LayerBound's rule err <= tol·scale + η_T: the ratio is
    err / max|torch| (err when that is 0) and the tolerance the bound in the same units, tol + η_T
    / scale (η_T when scale is 0), so that the report's passed reads as ratio <= tolerance. (tol
    alone, without η_T / scale, sat below a passing ratio where max|torch| is tiny.)"""
    tol = bound.tolerance(dtype)
    eta = UNDERFLOW[dtype]
    passed = err <= tol * scale + eta
    if scale > 0:
        return passed, err / scale, tol + eta / scale
    return passed, err, eta


def transformer_bound(kind, backward, batch, seq_len, src_len, hidden, ffn):
    """The LayerBound of one transformer layer output: n from ROUNDINGS, k the longest inner
    dimension as tests/layers counts it."""
    forward, backward_n = ROUNDINGS[kind]
    dims = [3 * hidden, ffn, batch * seq_len, seq_len]
    if kind == "decoder":
        dims += [batch * src_len, src_len]
    return LayerBound(backward_n if backward else forward, max(dims))


def relu_margin_units(params, dtype):
    """The dump's ReLU margin of the `dtype` instance (params.parity_relu_margin, suites/layers/dump.cu)
    in units of u_T, or None where the dump recorded none (a dump from before it centred fc1's bias)."""
    margins = params.get("parity_relu_margin")
    if not isinstance(margins, dict) or not isinstance(margins.get(dtype), (int, float)):
        return None
    return float(margins[dtype]) / parity.UNIT_ROUNDOFF[dtype]


def instances(arrays):
    """{dtype: {name: tensor}} from the dumped "<dtype>.<name>" arrays."""
    out = {}
    for name, tensor in arrays.items():
        m = INSTANCE.match(name)
        if not m:
            raise RunnerError(f"layers parity: array '{name}' is not named '<dtype>.<name>'")
        out.setdefault(m.group(1), {})[m.group(2)] = tensor
    return out


def check_parity_params(params):
    """The dump ran a dropout-free instance: params.parity_dropout must say 0."""
    if params.get("parity_dropout") != 0:
        raise RunnerError(f"layers parity: params.parity_dropout is {params.get('parity_dropout')!r}, expected 0 "
                          "(the dump's parity instance has no dropout; torch cannot redraw seqbench's masks)")


def transformer_parity_spec(kind, params, dtype, x_shape, src_len):
    """families/layers.py's TransformerSpec of the parity instance: the experiment's params with the
    dumped shape, the instance's dtype and every dropout 0."""
    batch, seq_len, _ = x_shape
    p = dict(params, dtype=dtype, batch=batch, seq_len=seq_len, tokens=batch * seq_len, src_len=src_len,
             attn_dropout=0.0, activation_dropout=0.0, hidden_dropout=0.0)
    try:
        return layer_families.transformer_spec(kind, p)
    except Unmapped as e:
        raise RunnerError(f"layers parity: {e}") from None


class _Fp32Math:
    """TF32 off and SDPA's math backend (an explicit softmax in fp32) while the oracle runs."""

    def __init__(self, torch):
        self.torch = torch

    def __enter__(self):
        t = self.torch
        self.tf32 = precision.disable_tf32_matmul(t)
        try:
            from torch.nn.attention import SDPBackend, sdpa_kernel
            self.sdpa = sdpa_kernel(SDPBackend.MATH)
        except ImportError:  # PyTorch < 2.3
            self.sdpa = t.backends.cuda.sdp_kernel(enable_flash=False, enable_math=True, enable_mem_efficient=False)
        self.sdpa.__enter__()
        return self

    def __exit__(self, *exc):
        self.sdpa.__exit__(*exc)
        precision.restore_tf32_matmul(self.torch, self.tf32)
        return False


def transformer_outputs(torch, arrays, params, backward, kind):
    check_parity_params(params)
    TransformerLayer, _, _ = layer_families._modules(torch)
    out = {}
    for dtype, group in instances(arrays).items():
        x = group["x"]
        enc = group.get("encoder_out") if kind == "decoder" else None
        if kind == "decoder" and enc is None:
            raise RunnerError(f"layers parity: the decoder dump lacks {dtype}.encoder_out")
        src_len = enc.shape[1] if enc is not None else x.shape[1]
        spec = transformer_parity_spec(kind, params, dtype, tuple(x.shape), src_len)
        bound = transformer_bound(kind, backward, spec.batch, spec.seq_len, spec.src_len, spec.hidden, spec.ffn)
        bound.relu_margin_u = relu_margin_units(params, dtype)
        with _Fp32Math(torch):
            module = TransformerLayer(spec).to(device=x.device, dtype=torch.float32).eval()
            with torch.no_grad():
                for ours, theirs in PARAMETERS[kind]:
                    if ours not in group:
                        raise RunnerError(f"layers parity: the {kind} dump lacks {dtype}.{ours}")
                    target = module.get_parameter(theirs)
                    target.copy_(group[ours].float().reshape(target.shape))
            args = [x.float().detach().requires_grad_(backward)]
            if enc is not None:
                args.append(enc.float().detach().requires_grad_(backward))
            y = module(*args)
            out[f"{dtype}.y"] = (y.detach(), LayerBound(ROUNDINGS[kind][0], bound.k_max, bound.relu_margin_u))
            if backward:
                wrt = args + [module.get_parameter(theirs) for _, theirs in PARAMETERS[kind]]
                grads = torch.autograd.grad(y, wrt, group["dy"].float())
                names = ["dx"] + (["d_encoder_out"] if enc is not None else [])
                names += ["d_" + ours for ours, _ in PARAMETERS[kind]]
                for name, g in zip(names, grads):
                    out[f"{dtype}.{name}"] = (g, bound)
    return out


def encoder_outputs(torch, arrays, params, backward):
    return transformer_outputs(torch, arrays, params, backward, "encoder")


def decoder_outputs(torch, arrays, params, backward):
    return transformer_outputs(torch, arrays, params, backward, "decoder")


def embedding_operator_params(params, hidden, vocab):
    """The operator embedding oracle's params for the layer's (dropout 0: p = 0)."""
    return {"hidden": hidden, "vocab": vocab, "padding_idx": int(params["padding_idx"]),
            "scale": float(params["scale"]), "position_offset": int(params["position_offset"]),
            "positions": f"{params['positions']}/{params['indexing']}", "p": 0.0}


def embedding_outputs(torch, arrays, params, backward):
    check_parity_params(params)
    out = {}
    for dtype, group in instances(arrays).items():
        tokens, table = group["tokens"], group["token_table"]
        batch, length = tokens.shape
        vocab, hidden = table.shape
        op_arrays = {"tokens": tokens, "token_table": table,
                     "keep": torch.ones(batch * length, hidden, dtype=torch.uint8, device=tokens.device)}
        op_params = embedding_operator_params(params, hidden, vocab)
        for name, (t, n) in parity.embedding_outputs(torch, op_arrays, op_params, False).items():
            out[f"{dtype}.{name}"] = (t.reshape(batch, length, hidden), n)
        if backward:
            op_arrays["dy"] = group["dy"]
            for name, (t, n) in parity.embedding_outputs(torch, op_arrays, op_params, True).items():
                out[f"{dtype}.{name}"] = (t, n)
    return out


def criterion_operator_params(params):
    """The operator cross-entropy oracle's params for the layer's."""
    return {"vocab": int(params["vocab"]), "ignore_index": int(params["padding_idx"]),
            "convention": params["convention"], "smoothing": float(params["epsilon"])}


def criterion_totals_roundings(vocab, rows):
    """n of loss_sum and nll_sum: each row within (V + 16)·2^-24 of its own value, plus the sum."""
    return vocab + 16 + rows


def criterion_outputs(torch, arrays, params, backward):
    check_parity_params(params)
    op_params = criterion_operator_params(params)
    out = {}
    for dtype, group in instances(arrays).items():
        logits, targets = group["logits"], group["targets"]
        rows, vocab = logits.shape
        op_arrays = {"logits": logits, "targets": targets,
                     "grad_loss": torch.ones(rows, dtype=torch.float32, device=logits.device)}
        per_row = parity.cross_entropy_outputs(torch, op_arrays, op_params, False)
        for name, value in per_row.items():
            out[f"{dtype}.{name}"] = value
        n = criterion_totals_roundings(vocab, rows)
        out[f"{dtype}.loss_sum"] = (per_row["loss"][0].double().sum().reshape(1), n)
        out[f"{dtype}.nll_sum"] = (per_row["nll"][0].double().sum().reshape(1), n)
        counted = (targets.long() != int(params["padding_idx"])).sum().reshape(1).to(torch.int32)
        out[f"{dtype}.counted_tokens"] = (counted, 0)
        if backward:
            for name, value in parity.cross_entropy_outputs(torch, op_arrays, op_params, True).items():
                out[f"{dtype}.{name}"] = value
    return out


# The layers suite's families (the name up to _fwd/_bwd) -> oracle.
LAYER_ORACLES = {
    "encoder": encoder_outputs,
    "decoder": decoder_outputs,
    "embedding": embedding_outputs,
    "criterion": criterion_outputs,
}
