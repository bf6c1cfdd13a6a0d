"""softmax_fwd / softmax_bwd (LightSeq2 Fig. 17): attention probabilities as PyTorch attention code
computes them from the scores.

forward:  y = softmax(scale * x [masked_fill(causal, -inf)], dim=-1) over [batch, heads, q_len, k_len];
backward: dx = scale * aten._softmax_backward_data(dy, y, -1): what autograd runs for the forward.
"""
from .common import dtype_name, is_backward, need, operator_plan, operator_variants, positive_int, randn, torch_dtype
from ..errors import Unmapped

PREFIX = "softmax"


def plan(experiment):
    p = experiment.params
    batch, heads, q_len, k_len = (positive_int(k, v) for k, v in zip(("batch", "heads", "q_len", "k_len"),
                                                                      need(p, "batch", "heads", "q_len", "k_len")))
    scale = float(p.get("scale", 1.0))
    mask = p.get("mask", "none")
    if mask not in ("none", "causal"):
        raise Unmapped(f"params.mask {mask!r}: only 'none' and 'causal' have a PyTorch equivalent here")
    dtype = dtype_name(p)
    backward = is_backward(experiment)
    shape = (batch, heads, q_len, k_len)

    def build(torch):
        dt = torch_dtype(torch, dtype)
        x = randn(torch, shape, dt, 4.0)
        causal = None
        if mask == "causal":
            # Query i sees keys j <= i + causal_offset, as kernels/softmax.h defines it.
            offset = int(p.get("causal_offset", 0))
            causal = torch.ones(q_len, k_len, dtype=torch.bool, device="cuda").triu(1 + offset)

        def forward(x):
            z = x * scale
            if causal is not None:
                z = z.masked_fill(causal, float("-inf"))
            return torch.softmax(z, dim=-1)

        if not backward:
            return operator_variants(torch, forward, (x,))
        y = forward(x)
        dy = randn(torch, shape, dt)

        def backward_fn(dy, y):
            return torch.ops.aten._softmax_backward_data(dy, y, -1, y.dtype) * scale

        return operator_variants(torch, backward_fn, (dy, y))

    return operator_plan(build)
