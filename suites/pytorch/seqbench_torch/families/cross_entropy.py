"""cross_entropy_* (LightSeq2's label-smoothed cross-entropy, suites/operators/cross_entropy.cu).

params: rows (N), vocab (V), dtype, smoothing, convention ("paper" or "fairseq"), ignore_index,
ignored_rows (how many rows hold the ignore index), direction.

PyTorch's F.cross_entropy(label_smoothing=a) is the paper's convention, p = (1 - a)·onehot + a/V. The
fairseq convention with ε (target 1 - ε, others ε/(V-1)) is the same distribution for
a = ε·V/(V-1) (reference/cross_entropy.h), so both map to one torch call with reduction "sum"
(seqbench's loss_sum; ignored rows contribute nothing).

forward:  F.cross_entropy(logits [N, V], targets, label_smoothing=a, ignore_index, reduction="sum")
          (eager: log_softmax, then the nll and smoothing reductions);
backward: autograd of that loss with respect to the logits.
"""
from ..errors import Unmapped
from .common import autograd_variants, dtype_name, is_backward, need, operator_plan, operator_variants, positive_int, randn, torch_dtype

PREFIX = "cross_entropy"


def torch_label_smoothing(convention, smoothing, vocab):
    """PyTorch's label_smoothing for seqbench's (convention, smoothing) at vocabulary size V."""
    if convention == "paper":
        return smoothing
    if convention == "fairseq":
        return smoothing * vocab / (vocab - 1) if vocab > 1 else 0.0
    raise Unmapped(f"params.convention {convention!r} is not paper or fairseq")


def plan(experiment):
    p = experiment.params
    rows, vocab = (positive_int(k, v) for k, v in zip(("rows", "vocab"), need(p, "rows", "vocab")))
    convention, smoothing, ignore_index = need(p, "convention", "smoothing", "ignore_index")
    alpha = torch_label_smoothing(convention, float(smoothing), vocab)
    if not 0.0 <= alpha <= 1.0:
        raise Unmapped(f"label smoothing {alpha} (from {convention} {smoothing}) is outside [0, 1]")
    ignored = int(p.get("ignored_rows", 0))
    if not 0 <= ignored <= rows:
        raise Unmapped(f"params.ignored_rows = {ignored} is outside [0, {rows}]")
    ignore_index = int(ignore_index)
    dtype = dtype_name(p)
    backward = is_backward(experiment)

    def build(torch):
        import torch.nn.functional as F

        dt = torch_dtype(torch, dtype)
        logits = randn(torch, (rows, vocab), dt, 2.0)
        targets = torch.randint(0, vocab, (rows,), device="cuda")
        targets[targets == ignore_index] = (ignore_index + 1) % vocab
        if ignored:
            targets[torch.randperm(rows, device="cuda")[:ignored]] = ignore_index

        def forward(logits, targets):
            return F.cross_entropy(logits, targets, ignore_index=ignore_index, label_smoothing=alpha, reduction="sum")

        if not backward:
            return operator_variants(torch, forward, (logits, targets))
        return autograd_variants(torch, forward, (logits, targets), wrt=(0,))

    # The autograd-based backward is captured on its forward's stream (common.autograd_variants).
    return operator_plan(build)
