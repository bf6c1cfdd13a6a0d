"""embedding_* (LightSeq2's embedding layer, suites/operators/embedding.cu): token lookup scaled by
sqrt(H), plus positions, padding rows zero, then dropout.

params: batch, seq_len, hidden, vocab, dtype, p, positions ("sinusoidal/nonpad_count" as fairseq, or
"learned/slot" as Hugging Face), padding_share, direction. The seqbench experiments use padding index 1
and scale sqrt(hidden) (fairseq's embed_scale).

forward (eager, as fairseq runs it): mask = ids != pad; positions = cumsum(mask)·mask (nonpad
          count) or arange(L) (slot); y = F.embedding(ids, E, padding_idx)·scale + P[positions],
          masked_fill(~mask, 0), F.dropout;
backward: autograd with respect to E (and the learned position table).
"""
import math

from ..errors import Unmapped
from .common import autograd_variants, dropout_p, dtype_name, is_backward, need, operator_plan, operator_variants, positive_int, randn, torch_dtype

PREFIX = "embedding"
PADDING_IDX = 1  # suites/operators/embedding.cu's config.padding_idx


def sinusoidal_table(torch, num_positions, hidden, dtype):
    """reference/embedding.h's table: all sines, then all cosines; an odd H leaves the last column 0."""
    half = hidden // 2
    table = torch.zeros(num_positions, hidden, device="cuda", dtype=torch.float32)
    if half > 0:
        step = math.log(10000.0) / (half - 1) if half > 1 else 0.0
        freq = torch.exp(torch.arange(half, device="cuda", dtype=torch.float32) * -step)
        angle = torch.arange(num_positions, device="cuda", dtype=torch.float32)[:, None] * freq[None, :]
        table[:, :half] = torch.sin(angle)
        table[:, half:2 * half] = torch.cos(angle)
    return table.to(dtype)


def plan(experiment):
    p = experiment.params
    batch, seq, hidden, vocab = (positive_int(k, v) for k, v in zip(("batch", "seq_len", "hidden", "vocab"),
                                                                    need(p, "batch", "seq_len", "hidden", "vocab")))
    (positions,) = need(p, "positions")
    if positions not in ("sinusoidal/nonpad_count", "learned/slot"):
        raise Unmapped(f"params.positions {positions!r} is not sinusoidal/nonpad_count or learned/slot")
    learned = positions.startswith("learned")
    drop = dropout_p(p)
    share = float(p.get("padding_share", 0.0))
    scale = math.sqrt(hidden)
    dtype = dtype_name(p)
    backward = is_backward(experiment)

    def build(torch):
        import torch.nn.functional as F

        dt = torch_dtype(torch, dtype)
        table = randn(torch, (vocab, hidden), dt, 0.02)
        ids = torch.randint(0, vocab, (batch, seq), device="cuda")
        ids[ids == PADDING_IDX] = (PADDING_IDX + 1) % vocab
        ids[torch.rand(batch, seq, device="cuda") < share] = PADDING_IDX
        pos_table = randn(torch, (seq, hidden), dt, 0.02) if learned else sinusoidal_table(torch, seq + 1, hidden, dt)

        def forward(table, ids, pos_table):
            mask = ids.ne(PADDING_IDX)
            if learned:
                pos = F.embedding(torch.arange(seq, device=ids.device).expand(batch, seq), pos_table)
            else:
                pos = F.embedding(torch.cumsum(mask, dim=1) * mask, pos_table)
            y = F.embedding(ids, table, padding_idx=PADDING_IDX) * scale + pos
            y = y.masked_fill(~mask.unsqueeze(-1), 0)
            return F.dropout(y, drop, training=True) if drop > 0 else y

        if not backward:
            return operator_variants(torch, forward, (table, ids, pos_table))
        return autograd_variants(torch, forward, (table, ids, pos_table), wrt=(0, 2) if learned else (0,))

    # The autograd-based backward is captured on its forward's stream (common.autograd_variants).
    return operator_plan(build)
