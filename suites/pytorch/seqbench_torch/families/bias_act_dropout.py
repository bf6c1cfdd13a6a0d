"""bias_act_dropout_fwd / _bwd (the FFN's first sub-layer): y = dropout(act(x + bias)).

forward:  z = x + bias; a = act(z); y, mask = aten.native_dropout(a, p, True)  (eager: 3 kernels);
backward: from what autograd saved (the mask, and relu's output or gelu's input z):
          g = native_dropout_backward(dy, mask, 1/(1-p)); dz = threshold_backward(g, a, 0) or
          gelu_backward(g, z); dbias = dz.sum(0); dx = dz.
"""
from ..errors import Unmapped
from .common import (dropout_p, dtype_name, gelu_approximate, is_backward, need, operator_plan, operator_variants,
                     positive_int, randn, torch_dtype)

PREFIX = "bias_act_dropout"
ACTIVATIONS = ("relu", "gelu_erf", "gelu_tanh")


def plan(experiment):
    rows, cols, activation = need(experiment.params, "rows", "cols", "activation")
    rows, cols = positive_int("rows", rows), positive_int("cols", cols)
    if activation not in ACTIVATIONS:
        raise Unmapped(f"params.activation {activation!r} is not one of {', '.join(ACTIVATIONS)}")
    p = dropout_p(experiment.params)
    dtype = dtype_name(experiment.params)
    backward = is_backward(experiment)

    def build(torch):
        import torch.nn.functional as F

        dt = torch_dtype(torch, dtype)
        x = randn(torch, (rows, cols), dt)
        bias = randn(torch, (cols,), dt, 0.1)

        def act(z):
            return torch.relu(z) if activation == "relu" else F.gelu(z, approximate=gelu_approximate(activation))

        def forward(x, bias):
            return torch.ops.aten.native_dropout(act(x + bias), p, True)

        if not backward:
            return operator_variants(torch, forward, (x, bias))
        z = x + bias
        saved = torch.relu(z) if activation == "relu" else z
        _, mask = torch.ops.aten.native_dropout(act(z), p, True)
        dy = randn(torch, (rows, cols), dt)

        def backward_fn(dy, mask, saved):
            g = torch.ops.aten.native_dropout_backward(dy, mask, 1.0 / (1.0 - p))
            if activation == "relu":
                dz = torch.ops.aten.threshold_backward(g, saved, 0)
            else:
                dz = torch.ops.aten.gelu_backward(g, saved, approximate=gelu_approximate(activation))
            return dz, dz.sum(0)

        return operator_variants(torch, backward_fn, (dy, mask, saved))

    return operator_plan(build)
