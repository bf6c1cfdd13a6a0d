"""Trainer suite (LightSeq2 Fig. 18): one optimizer step over a real model's parameter list, as
PyTorch mixed-precision training runs it today.

PyTorch's AMP keeps the parameters, their gradients and the optimizer state in fp32 (autocast
computes in fp16/bf16; there is no fp16 copy of the weights), and GradScaler unscales the
gradients by the loss scale and skips the step on inf/NaN. So each variant steps fp32 tensors
with the experiment's tensor list (`inputs.tensor_elements` of `seqbench list --json`), lr,
betas or momentum, and loss scale:
  torch_eager    foreach=True (PyTorch's default on CUDA): what GradScaler.step does for it,
                 _amp_foreach_non_finite_check_and_unscale_, then found_inf.item() (the host sync
                 with which GradScaler decides to skip the step), then optimizer.step();
  torch_fused    fused=True: what GradScaler.step does for an optimizer that takes its scaling
                 (_step_supports_amp_scaling): the inf/NaN check over the gradients first
                 (_check_inf_per_device, the same foreach kernel with an inverse scale of 1, which
                 reads and rewrites every gradient), then optimizer.step() with grad_scale and
                 found_inf handed to the fused kernel, which unscales and skips on the device;
  torch_compile  the foreach unscale and the sync, then torch.compile(optimizer.step) (PyTorch's
                 "compiled optimizer").
seqbench's own steps check for inf/NaN too (trainer/fused_optimizer.h's statistics pass), on the
device, without a host sync.
Bytes are the experiment's minimal bytes (fp16 params and grads, fp32 state): the work a step must
do, so GB/s compares the same work across runners; PyTorch's fp32 parameters and gradients are
its overhead, as the master copy is seqbench's.
No CUDA graph: a step is milliseconds long, and PyTorch users do not capture optimizer steps.
"""
from ..errors import Unmapped
from .common import COMPILE, EAGER, FUSED, Plan, need

PREFIXES = ("adam", "adamw", "sgd")


def plan(experiment):
    p = experiment.params
    optimizer, lr, loss_scale = need(p, "optimizer", "lr", "loss_scale")
    if optimizer not in PREFIXES:
        raise Unmapped(f"params.optimizer {optimizer!r} has no PyTorch mapping here")
    elements = experiment.inputs.get("tensor_elements")
    if not isinstance(elements, list) or not elements:
        raise Unmapped("inputs.tensor_elements is missing: rebuild seqbench (list --json carries the tensor list)")
    if any(not isinstance(n, int) or n < 0 for n in elements):
        raise Unmapped("inputs.tensor_elements holds a value that is not an element count")
    # Every hyperparameter comes from the experiment (seqbench records them all): no default here
    # may silently step another rule.
    (weight_decay,) = need(p, "weight_decay")
    # Clipping is not mapped (no clip_grad_norm_ in the steps below): an experiment that clips
    # would be timed against a torch step that does not, so it is refused rather than mis-timed.
    # (A listing without the key predates it, and did not clip.)
    max_grad_norm = p.get("max_grad_norm", 0.0)
    if not isinstance(max_grad_norm, (int, float)) or max_grad_norm != 0:
        raise Unmapped(f"params.max_grad_norm {max_grad_norm!r}: gradient clipping has no PyTorch mapping here")
    if optimizer in ("adam", "adamw"):
        betas, eps = need(p, "betas", "eps")
        options = {"betas": tuple(float(b) for b in betas), "eps": float(eps), "weight_decay": float(weight_decay)}
    else:
        momentum, nesterov = need(p, "momentum", "nesterov")
        options = {"momentum": float(momentum), "nesterov": bool(nesterov), "weight_decay": float(weight_decay)}
    sizes = [n for n in elements if n > 0]  # PyTorch cannot hold a parameter without storage any differently
    lr, inv_scale = float(lr), 1.0 / float(loss_scale)

    def build(torch):
        cls = {"adam": torch.optim.Adam, "adamw": torch.optim.AdamW, "sgd": torch.optim.SGD}[optimizer]
        return {
            EAGER: lambda: _step(torch, cls, sizes, lr, options, inv_scale, "foreach"),
            FUSED: lambda: _step(torch, cls, sizes, lr, options, inv_scale, "fused"),
            COMPILE: lambda: _step(torch, cls, sizes, lr, options, inv_scale, "compile"),
        }

    # Each value of build()'s dict makes that variant's state (params, grads, optimizer) and returns
    # its work (Plan.lazy): cli.py makes and drops them one at a time.
    return Plan((EAGER, FUSED, COMPILE), False, build, note="fp32 params, grads and state (torch.amp)", lazy=True)


def _step(torch, cls, sizes, lr, options, inv_scale, how):
    gen = torch.Generator(device="cuda").manual_seed(0x7121A1)
    params = [torch.rand(n, device="cuda", generator=gen).mul_(2).sub_(1).requires_grad_(True) for n in sizes]
    for t in params:
        g = torch.rand(t.numel(), device="cuda", generator=gen).mul_(2).sub_(1)
        # In [-1.01, -0.01] U [0.01, 1.01), never zero, as the C++ suite fills its gradients.
        t.grad = g.add_(torch.where(g < 0, -0.01, 0.01))
    # 0-dim, as GradScaler makes them: a fused Adam subtracts found_inf from each parameter's 0-dim
    # step count in place (torch/optim/adam.py, _fused_adam), which a shape-[1] tensor cannot broadcast into.
    found_inf = torch.zeros((), device="cuda")
    inv = torch.full((), inv_scale, device="cuda")
    grads = [t.grad for t in params]
    if how == "fused":
        opt = cls(params, lr=lr, fused=True, **options)
        opt.grad_scale = torch.full((), 1.0 / inv_scale, device="cuda")  # as GradScaler.step sets them
        opt.found_inf = found_inf
        one = torch.full((), 1.0, device="cuda")

        def fused_work():
            # GradScaler._check_inf_per_device: the inf/NaN check, unscaling by 1.
            torch._amp_foreach_non_finite_check_and_unscale_(grads, found_inf, one)
            opt.step()

        return fused_work
    opt = cls(params, lr=lr, foreach=True, **options)
    step = torch.compile(opt.step, fullgraph=False) if how == "compile" else opt.step

    def work():
        torch._amp_foreach_non_finite_check_and_unscale_(grads, found_inf, inv)
        if not found_inf.item():  # GradScaler._maybe_opt_step: a host sync, then the step unless skipped
            step()

    return work
