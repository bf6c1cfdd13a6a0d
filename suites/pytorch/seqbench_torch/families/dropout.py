"""dropout_fwd / dropout_bwd: PyTorch's fused dropout.

forward:  aten.native_dropout(x, p, train=True) -> y, mask (bool, one byte per element);
backward: aten.native_dropout_backward(dy, mask, 1 / (1 - p)).
"""
from .common import dropout_p, dtype_name, is_backward, need, operator_plan, operator_variants, positive_int, randn, torch_dtype

PREFIX = "dropout"


def plan(experiment):
    (elements,) = need(experiment.params, "elements")
    elements = positive_int("elements", elements)
    p = dropout_p(experiment.params)
    dtype = dtype_name(experiment.params)
    backward = is_backward(experiment)

    def build(torch):
        dt = torch_dtype(torch, dtype)
        x = randn(torch, (elements,), dt)

        def forward(x):
            return torch.ops.aten.native_dropout(x, p, True)

        if not backward:
            return operator_variants(torch, forward, (x,))
        _, mask = forward(x)
        dy = randn(torch, (elements,), dt)

        def backward_fn(dy, mask):
            return torch.ops.aten.native_dropout_backward(dy, mask, 1.0 / (1.0 - p))

        return operator_variants(torch, backward_fn, (dy, mask))

    return operator_plan(build)
