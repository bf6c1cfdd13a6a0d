"""qkv_reshape_* (LightSeq2's bias add + split of the fused QKV projection into per-head layout).
The seqbench family is being written on another branch: this mapping reads its most likely params
and says 'unmapped' (with the missing key) rather than guessing a shape.

forward:  x [batch·seq, 3·hidden] + bias -> q, k, v as one [3, batch, heads, seq, hidden/heads]
          tensor: (x + bias).view(b, s, 3, h, d).permute(2, 0, 3, 1, 4).contiguous();
backward: autograd of that with respect to x and bias (a transposing copy and a column sum).
"""
from ..errors import Unmapped
from .common import Plan, EAGER, COMPILE, autograd_variants, dtype_name, first_of, is_backward, need, operator_variants, positive_int, randn, torch_dtype

PREFIX = "qkv_reshape"


def plan(experiment):
    p = experiment.params
    batch, heads = (positive_int(k, v) for k, v in zip(("batch", "heads"), need(p, "batch", "heads")))
    seq = positive_int("seq_len", first_of(p, "seq_len", "seq", "length"))
    hidden = positive_int("hidden", first_of(p, "hidden", "hidden_size", "dim"))
    if hidden % heads:
        raise Unmapped(f"hidden {hidden} is not a multiple of heads {heads}")
    d = hidden // heads
    dtype = dtype_name(p)
    backward = is_backward(experiment)

    def build(torch):
        dt = torch_dtype(torch, dtype)
        x = randn(torch, (batch * seq, 3 * hidden), dt)
        bias = randn(torch, (3 * hidden,), dt, 0.1)

        def forward(x, bias):
            return (x + bias).view(batch, seq, 3, heads, d).permute(2, 0, 3, 1, 4).contiguous()

        if not backward:
            return operator_variants(torch, forward, (x, bias))
        return autograd_variants(torch, forward, (x, bias), wrt=(0, 1))

    # Autograd runs each backward kernel on its forward's stream, which a graph capture on another
    # stream cannot take: the autograd-based backward is timed without a CUDA graph.
    return Plan((EAGER, COMPILE), not backward, build, note="autograd backward, no CUDA graph" if backward else "")
