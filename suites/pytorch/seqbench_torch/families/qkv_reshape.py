"""qkv_split_fwd, qkv_split_bwd and merge_heads (suites/operators/qkv_reshape.cu): LightSeq2's bias
add + split of the fused QKV projection into the per-head layout, and its inverse.

params: batch, seq_len, hidden, heads, head_dim, projections (P), dtype, op (the family), direction.

qkv_split_fwd: x [B·L, P·H] + bias [P·H] -> [P, B, N, L, d]:
               (x + bias).view(B, L, P, N, d).permute(2, 0, 3, 1, 4).contiguous();
qkv_split_bwd: autograd of that with respect to x and bias (a transposing copy and a column sum);
merge_heads:   [B, N, L, d] -> [B·L, H]: x.permute(0, 2, 1, 3).reshape(B·L, H) (a transposing copy).
"""
from ..errors import Unmapped
from .common import autograd_variants, dtype_name, need, operator_plan, operator_variants, positive_int, randn, torch_dtype

PREFIXES = ("qkv_split", "merge_heads")


def plan(experiment):
    p = experiment.params
    batch, seq, hidden, heads, projections = (
        positive_int(k, v) for k, v in zip(("batch", "seq_len", "hidden", "heads", "projections"),
                                           need(p, "batch", "seq_len", "hidden", "heads", "projections")))
    if hidden % heads:
        raise Unmapped(f"hidden {hidden} is not a multiple of heads {heads}")
    d = hidden // heads
    dtype = dtype_name(p)
    kind = experiment.family  # qkv_split_fwd, qkv_split_bwd or merge_heads
    if kind not in ("qkv_split_fwd", "qkv_split_bwd", "merge_heads"):
        raise Unmapped(f"no torch equivalent for family '{kind}'")

    def build(torch):
        dt = torch_dtype(torch, dtype)
        if kind == "merge_heads":
            heads_in = randn(torch, (batch, heads, seq, d), dt)

            def merge(x):
                return x.permute(0, 2, 1, 3).reshape(batch * seq, hidden)

            return operator_variants(torch, merge, (heads_in,))
        x = randn(torch, (batch * seq, projections * hidden), dt)
        bias = randn(torch, (projections * hidden,), dt, 0.1)

        def split(x, bias):
            return (x + bias).view(batch, seq, projections, heads, d).permute(2, 0, 3, 1, 4).contiguous()

        if kind == "qkv_split_fwd":
            return operator_variants(torch, split, (x, bias))
        return autograd_variants(torch, split, (x, bias), wrt=(0, 1))

    # The autograd-based backward is captured on its forward's stream (common.autograd_variants).
    return operator_plan(build)
