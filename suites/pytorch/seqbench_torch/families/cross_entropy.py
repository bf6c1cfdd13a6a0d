"""cross_entropy_* (LightSeq2's label-smoothed cross-entropy over the vocabulary). The seqbench
family is being written on another branch: this mapping reads its most likely params and says
'unmapped' (with the missing key) rather than guessing a shape.

forward:  F.cross_entropy(logits [tokens, vocab], targets, label_smoothing=eps, ignore_index,
          reduction) (eager: log_softmax + nll + smoothing terms);
backward: autograd of that loss with respect to the logits.
"""
from ..errors import Unmapped
from .common import Plan, EAGER, COMPILE, autograd_variants, dtype_name, first_of, is_backward, operator_variants, positive_int, randn, torch_dtype

PREFIX = "cross_entropy"


def plan(experiment):
    p = experiment.params
    tokens = positive_int("tokens", first_of(p, "tokens", "rows", "batch_tokens"))
    vocab = positive_int("vocab", first_of(p, "vocab", "vocab_size", "cols"))
    eps = float(first_of(p, "label_smoothing", "epsilon", "smoothing", "eps"))
    if not 0.0 <= eps < 1.0:
        raise Unmapped(f"label smoothing {eps} is outside [0, 1)")
    ignore_index = int(first_of(p, "ignore_index", "padding_idx", "pad_id", default=-100))
    reduction = p.get("reduction", "sum")
    if reduction not in ("sum", "mean", "none"):
        raise Unmapped(f"params.reduction {reduction!r} is not sum, mean or none")
    dtype = dtype_name(p)
    backward = is_backward(experiment)

    def build(torch):
        import torch.nn.functional as F

        dt = torch_dtype(torch, dtype)
        logits = randn(torch, (tokens, vocab), dt, 2.0)
        targets = torch.randint(0, vocab, (tokens,), device="cuda")

        def forward(logits, targets):
            return F.cross_entropy(logits, targets, ignore_index=ignore_index, label_smoothing=eps, reduction=reduction)

        if not backward:
            return operator_variants(torch, forward, (logits, targets))
        return autograd_variants(torch, forward, (logits, targets), wrt=(0,))

    # Autograd runs each backward kernel on its forward's stream, which a graph capture on another
    # stream cannot take: the autograd-based backward is timed without a CUDA graph.
    return Plan((EAGER, COMPILE), not backward, build, note="autograd backward, no CUDA graph" if backward else "")
