"""The layers suite (suites/layers/, LightSeq2 Fig. 19): each layer as PyTorch users build it today,
from nn modules with F.scaled_dot_product_attention, in training mode (dropout on), with module
weights in the experiment's dtype (module.to(dtype): the C++ layers keep everything in it too).

encoder_{fwd,bwd}    TransformerLayer(causal=False): pre-LN  x1 = x + drop_h(attn(LN(x)))
                                                             y  = x1 + drop_h(fc2(drop_a(act(fc1(LN(x1))))))
                     post-LN moves each LayerNorm after its residual add (params.pre_layer_norm).
                     Attention: one fused QKV nn.Linear(H, 3H) (the C++ layer's one QKV GEMM), heads
                     as views, SDPA(dropout_p=attn_dropout, is_causal), nn.Linear(H, H) out.
decoder_{fwd,bwd}    the same with a causal self-attention, then a cross-attention over encoder_out
                     [B, S, H] (S = params.src_len) with its own Q nn.Linear(H, H) and fused K/V
                     nn.Linear(H, 2H), then the FFN; three LayerNorms.
embedding_{fwd,bwd}  fairseq's input embedding: nn.Embedding(vocab, H, padding_idx) · scale +
                     sinusoidal positions (fairseq's table, its padding row zero) indexed as fairseq's
                     make_positions (offset + non-padding tokens before the slot; padding -> the
                     zero row), nn.Dropout; padded rows come out zero.
criterion_{fwd,bwd}  fairseq's label-smoothed cross entropy on logits [tokens, vocab]:
                     F.cross_entropy(logits.float(), targets, label_smoothing = ε·V/(V-1) (the
                     cross_entropy family's conversion), ignore_index = padding_idx,
                     reduction="none") -> per-token loss, and its sum. The loss in fp32, as fairseq
                     (log_softmax(x.float())) and torch.autocast (cross_entropy is on its fp32 list)
                     compute it.

Forward experiments time the module's training forward: parameters (and the inputs a layer
differentiates: x, encoder_out, logits) require grad, so autograd records its graph and keeps
what the backward needs, as in training. Backward experiments run that forward once in build()
(eager, and compiled) and time torch.autograd.grad(output, [inputs..., parameters...], dout,
retain_graph=True) with dout a fixed random tensor (criterion: the loss sum, dout = 1): fresh
gradients each call, as the C++ layers overwrite theirs. torch.compile compiles the module
(dynamic=False, fullgraph=True); its backward is AOTAutograd's compiled backward graph.
No CUDA graph: a layer is not a single small op (policy in cli/measure: only operators are
captured); launch overhead is part of what an eager layer costs.

Everything above the torch code is pure Python (parsing, shapes, positions, padding), tested on a
CPU without torch.
"""
import math
from dataclasses import dataclass

from ..errors import Unmapped
from . import cross_entropy
from . import embedding as operator_embedding
from .common import COMPILE, EAGER, Plan, dtype_name, need, positive_int, torch_dtype

PREFIXES = ("encoder", "decoder", "embedding", "criterion")
TRANSFORMER_LAYERS = ("encoder", "decoder")
# params.activation (layers::activation_name) -> F.gelu's approximate; relu has none.
ACTIVATIONS = {"relu": None, "gelu": "none", "gelu_tanh": "tanh"}
POSITIONS = ("sinusoidal",)
INDEXINGS = ("nonpad_count", "slot")
DEVICE = "cuda"


# --- parsing (pure) -----------------------------------------------------------------------------


def layer_kind(experiment):
    """(kind, backward) from the name "<kind>_<fwd|bwd>/...", checked against params.layer and
    params.direction; Unmapped for a family this module does not know (a future layer)."""
    family = experiment.family
    kind, _, direction = family.rpartition("_")
    if kind not in PREFIXES or direction not in ("fwd", "bwd"):
        raise Unmapped(f"no torch equivalent for family '{family}'")
    layer, stated = need(experiment.params, "layer", "direction")
    if layer != kind:
        raise Unmapped(f"params.layer {layer!r} contradicts the name's '{kind}'")
    if stated != direction:
        raise Unmapped(f"params.direction {stated!r} contradicts the name's '{direction}'")
    return kind, direction == "bwd"


def batch_shape(params):
    """(batch, seq_len, tokens), with tokens = batch·seq_len as the contract says."""
    batch, seq_len, tokens = (positive_int(k, v) for k, v in zip(("batch", "seq_len", "tokens"),
                                                                 need(params, "batch", "seq_len", "tokens")))
    if tokens != batch * seq_len:
        raise Unmapped(f"params.tokens = {tokens} is not batch·seq_len = {batch * seq_len}")
    return batch, seq_len, tokens


def ratio(params, key):
    """A dropout ratio or padding fraction in [0, 1)."""
    (value,) = need(params, key)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value < 1.0:
        raise Unmapped(f"params.{key} = {value!r} is outside [0, 1)")
    return float(value)


def flag(params, key):
    (value,) = need(params, key)
    if not isinstance(value, bool):
        raise Unmapped(f"params.{key} = {value!r} is not a boolean")
    return value


def gelu_approximate(activation):
    """F.gelu's approximate for params.activation ("gelu" erf -> "none", "gelu_tanh" -> "tanh");
    None for relu."""
    if activation not in ACTIVATIONS:
        raise Unmapped(f"params.activation {activation!r} is not one of {', '.join(ACTIVATIONS)}")
    return ACTIVATIONS[activation]


@dataclass(frozen=True)
class TransformerSpec:
    kind: str  # "encoder" or "decoder"
    dtype: str
    batch: int
    seq_len: int
    src_len: int  # the decoder's encoder_out length S; seq_len for the encoder (unused)
    hidden: int
    ffn: int
    heads: int
    pre_layer_norm: bool
    activation: str
    attn_dropout: float
    activation_dropout: float
    hidden_dropout: float
    eps: float  # params.layer_norm_eps (layers::LayerConfig::layer_norm_eps)

    @property
    def head_dim(self):
        return self.hidden // self.heads

    @property
    def causal(self):
        """The (self-)attention masks future tokens: the decoder's; the encoder's is unmasked."""
        return self.kind == "decoder"

    def input_shapes(self):
        """{name: shape} of the inputs: x [B, L, H], and the decoder's encoder_out [B, S, H]."""
        shapes = {"x": (self.batch, self.seq_len, self.hidden)}
        if self.kind == "decoder":
            shapes["encoder_out"] = (self.batch, self.src_len, self.hidden)
        return shapes

    def linears(self):
        """(name, in_features, out_features, rows) of each nn.Linear, in the C++ layer's parameter
        order; rows = the token rows it projects (B·S for the cross K/V, else B·L)."""
        H, F, T = self.hidden, self.ffn, self.batch * self.seq_len
        out = [("self_attn.qkv_proj", H, 3 * H, T), ("self_attn.out_proj", H, H, T)]
        if self.kind == "decoder":
            out += [("cross_attn.q_proj", H, H, T), ("cross_attn.kv_proj", H, 2 * H, self.batch * self.src_len),
                    ("cross_attn.out_proj", H, H, T)]
        return out + [("ffn.fc1", H, F, T), ("ffn.fc2", F, H, T)]

    def layer_norms(self):
        return ("self_norm", "cross_norm", "ffn_norm") if self.kind == "decoder" else ("self_norm", "ffn_norm")

    def parameter_count(self):
        return sum(i * o + o for _, i, o, _ in self.linears()) + 2 * self.hidden * len(self.layer_norms())

    def gemm_flops(self, backward):
        """GEMM FLOPs of one forward (backward: twice as many), counted as suites/suite_layers.h
        counts the encoder's: 2·rows·in·out per projection, plus 4·B·L·K·H for the scores and the
        context of each attention over K keys (full L² for the causal one: as the C++ layer
        computes it; SDPA's causal kernels may skip the masked half)."""
        B, L, S, H = self.batch, self.seq_len, self.src_len, self.hidden
        flops = sum(2.0 * rows * i * o for _, i, o, rows in self.linears()) + 4.0 * B * L * L * H
        if self.kind == "decoder":
            flops += 4.0 * B * L * S * H
        return 2.0 * flops if backward else flops


def transformer_spec(kind, params):
    batch, seq_len, _ = batch_shape(params)
    hidden, ffn, heads = (positive_int(k, v) for k, v in zip(("hidden", "ffn", "heads"),
                                                              need(params, "hidden", "ffn", "heads")))
    if hidden % heads:
        raise Unmapped(f"params.hidden {hidden} is not a multiple of params.heads {heads}")
    (activation,) = need(params, "activation")
    gelu_approximate(activation)
    src_len = positive_int("src_len", need(params, "src_len")[0]) if kind == "decoder" else seq_len
    (eps,) = need(params, "layer_norm_eps")
    if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not math.isfinite(eps) or eps <= 0:
        raise Unmapped(f"params.layer_norm_eps = {eps!r} is not a positive finite number")
    return TransformerSpec(kind, dtype_name(params), batch, seq_len, src_len, hidden, ffn, heads,
                           flag(params, "pre_layer_norm"), activation, ratio(params, "attn_dropout"),
                           ratio(params, "activation_dropout"), ratio(params, "hidden_dropout"), float(eps))


@dataclass(frozen=True)
class EmbeddingSpec:
    dtype: str
    batch: int
    seq_len: int
    vocab: int
    hidden: int
    padding_idx: int
    indexing: str
    position_offset: int
    scale: float
    dropout: float
    pad_fraction: float
    pads: tuple = ()  # padded slots at each sentence's tail (pad_counts)

    def position_rows(self):
        """Rows of the sinusoidal table: positions offset .. offset + L - 1, and the padding row."""
        return max(self.position_offset + self.seq_len, self.padding_idx + 1)


def embedding_spec(params, inputs=None):
    batch, seq_len, _ = batch_shape(params)
    vocab, hidden = (positive_int(k, v) for k, v in zip(("vocab", "hidden"), need(params, "vocab", "hidden")))
    padding_idx, positions, indexing, offset, scale = need(params, "padding_idx", "positions", "indexing",
                                                           "position_offset", "scale")
    if positions not in POSITIONS:
        raise Unmapped(f"params.positions {positions!r} is not one of {', '.join(POSITIONS)}")
    if indexing not in INDEXINGS:
        raise Unmapped(f"params.indexing {indexing!r} is not one of {', '.join(INDEXINGS)}")
    check_padding_idx(padding_idx, vocab)
    if isinstance(offset, bool) or not isinstance(offset, int) or offset <= padding_idx:
        # Padded slots index the table's zero row padding_idx: no real position may land on it.
        raise Unmapped(f"params.position_offset = {offset!r} is not an integer above padding_idx {padding_idx}")
    if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not math.isfinite(scale):
        raise Unmapped(f"params.scale = {scale!r} is not a finite number")
    fraction = ratio(params, "pad_fraction")
    return EmbeddingSpec(dtype_name(params), batch, seq_len, vocab, hidden, padding_idx, indexing, offset,
                         float(scale), ratio(params, "dropout"), fraction,
                         pad_counts(batch, seq_len, fraction, inputs))


@dataclass(frozen=True)
class CriterionSpec:
    dtype: str
    batch: int
    seq_len: int
    vocab: int
    padding_idx: int
    label_smoothing: float  # torch's, from (convention, epsilon)
    pad_fraction: float
    pads: tuple = ()  # padded slots at each sentence's tail (pad_counts)

    @property
    def rows(self):
        return self.batch * self.seq_len


def criterion_spec(params, inputs=None):
    batch, seq_len, _ = batch_shape(params)
    vocab = positive_int("vocab", need(params, "vocab")[0])
    epsilon, convention, padding_idx = need(params, "epsilon", "convention", "padding_idx")
    check_padding_idx(padding_idx, vocab)
    alpha = cross_entropy.torch_label_smoothing(convention, float(epsilon), vocab)
    if not 0.0 <= alpha <= 1.0:
        raise Unmapped(f"label smoothing {alpha} (from {convention} {epsilon}) is outside [0, 1]")
    fraction = ratio(params, "pad_fraction")
    return CriterionSpec(dtype_name(params), batch, seq_len, vocab, padding_idx, alpha, fraction,
                         pad_counts(batch, seq_len, fraction, inputs))


def check_padding_idx(padding_idx, vocab):
    if isinstance(padding_idx, bool) or not isinstance(padding_idx, int) or not 0 <= padding_idx < vocab:
        raise Unmapped(f"params.padding_idx = {padding_idx!r} is outside [0, vocab {vocab})")
    if first_token(padding_idx) >= vocab:
        raise Unmapped(f"params.vocab {vocab} leaves no token id above the special ones "
                       f"(from {first_token(padding_idx)})")


# --- the data (pure) ----------------------------------------------------------------------------


def first_token(padding_idx):
    """The lowest id drawn for a real token: 2 with fairseq's specials (bos 0, pad 1), above the
    padding index in general."""
    return max(2, padding_idx + 1)


def tail_pad_counts(batch, seq_len, pad_fraction):
    """Padded slots at the tail of each sentence: round(pad_fraction·B·L) in all, spread as evenly
    as integers allow (sentence b gets floor((b+1)·P/B) - floor(b·P/B)), each sentence keeping at
    least one real token."""
    total = min(round(pad_fraction * batch * seq_len), batch * (seq_len - 1))
    return [(b + 1) * total // batch - b * total // batch for b in range(batch)]


def pad_counts(batch, seq_len, pad_fraction, inputs=None):
    """Padded slots at the tail of each sentence, as a tuple: from the experiment's
    inputs.sentence_lengths (the kept lengths seqbench drew, so both sides pad the same slots) when
    it lists them, else tail_pad_counts. Lengths must number `batch`, each in [1, seq_len]."""
    lengths = (inputs or {}).get("sentence_lengths")
    if lengths is None:
        return tuple(tail_pad_counts(batch, seq_len, pad_fraction))
    if not isinstance(lengths, (list, tuple)) or len(lengths) != batch:
        raise Unmapped(f"inputs.sentence_lengths has {len(lengths) if isinstance(lengths, (list, tuple)) else '?'} "
                       f"entries, expected batch = {batch}")
    for b, n in enumerate(lengths):
        if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= seq_len:
            raise Unmapped(f"inputs.sentence_lengths[{b}] = {n!r} is outside [1, seq_len {seq_len}]")
    return tuple(seq_len - n for n in lengths)


def positions_of(row, padding_idx, offset, indexing="nonpad_count"):
    """The position index of each slot of one sentence, as the torch forward computes it
    (fairseq's make_positions for offset = padding_idx + 1): a real token at slot l gets
    offset + (real tokens before l) (nonpad_count) or offset + l (slot); padding gets
    padding_idx, the sinusoidal table's zero row."""
    out, seen = [], 0
    for slot, token in enumerate(row):
        if token == padding_idx:
            out.append(padding_idx)
            continue
        out.append(offset + (seen if indexing == "nonpad_count" else slot))
        seen += 1
    return out


# --- plans --------------------------------------------------------------------------------------


def plan(experiment):
    kind, backward = layer_kind(experiment)
    params = experiment.params
    if kind in TRANSFORMER_LAYERS:
        spec = transformer_spec(kind, params)
        build = lambda torch: _transformer_works(torch, spec, backward)  # noqa: E731
    elif kind == "embedding":
        spec = embedding_spec(params, experiment.inputs)
        build = lambda torch: _embedding_works(torch, spec, backward)  # noqa: E731
    else:
        spec = criterion_spec(params, experiment.inputs)
        build = lambda torch: _criterion_works(torch, spec, backward)  # noqa: E731
    note = ("autograd backward of one training forward (retain_graph), no CUDA graph" if backward else
            "training forward (dropout on, autograd records), no CUDA graph")
    if kind == "criterion":
        # Said in the report, since it moves more bytes than seqbench's criterion does (seqbench's
        # baseline keeps the log-probabilities in the logits' dtype; its fused kernel reads them once
        # and computes in fp32 registers): eager writes an fp32 copy of the logits, and its gradient
        # comes back through that copy. torch.compile fuses the cast away.
        note += "; logits upcast to fp32 before the loss (fairseq's and autocast's recipe)"
    return Plan((EAGER, COMPILE), False, build, note=note)


# --- torch (needs torch and a CUDA device) --------------------------------------------------------

_MODULES = {}


def _modules(torch):
    """The nn.Module classes, defined once per torch (this file imports without torch)."""
    if "classes" in _MODULES:
        return _MODULES["classes"]
    nn = torch.nn
    F = torch.nn.functional

    class Attention(nn.Module):
        """Multi-head attention through SDPA. Self: one fused QKV projection; cross: a Q projection
        of x and a fused K/V projection of the memory. Heads are views of the projections."""

        def __init__(self, hidden, heads, dropout, cross):
            super().__init__()
            self.heads, self.dropout, self.cross = heads, dropout, cross
            if cross:
                self.q_proj = nn.Linear(hidden, hidden)
                self.kv_proj = nn.Linear(hidden, 2 * hidden)
            else:
                self.qkv_proj = nn.Linear(hidden, 3 * hidden)
            self.out_proj = nn.Linear(hidden, hidden)

        def _heads(self, t, parts):  # [B, L, parts·H] -> parts × [B, N, L, d]
            b, length, width = t.shape
            return t.view(b, length, parts, self.heads, width // (parts * self.heads)).permute(2, 0, 3, 1, 4).unbind(0)

        def forward(self, x, memory, causal):
            if self.cross:
                (q,) = self._heads(self.q_proj(x), 1)
                k, v = self._heads(self.kv_proj(memory), 2)
            else:
                q, k, v = self._heads(self.qkv_proj(x), 3)
            ctx = F.scaled_dot_product_attention(q, k, v, dropout_p=self.dropout if self.training else 0.0,
                                                 is_causal=causal)
            b, n, length, d = ctx.shape
            return self.out_proj(ctx.transpose(1, 2).reshape(b, length, n * d))

    class FeedForward(nn.Module):
        def __init__(self, hidden, ffn, activation, dropout):
            super().__init__()
            self.fc1 = nn.Linear(hidden, ffn)
            approximate = gelu_approximate(activation)
            self.act = nn.ReLU() if approximate is None else nn.GELU(approximate=approximate)
            self.act_dropout = nn.Dropout(dropout)
            self.fc2 = nn.Linear(ffn, hidden)

        def forward(self, x):
            return self.fc2(self.act_dropout(self.act(self.fc1(x))))

    class TransformerLayer(nn.Module):
        """The encoder layer, or with a cross-attention the decoder layer (TransformerSpec)."""

        def __init__(self, spec):
            super().__init__()
            self.pre_layer_norm, self.causal = spec.pre_layer_norm, spec.causal
            self.self_attn = Attention(spec.hidden, spec.heads, spec.attn_dropout, cross=False)
            self.self_norm = nn.LayerNorm(spec.hidden, eps=spec.eps)
            self.cross_attn = self.cross_norm = None
            if spec.kind == "decoder":
                self.cross_attn = Attention(spec.hidden, spec.heads, spec.attn_dropout, cross=True)
                self.cross_norm = nn.LayerNorm(spec.hidden, eps=spec.eps)
            self.ffn = FeedForward(spec.hidden, spec.ffn, spec.activation, spec.activation_dropout)
            self.ffn_norm = nn.LayerNorm(spec.hidden, eps=spec.eps)
            self.hidden_dropout = nn.Dropout(spec.hidden_dropout)

        def _in(self, norm, x):  # the sub-layer's input
            return norm(x) if self.pre_layer_norm else x

        def _out(self, norm, x, y):  # the residual around it
            return x + self.hidden_dropout(y) if self.pre_layer_norm else norm(x + self.hidden_dropout(y))

        def forward(self, x, encoder_out=None):
            x = self._out(self.self_norm, x, self.self_attn(self._in(self.self_norm, x), None, self.causal))
            if self.cross_attn is not None:
                x = self._out(self.cross_norm, x, self.cross_attn(self._in(self.cross_norm, x), encoder_out, False))
            return self._out(self.ffn_norm, x, self.ffn(self._in(self.ffn_norm, x)))

    class Embedding(nn.Module):
        """fairseq's TransformerEncoder.forward_embedding with SinusoidalPositionalEmbedding."""

        def __init__(self, spec, table):
            super().__init__()
            self.padding_idx, self.offset, self.scale = spec.padding_idx, spec.position_offset, spec.scale
            self.nonpad_count = spec.indexing == "nonpad_count"
            self.embed_tokens = nn.Embedding(spec.vocab, spec.hidden, padding_idx=spec.padding_idx)
            nn.init.normal_(self.embed_tokens.weight, mean=0.0, std=spec.hidden ** -0.5)  # fairseq's Embedding()
            with torch.no_grad():
                self.embed_tokens.weight[spec.padding_idx].zero_()
            self.register_buffer("positions_table", table)  # [position_rows, H], row padding_idx zero
            self.dropout = nn.Dropout(spec.dropout)

        def forward(self, tokens):
            mask = tokens.ne(self.padding_idx)
            if self.nonpad_count:  # fairseq's make_positions (offset = padding_idx + 1)
                index = torch.cumsum(mask, dim=1) + (self.offset - 1)
            else:
                index = torch.arange(tokens.shape[1], device=tokens.device).expand_as(tokens) + self.offset
            positions = torch.where(mask, index, self.padding_idx)
            x = self.embed_tokens(tokens) * self.scale + F.embedding(positions, self.positions_table)
            return self.dropout(x)

    class Criterion(nn.Module):
        """fairseq's label_smoothed_cross_entropy (ignore padding), in fp32 as fairseq and autocast run it."""

        def __init__(self, spec):
            super().__init__()
            self.padding_idx, self.label_smoothing = spec.padding_idx, spec.label_smoothing

        def forward(self, logits, targets):
            loss = F.cross_entropy(logits.float(), targets, ignore_index=self.padding_idx,
                                   label_smoothing=self.label_smoothing, reduction="none")
            return loss, loss.sum()

    _MODULES["classes"] = (TransformerLayer, Embedding, Criterion)
    return _MODULES["classes"]


def _tokens(torch, batch, seq_len, vocab, padding_idx, pad_counts):
    """int64 [B, L]: ids uniform in [first_token, vocab), sentence b's last pad_counts[b] slots padded."""
    tokens = torch.randint(first_token(padding_idx), vocab, (batch, seq_len), device=DEVICE)
    pads = torch.tensor(pad_counts, device=DEVICE)
    tail = torch.arange(seq_len, device=DEVICE)[None, :] >= (seq_len - pads)[:, None]
    return tokens.masked_fill(tail, padding_idx)


def _module_works(torch, module, args, grad_args, backward, pick=lambda out: out, unit_dout=False):
    """{torch_eager, torch_compile} of a module in training mode. args[i] for i in grad_args and the
    parameters require grad. Forward: each work() runs the (eager or compiled) forward. Backward: the
    forward runs once here per variant; each work() is torch.autograd.grad(pick(out), inputs +
    parameters, dout, retain_graph=True), dout one fixed random tensor (unit_dout: ones)."""
    module.train()
    compiled = torch.compile(module, dynamic=False, fullgraph=True)
    leaves = tuple(a.detach().requires_grad_(True) if i in grad_args else a for i, a in enumerate(args))
    if not backward:
        return {EAGER: lambda: module(*leaves), COMPILE: lambda: compiled(*leaves)}
    wrt = [leaves[i] for i in grad_args] + [p for p in module.parameters() if p.requires_grad]
    works, dout = {}, None
    for name, fn in ((EAGER, module), (COMPILE, compiled)):
        out = pick(fn(*leaves))
        if dout is None:
            dout = torch.ones_like(out) if unit_dout else torch.randn(out.shape, device=DEVICE).to(out.dtype)

        def work(out=out):
            return torch.autograd.grad(out, wrt, dout, retain_graph=True)

        works[name] = work
    return works


def _transformer_works(torch, spec, backward):
    TransformerLayer, _, _ = _modules(torch)
    dt = torch_dtype(torch, spec.dtype)
    layer = TransformerLayer(spec).to(device=DEVICE, dtype=dt)
    shapes = spec.input_shapes()
    args = tuple(torch.randn(shapes[k], device=DEVICE).to(dt) for k in ("x", "encoder_out") if k in shapes)
    # dx (and d_encoder_out) and every parameter gradient, as the C++ backward writes them.
    return _module_works(torch, layer, args, tuple(range(len(args))), backward)


def _embedding_works(torch, spec, backward):
    _, Embedding, _ = _modules(torch)
    dt = torch_dtype(torch, spec.dtype)
    table = operator_embedding.sinusoidal_table(torch, spec.position_rows(), spec.hidden, dt)
    table[spec.padding_idx].zero_()  # fairseq's SinusoidalPositionalEmbedding.get_embedding
    module = Embedding(spec, table).to(device=DEVICE, dtype=dt)
    tokens = _tokens(torch, spec.batch, spec.seq_len, spec.vocab, spec.padding_idx, spec.pads)
    # Backward: d_token_table only (the positions are a buffer; the tokens are ids).
    return _module_works(torch, module, (tokens,), (), backward)


def _criterion_works(torch, spec, backward):
    _, _, Criterion = _modules(torch)
    dt = torch_dtype(torch, spec.dtype)
    logits = (torch.randn(spec.rows, spec.vocab, device=DEVICE) * 2.0).to(dt)
    targets = _tokens(torch, spec.batch, spec.seq_len, spec.vocab, spec.padding_idx, spec.pads).view(-1)
    # Backward: dlogits for grad_loss_sum = 1.
    return _module_works(torch, Criterion(spec), (logits, targets), (0,), backward, pick=lambda out: out[1],
                         unit_dout=True)
