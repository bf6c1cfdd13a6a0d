"""embedding_* (LightSeq2's embedding layer, suites/operators/embedding.cu): token lookup scaled by
sqrt(H), plus positions, padding rows zero, then dropout.

params: batch, seq_len, hidden, vocab, dtype, p, positions ("sinusoidal/nonpad_count" as fairseq, or
"learned/slot" as Hugging Face), padding_share, token_distribution, direction. The seqbench
experiments use padding index 1 and scale sqrt(hidden) (fairseq's embed_scale).

Token ids follow params.token_distribution as suites/operators/embedding.cu draws them, since the
backward's cost depends on them (frequent rows serialize atomics; the ",zipf" experiments exist for
that): each token is the padding id with probability padding_share, otherwise "uniform": uniform
over [0, vocab) (random_tokens; the padding id included, as there), or "zipf(s)": the vocab - 1
non-padding ids in a random order, rank r (from 0) drawn with weight (r + 1)^-s (zipf_tokens; its
weights and the padding rule exactly, with torch.multinomial over the same weights on the GPU). Not
seqbench's very ids: its mt19937_64 stream is not torch's. Another distribution is unmapped.

forward (eager, as fairseq runs it): mask = ids != pad; positions = cumsum(mask)·mask (nonpad
          count) or arange(L) (slot); y = F.embedding(ids, E, padding_idx)·scale + P[positions],
          masked_fill(~mask, 0), F.dropout;
backward: autograd with respect to E (and the learned position table).
"""
import math
import re

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


def token_distribution(params):
    """params.token_distribution: None for "uniform" (or absent, as in lists from before the key), the
    exponent s for "zipf(s)"; Unmapped for anything else."""
    text = params.get("token_distribution", "uniform")
    if text == "uniform":
        return None
    m = re.fullmatch(r"zipf\(([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\)", str(text))
    if not m or not float(m.group(1)) > 0:
        raise Unmapped(f"params.token_distribution {text!r} is not 'uniform' or 'zipf(s)' with s > 0")
    return float(m.group(1))


def zipf_rank_weights(count, exponent):
    """zipf_tokens' weights (suites/operators/embedding.cu): (r + 1)^-exponent for rank r < count,
    in double, as its cdf sums them."""
    return [float(r + 1) ** -exponent for r in range(count)]


def zipf_token_ids(torch, count, vocab, exponent):
    """`count` ids (int64, on the GPU) drawn as zipf_tokens draws its non-padding ones: ranks by
    those weights, each rank standing for one of the vocab - 1 non-padding ids in a random order."""
    ids = torch.tensor([i for i in range(vocab) if i != PADDING_IDX], dtype=torch.int64, device="cuda")
    order = ids[torch.randperm(vocab - 1, device="cuda")]
    weights = torch.tensor(zipf_rank_weights(vocab - 1, exponent), dtype=torch.float64, device="cuda")
    return order[torch.multinomial(weights, count, replacement=True)]


def draw_tokens(torch, batch, seq, vocab, share, exponent):
    """[batch, seq] token ids: uniform (exponent None) or Zipf, then a `share` of them padding."""
    if exponent is None:
        ids = torch.randint(0, vocab, (batch, seq), device="cuda")
    else:
        ids = zipf_token_ids(torch, batch * seq, vocab, exponent).view(batch, seq)
    ids[torch.rand(batch, seq, device="cuda") < share] = PADDING_IDX
    return ids


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
    exponent = token_distribution(p)
    if exponent is not None and vocab < 2:
        raise Unmapped(f"params.token_distribution zipf needs a non-padding id: vocab = {vocab}")
    scale = math.sqrt(hidden)
    dtype = dtype_name(p)
    backward = is_backward(experiment)

    def build(torch):
        import torch.nn.functional as F

        dt = torch_dtype(torch, dtype)
        table = randn(torch, (vocab, hidden), dt, 0.02)
        ids = draw_tokens(torch, batch, seq, vocab, share, exponent)
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
