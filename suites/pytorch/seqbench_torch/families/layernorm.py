"""layernorm_fwd / layernorm_bwd (LightSeq2 Fig. 16): PyTorch's own LayerNorm kernels.

forward:  aten.native_layer_norm(x, [hidden], gamma, beta, eps) -> y, mean, rstd (the three
          outputs training keeps, as seqbench's forward writes them);
backward: aten.native_layer_norm_backward(dy, x, [hidden], mean, rstd, gamma, beta) -> dx, dgamma,
          dbeta: what autograd runs for nn.LayerNorm.
"""
import math

from ..errors import Unmapped
from .common import dtype_name, is_backward, need, operator_plan, operator_variants, positive_int, randn, torch_dtype

PREFIX = "layernorm"


def layernorm_eps(params):
    """params.eps: the epsilon seqbench's kernels used (suites/operators/layernorm.cu records it)."""
    (eps,) = need(params, "eps")
    if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not math.isfinite(eps) or eps <= 0:
        raise Unmapped(f"params.eps = {eps!r} is not a positive finite number")
    return float(eps)


def plan(experiment):
    tokens, hidden = need(experiment.params, "tokens", "hidden")
    tokens, hidden = positive_int("tokens", tokens), positive_int("hidden", hidden)
    dtype = dtype_name(experiment.params)
    eps = layernorm_eps(experiment.params)
    backward = is_backward(experiment)

    def build(torch):
        dt = torch_dtype(torch, dtype)
        x = randn(torch, (tokens, hidden), dt)
        gamma = randn(torch, (hidden,), dt, 0.1, 1.0)
        beta = randn(torch, (hidden,), dt, 0.1)

        def forward(x, gamma, beta):
            return torch.ops.aten.native_layer_norm(x, [hidden], gamma, beta, eps)

        if not backward:
            return operator_variants(torch, forward, (x, gamma, beta))
        _, mean, rstd = forward(x, gamma, beta)
        dy = randn(torch, (tokens, hidden), dt)

        def backward_fn(dy, x, mean, rstd, gamma, beta):
            return torch.ops.aten.native_layer_norm_backward(dy, x, [hidden], mean, rstd, gamma, beta, [True, True, True])

        return operator_variants(torch, backward_fn, (dy, x, mean, rstd, gamma, beta))

    return operator_plan(build)
