"""bias_dropout_residual_fwd / _bwd (every sub-layer's end): y = residual + dropout(x + bias).

forward:  y1, mask = aten.native_dropout(x + bias, p, True); y = y1 + residual  (eager: 3 kernels);
backward: dx = native_dropout_backward(dy, mask, 1/(1-p)); dbias = dx.sum(0) (the residual's
          gradient is dy itself: no work).
"""
from .common import dropout_p, dtype_name, is_backward, need, operator_plan, operator_variants, positive_int, randn, torch_dtype

PREFIX = "bias_dropout_residual"


def plan(experiment):
    rows, cols = need(experiment.params, "rows", "cols")
    rows, cols = positive_int("rows", rows), positive_int("cols", cols)
    p = dropout_p(experiment.params)
    dtype = dtype_name(experiment.params)
    backward = is_backward(experiment)

    def build(torch):
        dt = torch_dtype(torch, dtype)
        x = randn(torch, (rows, cols), dt)
        bias = randn(torch, (cols,), dt, 0.1)
        residual = randn(torch, (rows, cols), dt)

        def forward(x, bias, residual):
            y, mask = torch.ops.aten.native_dropout(x + bias, p, True)
            return y + residual, mask

        if not backward:
            return operator_variants(torch, forward, (x, bias, residual))
        _, mask = forward(x, bias, residual)
        dy = randn(torch, (rows, cols), dt)

        def backward_fn(dy, mask):
            dx = torch.ops.aten.native_dropout_backward(dy, mask, 1.0 / (1.0 - p))
            return dx, dx.sum(0)

        return operator_variants(torch, backward_fn, (dy, mask))

    return operator_plan(build)
