"""embedding_* (LightSeq2's embedding layer: token lookup, scaled, plus positions, then dropout).
The seqbench family is being written on another branch: this mapping reads its most likely params
and says 'unmapped' (with the missing key) rather than guessing a shape.

forward:  y = dropout(scale * E[ids] + P[positions], p)  (scale = sqrt(hidden) unless params say);
backward: autograd with respect to the token table E (embedding_dense_backward: a scatter-add).
"""
import math

from .common import Plan, EAGER, COMPILE, autograd_variants, dropout_p, dtype_name, first_of, is_backward, operator_variants, positive_int, randn, torch_dtype

PREFIX = "embedding"


def plan(experiment):
    p = experiment.params
    hidden = positive_int("hidden", first_of(p, "hidden", "embedding_dim", "dim"))
    vocab = positive_int("vocab", first_of(p, "vocab", "vocab_size", "num_embeddings"))
    if "batch" in p and any(k in p for k in ("seq_len", "seq", "length")):
        batch = positive_int("batch", p["batch"])
        seq = positive_int("seq_len", first_of(p, "seq_len", "seq", "length"))
    else:
        batch, seq = 1, positive_int("tokens", first_of(p, "tokens", "rows"))
    drop = dropout_p(p) if any(k in p for k in ("p", "dropout", "dropout_p")) else 0.0
    scale = float(p.get("scale", math.sqrt(hidden)))
    positions = bool(p.get("positions", True))
    dtype = dtype_name(p)
    backward = is_backward(experiment)

    def build(torch):
        import torch.nn.functional as F

        dt = torch_dtype(torch, dtype)
        table = randn(torch, (vocab, hidden), dt, 0.02)
        pos = randn(torch, (seq, hidden), dt, 0.02)
        ids = torch.randint(0, vocab, (batch, seq), device="cuda")

        def forward(table, ids, pos):
            y = F.embedding(ids, table) * scale
            if positions:
                y = y + pos
            return F.dropout(y, drop, training=True) if drop > 0 else y

        if not backward:
            return operator_variants(torch, forward, (table, ids, pos))
        return autograd_variants(torch, forward, (table, ids, pos), wrt=(0,))

    # Autograd runs each backward kernel on its forward's stream, which a graph capture on another
    # stream cannot take: the autograd-based backward is timed without a CUDA graph.
    return Plan((EAGER, COMPILE), not backward, build, note="autograd backward, no CUDA graph" if backward else "")
