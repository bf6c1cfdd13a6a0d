"""The layers suite's mapping (seqbench_torch/families/layers.py) against the contract in suites/layers/README.md: every
contract name maps to its layer, params are parsed and refused with the key named, and the pure
pieces (shapes, GEMM FLOPs, padding, positions, label smoothing) are right. No torch needed."""
import unittest

from tests import support
from seqbench_torch import listing
from seqbench_torch.errors import Unmapped
from seqbench_torch.families import cross_entropy, layers, module_for, plan_for
from seqbench_torch.families.common import COMPILE, EAGER

TRANSFORMER = {"model": "transformer-big", "hidden": 1024, "ffn": 4096, "heads": 16, "pre_layer_norm": True,
               "activation": "relu", "attn_dropout": 0.1, "activation_dropout": 0.1, "hidden_dropout": 0.3,
               "layer_norm_eps": 1e-5, "max_batch_tokens": 8192, "max_seq_len": 256}


def contract_params(kind, direction, dtype, batch, seq_len):
    """The params suites/layers/README.md promises for each layer."""
    p = {"layer": kind, "direction": direction, "dtype": dtype, "batch": batch, "seq_len": seq_len,
         "tokens": batch * seq_len}
    if kind in ("encoder", "decoder"):
        p.update(TRANSFORMER)
        p["gemm_flops"] = 1.0
        if kind == "decoder":
            p["src_len"] = seq_len
    elif kind == "embedding":
        p.update({"vocab": 32000, "hidden": 1024, "padding_idx": 1, "positions": "sinusoidal",
                  "indexing": "nonpad_count", "position_offset": 2, "scale": 32.0, "dropout": 0.3,
                  "deterministic_backward": True, "pad_fraction": 0.1})
    else:
        p.update({"vocab": 32000, "epsilon": 0.1, "convention": "fairseq", "padding_idx": 1, "pad_fraction": 0.1})
    return p


def layer_experiment(name, params):
    return listing.Experiment("layers", name, params, "baseline", (listing.Variant("baseline", 0.0, 1.0),
                                                                  listing.Variant("managed", 0.0, 1.0)))


def contract_experiment(kind="encoder", direction="fwd", dtype="f16", batch=64, seq_len=128, **changes):
    params = contract_params(kind, direction, dtype, batch, seq_len)
    for key, value in changes.items():
        if value is None:
            del params[key]
        else:
            params[key] = value
    return layer_experiment(f"{kind}_{direction}/{dtype}/B={batch},L={seq_len}", params)


class ContractNames(unittest.TestCase):
    def test_every_contract_name_maps_to_its_layer(self):
        for kind in layers.PREFIXES:
            for direction in ("fwd", "bwd"):
                for dtype in ("f16", "bf16"):
                    for seq_len in (32, 64, 128, 256):
                        e = contract_experiment(kind, direction, dtype, 8192 // seq_len, seq_len)
                        self.assertIs(module_for("layers", e.family), layers, e.name)
                        self.assertEqual(layers.layer_kind(e), (kind, direction == "bwd"))
                        plan = plan_for(e)
                        self.assertEqual(plan.variants, (EAGER, COMPILE), e.name)
                        self.assertFalse(plan.cuda_graph, e.name)  # a layer is not a single small op
                        self.assertFalse(plan.lazy, e.name)
                        self.assertIn("no CUDA graph", plan.note)
                        self.assertIn("retain_graph" if direction == "bwd" else "training forward", plan.note)

    def test_the_operator_embedding_keeps_its_own_module(self):
        from seqbench_torch.families import embedding

        self.assertIs(module_for("operators", "embedding_fwd"), embedding)
        self.assertIs(module_for("layers", "embedding_fwd"), layers)
        self.assertIsNone(module_for("layers", "layernorm_fwd"))

    def test_an_unknown_layer_is_skipped_with_a_reason(self):
        for name in ("gemm_epilogue/f16/bias_relu,M=8192", "gemm_epilogue_fwd/f16/x", "encoder_stack_fwd/f16/x",
                     "embedding_memory/f16/x", "criterion/f16/x", "attention_fwd/f16/x"):
            family = name.split("/")[0]
            with self.assertRaisesRegex(Unmapped, f"no torch equivalent for family '{family}'"):
                plan_for(layer_experiment(name, {"layer": "x", "direction": "fwd", "dtype": "f16"}))

    def test_name_and_params_must_agree(self):
        with self.assertRaisesRegex(Unmapped, "params.layer 'decoder' contradicts the name's 'encoder'"):
            plan_for(contract_experiment("encoder", layer="decoder"))
        with self.assertRaisesRegex(Unmapped, "params.direction 'bwd' contradicts the name's 'fwd'"):
            plan_for(layer_experiment("criterion_fwd/f16/B=1,L=8", contract_params("criterion", "bwd", "f16", 1, 8)))
        params = contract_params("embedding", "fwd", "f16", 1, 8)
        del params["direction"]
        with self.assertRaisesRegex(Unmapped, "params lack 'direction'"):
            plan_for(layer_experiment("embedding_fwd/f16/B=1,L=8", params))


class TransformerParams(unittest.TestCase):
    def spec(self, kind="encoder", **changes):
        return layers.transformer_spec(kind, contract_experiment(kind, **changes).params)

    def test_the_contract_config(self):
        s = self.spec()
        self.assertEqual((s.kind, s.dtype, s.batch, s.seq_len, s.hidden, s.ffn, s.heads, s.head_dim),
                         ("encoder", "f16", 64, 128, 1024, 4096, 16, 64))
        self.assertEqual((s.pre_layer_norm, s.activation, s.attn_dropout, s.activation_dropout, s.hidden_dropout),
                         (True, "relu", 0.1, 0.1, 0.3))
        self.assertEqual(s.eps, 1e-5)
        self.assertFalse(s.causal)  # the encoder: no mask
        self.assertEqual(s.input_shapes(), {"x": (64, 128, 1024)})
        self.assertEqual(s.layer_norms(), ("self_norm", "ffn_norm"))

    def test_the_decoder_is_causal_and_attends_over_the_source(self):
        s = self.spec("decoder", src_len=96)
        self.assertTrue(s.causal)
        self.assertEqual(s.input_shapes(), {"x": (64, 128, 1024), "encoder_out": (64, 96, 1024)})
        self.assertEqual(s.layer_norms(), ("self_norm", "cross_norm", "ffn_norm"))
        names = [n for n, _, _, _ in s.linears()]
        self.assertEqual(names, ["self_attn.qkv_proj", "self_attn.out_proj", "cross_attn.q_proj",
                                 "cross_attn.kv_proj", "cross_attn.out_proj", "ffn.fc1", "ffn.fc2"])
        kv = dict((n, (i, o, r)) for n, i, o, r in s.linears())["cross_attn.kv_proj"]
        self.assertEqual(kv, (1024, 2048, 64 * 96))  # its own K/V projection, over B·S rows
        with self.assertRaisesRegex(Unmapped, "params lack 'src_len'"):
            self.spec("decoder", src_len=None)

    def test_parameter_counts_match_the_cpp_layers_tensors(self):
        H, F = 1024, 4096
        # for_each_encoder_tensor: 2 LayerNorms, qkv [3H, H] + [3H], out, fc1, fc2.
        self.assertEqual(self.spec().parameter_count(), 4 * H + 3 * H * H + 3 * H + H * H + H + F * H + F + H * F + H)
        # for_each_decoder_tensor adds cross LN, q [H, H] + [H], kv [2H, H] + [2H], out [H, H] + [H].
        self.assertEqual(self.spec("decoder").parameter_count() - self.spec().parameter_count(),
                         2 * H + H * H + H + 2 * H * H + 2 * H + H * H + H)

    def test_encoder_gemm_flops_follow_suite_layers_h(self):
        s, T, B, L, H, F = self.spec(), 64 * 128, 64, 128, 1024, 4096
        forward = 2.0 * T * H * (3 * H + H + 2 * F) + 4.0 * B * L * L * H
        self.assertEqual(s.gemm_flops(False), forward)
        self.assertEqual(s.gemm_flops(True), 2 * forward)
        d = self.spec("decoder", src_len=96)
        S = 96
        self.assertEqual(d.gemm_flops(False), forward + 2.0 * T * H * 2 * H + 2.0 * B * S * H * 2 * H
                         + 4.0 * B * L * S * H)

    def test_activations(self):
        self.assertIsNone(layers.gelu_approximate("relu"))
        self.assertEqual(layers.gelu_approximate("gelu"), "none")  # layers::Activation::gelu is erf
        self.assertEqual(layers.gelu_approximate("gelu_tanh"), "tanh")
        for act in ("relu", "gelu", "gelu_tanh"):
            self.assertEqual(self.spec(activation=act).activation, act)
        with self.assertRaisesRegex(Unmapped, "params.activation 'gelu_erf' is not one of relu, gelu, gelu_tanh"):
            self.spec(activation="gelu_erf")

    def test_post_layer_norm_and_refusals(self):
        self.assertFalse(self.spec(pre_layer_norm=False).pre_layer_norm)
        cases = [({"pre_layer_norm": 1}, "params.pre_layer_norm = 1 is not a boolean"),
                 ({"heads": 5}, "params.hidden 1024 is not a multiple of params.heads 5"),
                 ({"tokens": 100}, r"params.tokens = 100 is not batch·seq_len = 8192"),
                 ({"attn_dropout": 1.0}, r"params.attn_dropout = 1.0 is outside \[0, 1\)"),
                 ({"hidden_dropout": -0.1}, r"params.hidden_dropout = -0.1 is outside \[0, 1\)"),
                 ({"activation_dropout": None}, "params lack 'activation_dropout'"),
                 ({"ffn": 0}, "params.ffn = 0 is not a positive integer"),
                 ({"dtype": "f64"}, "params.dtype 'f64'"),
                 ({"hidden": None}, "params lack 'hidden'"),
                 ({"layer_norm_eps": None}, "params lack 'layer_norm_eps'"),
                 ({"layer_norm_eps": 0.0}, "params.layer_norm_eps = 0.0 is not a positive finite number")]
        for changes, message in cases:
            with self.assertRaisesRegex(Unmapped, message, msg=str(changes)):
                plan_for(contract_experiment("encoder", **changes))


class EmbeddingParams(unittest.TestCase):
    def test_the_contract_config(self):
        s = layers.embedding_spec(contract_experiment("embedding").params)
        self.assertEqual((s.vocab, s.hidden, s.padding_idx, s.indexing, s.position_offset, s.scale, s.dropout,
                          s.pad_fraction), (32000, 1024, 1, "nonpad_count", 2, 32.0, 0.3, 0.1))
        self.assertEqual(s.position_rows(), 2 + 128)  # positions 2 .. 129; row 1 (padding) zero

    def test_refusals(self):
        cases = [({"positions": "learned"}, "params.positions 'learned' is not one of sinusoidal"),
                 ({"indexing": "cumsum"}, "params.indexing 'cumsum' is not one of nonpad_count, slot"),
                 ({"position_offset": 1}, "params.position_offset = 1 is not an integer above padding_idx 1"),
                 ({"padding_idx": 32000}, r"params.padding_idx = 32000 is outside \[0, vocab 32000\)"),
                 ({"vocab": 2}, "params.vocab 2 leaves no token id above the special ones"),
                 ({"scale": float("inf")}, "params.scale = inf is not a finite number"),
                 ({"pad_fraction": 1.0}, r"params.pad_fraction = 1.0 is outside \[0, 1\)"),
                 ({"dropout": None}, "params lack 'dropout'")]
        for changes, message in cases:
            with self.assertRaisesRegex(Unmapped, message, msg=str(changes)):
                plan_for(contract_experiment("embedding", **changes))

    def test_positions_are_fairseqs_make_positions(self):
        def make_positions(row, padding_idx):  # fairseq: cumsum(mask)·mask + padding_idx
            out, count = [], 0
            for t in row:
                mask = int(t != padding_idx)
                count += mask
                out.append(count * mask + padding_idx)
            return out

        rows = [[5, 6, 7, 1, 1], [9, 1, 8, 1, 4], [1, 1, 3], [3], [1]]
        for row in rows:
            self.assertEqual(layers.positions_of(row, 1, 2), make_positions(row, 1), row)
        self.assertEqual(layers.positions_of([5, 6, 7, 1, 1], 1, 2), [2, 3, 4, 1, 1])
        self.assertEqual(layers.positions_of([9, 1, 8], 1, 2, "slot"), [2, 1, 4])
        self.assertEqual(layers.positions_of([9, 0, 8], 0, 5), [5, 0, 6])

    def test_tail_padding(self):
        for batch, seq_len, fraction in ((256, 32, 0.1), (32, 256, 0.1), (3, 7, 0.3), (1, 1, 0.5), (64, 64, 0.0),
                                         (4, 2, 0.9)):
            pads = layers.tail_pad_counts(batch, seq_len, fraction)
            self.assertEqual(len(pads), batch)
            self.assertEqual(sum(pads), min(round(fraction * batch * seq_len), batch * (seq_len - 1)))
            self.assertTrue(all(0 <= p <= seq_len - 1 for p in pads), pads)  # every sentence keeps a token
            self.assertLessEqual(max(pads) - min(pads), 1)
        self.assertEqual(sum(layers.tail_pad_counts(256, 32, 0.1)), 819)
        self.assertEqual(layers.first_token(1), 2)  # tokens uniform in [2, vocab), as the contract says

    def test_sentence_lengths_from_the_list_decide_the_padding(self):
        # seqbench's own kept lengths win over the fraction: both sides pad the same slots.
        self.assertEqual(layers.pad_counts(3, 8, 0.1, {"sentence_lengths": [8, 5, 1]}), (0, 3, 7))
        self.assertEqual(layers.pad_counts(4, 10, 0.1), tuple(layers.tail_pad_counts(4, 10, 0.1)))
        self.assertEqual(layers.pad_counts(4, 10, 0.1, {}), tuple(layers.tail_pad_counts(4, 10, 0.1)))
        e = contract_experiment("embedding", batch=2, seq_len=4)
        lengths = {"sentence_lengths": [4, 2]}
        self.assertEqual(layers.embedding_spec(e.params, lengths).pads, (0, 2))
        c = contract_experiment("criterion", batch=2, seq_len=4)
        self.assertEqual(layers.criterion_spec(c.params, lengths).pads, (0, 2))
        for inputs, message in (({"sentence_lengths": [4]}, "has 1 entries, expected batch = 2"),
                                ({"sentence_lengths": [4, 0]}, r"sentence_lengths\[1\] = 0 is outside \[1, seq_len 4\]"),
                                ({"sentence_lengths": [5, 1]}, r"sentence_lengths\[0\] = 5 is outside"),
                                ({"sentence_lengths": [2, 1.5]}, r"sentence_lengths\[1\] = 1.5"),
                                ({"sentence_lengths": 3}, "has \\? entries")):
            with self.assertRaisesRegex(Unmapped, message):
                layers.pad_counts(2, 4, 0.1, inputs)


class CriterionParams(unittest.TestCase):
    def test_fairseq_epsilon_is_the_cross_entropy_familys_conversion(self):
        s = layers.criterion_spec(contract_experiment("criterion").params)
        self.assertIs(layers.cross_entropy.torch_label_smoothing, cross_entropy.torch_label_smoothing)
        self.assertAlmostEqual(s.label_smoothing, 0.1 * 32000 / 31999)
        self.assertEqual((s.rows, s.vocab, s.padding_idx, s.pad_fraction), (8192, 32000, 1, 0.1))
        paper = layers.criterion_spec(contract_experiment("criterion", convention="paper").params)
        self.assertEqual(paper.label_smoothing, 0.1)

    def test_refusals(self):
        cases = [({"convention": "hf"}, "params.convention 'hf' is not paper or fairseq"),
                 ({"epsilon": 1.5}, r"label smoothing .* is outside \[0, 1\]"),
                 ({"padding_idx": -1}, r"params.padding_idx = -1 is outside \[0, vocab 32000\)"),
                 ({"vocab": None}, "params lack 'vocab'"),
                 ({"pad_fraction": None}, "params lack 'pad_fraction'")]
        for changes, message in cases:
            with self.assertRaisesRegex(Unmapped, message, msg=str(changes)):
                plan_for(contract_experiment("criterion", **changes))


class RealLayersList(unittest.TestCase):
    """What `seqbench list --json` holds in the layers suite today maps, with the C++ GEMM count."""

    def test_every_layer_experiment_maps(self):
        for quick in (False, True):
            suites = {s.name: s for s in listing.list_suites(support.seqbench_binary(), quick=quick)}
            experiments = suites["layers"].experiments
            self.assertTrue(experiments)
            for e in experiments:
                try:
                    plan = plan_for(e)
                except Unmapped as why:  # only a layer this runner does not know yet may be skipped
                    if e.family.rpartition("_")[0] in layers.PREFIXES:
                        self.fail(f"layers/{e.name}: {why}")
                    continue
                kind, backward = layers.layer_kind(e)
                self.assertEqual(plan.variants, (EAGER, COMPILE), e.name)
                self.assertFalse(plan.cuda_graph, e.name)
                if kind == "encoder":  # the torch layer does the C++ layer's GEMMs
                    spec = layers.transformer_spec(kind, e.params)
                    self.assertEqual(spec.gemm_flops(backward), e.params["gemm_flops"], e.name)
                    self.assertEqual(e.minimal.flops, e.params["gemm_flops"], e.name)


if __name__ == "__main__":
    unittest.main()
