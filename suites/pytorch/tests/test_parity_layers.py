"""The layers suite's parity oracle, its pure parts (no torch): which oracle takes which dumped
layer experiment (the layers' embedding and criterion are not the operator families), the mapping
of seqbench's parameter names to the torch module's, the "<dtype>.<name>" groups, the parity
instance's spec and params, and the bound (n, k, the normwise rule)."""
import json
import os
import re
import unittest

from tests import support
from seqbench_torch import parity, parity_layers
from seqbench_torch.errors import RunnerError
from seqbench_torch.families import layers

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))


def contract(kind, direction="fwd", dtype="bf16", batch=32, seq_len=256):
    """A layers experiment's params as seqbench lists them (suites/layers/README.md), with a dump's parity_*."""
    p = {"layer": kind, "direction": direction, "dtype": dtype, "batch": batch, "seq_len": seq_len,
         "tokens": batch * seq_len, "parity_dropout": 0.0, "parity_batch": 1024 // seq_len, "parity_seq_len": seq_len,
         "parity_tokens": 1024, "parity_dtypes": [dtype, "f32"]}
    if kind in ("encoder", "decoder"):
        p.update(model="transformer-big", hidden=1024, ffn=4096, heads=16, pre_layer_norm=True, activation="relu",
                 attn_dropout=0.1, activation_dropout=0.1, hidden_dropout=0.3, layer_norm_eps=1e-5, max_batch_tokens=8192, max_seq_len=256)
        if kind == "decoder":
            p.update(src_len=seq_len, parity_src_len=seq_len)
    return p


def header_names(path, function):
    """The tensor names of layers/<path>'s for_each_*_tensor, in order."""
    with open(os.path.join(ROOT, "layers", path), encoding="utf-8") as f:
        text = f.read()
    body = text[text.index(f"void {function}("):]
    body = body[:body.index("\n}\n")]
    return re.findall(r'fn\("(\w+)"', body)


class WhichOracle(unittest.TestCase):
    def test_layers_suite_families(self):
        for name, (oracle, backward) in {
            "encoder_fwd/f16/B=256,L=32": (parity_layers.encoder_outputs, False),
            "decoder_bwd/bf16/B=32,L=256": (parity_layers.decoder_outputs, True),
            "embedding_bwd/bf16/B=64,L=128": (parity_layers.embedding_outputs, True),
            "criterion_fwd/f16/B=128,L=64": (parity_layers.criterion_outputs, False),
        }.items():
            self.assertEqual(parity.oracle_for(name, "layers"), (oracle, backward), name)
        self.assertEqual(parity.oracle_for("gemm_epilogue/bias_relu/f16/m=8192,n=4096,k=1024", "layers"),
                         (None, False))
        # The operators suite's embedding is the operator family, not the layer.
        self.assertIs(parity.oracle_for("embedding_fwd/f32/tokens=4096,H=1024,vocab=32000,learned", "operators")[0],
                      parity.embedding_outputs)

    def test_every_layer_experiment_that_dumps_has_its_oracle(self):
        result = support.run_seqbench("list", "--json")
        self.assertEqual(result.returncode, 0, result.stderr)
        suite = [s for s in json.loads(result.stdout)["suites"] if s["name"] == "layers"][0]
        dumping = [e for e in suite["experiments"] if e["dump_variant"] is not None]
        self.assertEqual(len(dumping), 4 * 2 * 2 * 4)  # layer x direction x dtype x length
        for e in dumping:
            self.assertEqual(e["dump_variant"], "managed", e["name"])
            oracle, _ = parity.oracle_for(e["name"], "layers")
            self.assertIs(oracle, parity_layers.LAYER_ORACLES[e["params"]["layer"]], e["name"])
        self.assertEqual(set(parity_layers.LAYER_ORACLES), set(layers.PREFIXES))


class ParameterNames(unittest.TestCase):
    def test_seqbench_names_in_the_layers_order(self):
        self.assertEqual([c for c, _ in parity_layers.PARAMETERS["encoder"]],
                         header_names("encoder_layer.h", "for_each_encoder_tensor"))
        self.assertEqual([c for c, _ in parity_layers.PARAMETERS["decoder"]],
                         header_names("decoder_layer.h", "for_each_decoder_tensor"))

    def test_every_module_parameter_once(self):
        for kind in ("encoder", "decoder"):
            spec = layers.transformer_spec(kind, contract(kind))
            want = {f"{name}.{p}" for name, *_ in spec.linears() for p in ("weight", "bias")}
            want |= {f"{norm}.{p}" for norm in spec.layer_norms() for p in ("weight", "bias")}
            got = [t for _, t in parity_layers.PARAMETERS[kind]]
            self.assertEqual(len(got), len(set(got)), kind)
            self.assertEqual(set(got), want, kind)

    def test_shapes_match_the_modules(self):
        """Each seqbench tensor's shape (the names say it) is its nn.Linear's [out, in] / [out]."""
        spec = layers.transformer_spec("decoder", contract("decoder"))
        linears = {name: (i, o) for name, i, o, _ in spec.linears()}
        mapping = dict(parity_layers.PARAMETERS["decoder"])
        self.assertEqual(linears[mapping["cross_kv_weight"].rsplit(".", 1)[0]], (1024, 2048))
        self.assertEqual(linears[mapping["self_qkv_weight"].rsplit(".", 1)[0]], (1024, 3072))
        self.assertEqual(linears[mapping["fc2_weight"].rsplit(".", 1)[0]], (4096, 1024))


class Instances(unittest.TestCase):
    def test_groups_by_dtype(self):
        groups = parity_layers.instances({"bf16.x": 1, "bf16.d_fc1_weight": 2, "f32.x": 3})
        self.assertEqual(groups, {"bf16": {"x": 1, "d_fc1_weight": 2}, "f32": {"x": 3}})

    def test_refuses_other_names(self):
        with self.assertRaisesRegex(RunnerError, "array 'x' is not named '<dtype>.<name>'"):
            parity_layers.instances({"x": 1})
        with self.assertRaisesRegex(RunnerError, "array 'f64.x'"):
            parity_layers.instances({"f64.x": 1})

    def test_parity_dropout_must_be_zero(self):
        parity_layers.check_parity_params({"parity_dropout": 0.0})
        parity_layers.check_parity_params({"parity_dropout": 0})
        with self.assertRaisesRegex(RunnerError, "parity_dropout is 0.3, expected 0"):
            parity_layers.check_parity_params({"parity_dropout": 0.3})
        with self.assertRaisesRegex(RunnerError, "parity_dropout is None"):
            parity_layers.check_parity_params({})


class ParitySpec(unittest.TestCase):
    def test_dumped_shape_dtype_and_no_dropout(self):
        s = parity_layers.transformer_parity_spec("decoder", contract("decoder"), "f32", (4, 256, 1024), 256)
        self.assertEqual((s.kind, s.dtype, s.batch, s.seq_len, s.src_len), ("decoder", "f32", 4, 256, 256))
        self.assertEqual((s.attn_dropout, s.activation_dropout, s.hidden_dropout), (0.0, 0.0, 0.0))
        self.assertEqual((s.hidden, s.ffn, s.heads, s.pre_layer_norm, s.activation), (1024, 4096, 16, True, "relu"))

    def test_bad_params_are_runner_errors(self):
        p = contract("encoder")
        p["activation"] = "swish"
        with self.assertRaisesRegex(RunnerError, "layers parity: params.activation 'swish'"):
            parity_layers.transformer_parity_spec("encoder", p, "bf16", (4, 256, 1024), 256)

    def test_operator_params_of_the_embedding_and_criterion(self):
        p = {"padding_idx": 1, "scale": 32.0, "position_offset": 2, "positions": "sinusoidal",
             "indexing": "nonpad_count", "dropout": 0.3, "vocab": 32000}
        self.assertEqual(parity_layers.embedding_operator_params(p, 1024, 32000),
                         {"hidden": 1024, "vocab": 32000, "padding_idx": 1, "scale": 32.0, "position_offset": 2,
                          "positions": "sinusoidal/nonpad_count", "p": 0.0})
        c = {"vocab": 32000, "padding_idx": 1, "convention": "fairseq", "epsilon": 0.1}
        self.assertEqual(parity_layers.criterion_operator_params(c),
                         {"vocab": 32000, "ignore_index": 1, "convention": "fairseq", "smoothing": 0.1})


class Bound(unittest.TestCase):
    def test_roundings_and_inner_dimensions(self):
        # encoder at the parity shape of L = 256: 4 sentences, k = max(3H, ffn, B·L, L) = ffn
        self.assertEqual(parity_layers.transformer_bound("encoder", False, 4, 256, 256, 1024, 4096),
                         parity_layers.LayerBound(16, 4096))
        self.assertEqual(parity_layers.transformer_bound("encoder", True, 32, 32, 32, 1024, 4096),
                         parity_layers.LayerBound(32, 4096))
        self.assertEqual(parity_layers.transformer_bound("decoder", True, 4, 256, 256, 1024, 4096),
                         parity_layers.LayerBound(52, 4096))
        self.assertEqual(parity_layers.transformer_bound("decoder", False, 1, 8, 9000, 64, 100),
                         parity_layers.LayerBound(26, 9000))  # the B·S rows of the cross K/V gradient

    def test_tolerance_model(self):
        b = parity_layers.LayerBound(16, 4096)
        self.assertEqual(b.tolerance("bf16"), 16 * (4 * 2.0 ** -8 + 3 * 4098 * 2.0 ** -24))
        self.assertEqual(b.tolerance("f32"), 16 * (4 * 2.0 ** -24 + 3 * 4098 * 2.0 ** -24))
        self.assertLess(b.tolerance("f32"), b.tolerance("f16"))
        self.assertLess(b.tolerance("f16"), b.tolerance("bf16"))
        self.assertIn("n = 16", b.describe())

    def test_relu_margin_is_described_not_used(self):
        params = {"parity_relu_margin": {"f16": 2.0 ** -11 * 2.5, "f32": 1e-3}}
        self.assertEqual(parity_layers.relu_margin_units(params, "f16"), 2.5)
        self.assertEqual(parity_layers.relu_margin_units(params, "f32"), 1e-3 * 2.0 ** 24)
        self.assertIsNone(parity_layers.relu_margin_units(params, "bf16"))
        self.assertIsNone(parity_layers.relu_margin_units({}, "f16"))  # a dump from before the centring
        b = parity_layers.LayerBound(16, 4096, 2.5)
        self.assertEqual(b, parity_layers.LayerBound(16, 4096))
        self.assertEqual(b.tolerance("f16"), parity_layers.LayerBound(16, 4096).tolerance("f16"))
        self.assertIn("at least 2.5 u_T from 0", b.describe())
        self.assertNotIn("u_T from 0", parity_layers.LayerBound(16, 4096).describe())

    def test_normwise_rule(self):
        b = parity_layers.LayerBound(16, 4096)
        tol = b.tolerance("f16")
        eta = parity_layers.UNDERFLOW["f16"]
        self.assertEqual(parity_layers.normwise_check(tol * 3.0, 3.0, "f16", b), (True, tol, tol + eta / 3.0))
        self.assertFalse(parity_layers.normwise_check(tol * 3.0 * 1.01, 3.0, "f16", b)[0])
        self.assertFalse(parity_layers.normwise_check(float("nan"), 3.0, "f16", b)[0])
        # An all-zero output is held to η_T alone.
        self.assertEqual(parity_layers.normwise_check(2.0 ** -26, 0.0, "f16", b), (True, 2.0 ** -26, eta))
        self.assertFalse(parity_layers.normwise_check(2.0 ** -24, 0.0, "f16", b)[0])
        # The reported pair reads as the verdict, also where max|torch| is tiny and η_T dominates
        # (the ratio was shown above a tolerance of tol alone on a passing check).
        for err, scale in ((2.0 ** -26, 2.0 ** -20), (2.0 ** -25, 2.0 ** -30), (tol * 3.0, 3.0),
                           (tol * 3.1, 3.0), (1e-9, 1e-6)):
            passed, ratio, reported = parity_layers.normwise_check(err, scale, "f16", b)
            self.assertEqual(passed, ratio <= reported, (err, scale, ratio, reported))

    def test_criterion_totals_and_counts(self):
        self.assertEqual(parity_layers.criterion_totals_roundings(32000, 1024), 32000 + 16 + 1024)
        self.assertEqual(parity.tolerance("i32", 0), 0.0)  # counted_tokens: exact


if __name__ == "__main__":
    unittest.main()
