"""The experiment list as `seqbench list --json` prints it, and what each experiment maps to."""
import json
import unittest

from tests import support
from seqbench_torch import listing
from seqbench_torch.errors import RunnerError, Unmapped
from seqbench_torch.families import plan_for
from seqbench_torch.families.common import COMPILE, EAGER, FUSED


def experiment(suite, name, params, inputs=None, baseline="unfused"):
    return listing.Experiment(suite, name, params, baseline, (listing.Variant(baseline, 100.0, 0.0),), inputs or {})


class RealList(unittest.TestCase):
    """Every operator, trainer and layer experiment seqbench defines today maps; nothing is silently dropped."""

    @classmethod
    def setUpClass(cls):
        cls.suites = {s.name: s for s in listing.list_suites(support.seqbench_binary(), quick=False)}
        cls.quick = {s.name: s for s in listing.list_suites(support.seqbench_binary(), quick=True)}

    def test_parses_every_suite(self):
        self.assertIn("operators", self.suites)
        self.assertIn("trainer", self.suites)
        self.assertIn("layers", self.suites)
        self.assertGreater(len(self.suites["operators"].experiments), 50)
        self.assertLess(len(self.quick["operators"].experiments), len(self.suites["operators"].experiments))

    def test_every_known_family_maps(self):
        # cuBLASLt epilogue against separate kernel is a choice inside seqbench's own layers: there is
        # no torch program to compare with, and it must say so rather than map to something else.
        no_torch = ("gemm_epilogue",)
        for suite in ("operators", "trainer", "layers"):
            for e in self.suites[suite].experiments:
                if e.family in no_torch:
                    with self.assertRaisesRegex(Unmapped, "no torch equivalent"):
                        plan_for(e)
                    continue
                try:
                    plan = plan_for(e)
                except Unmapped as why:
                    self.fail(f"{suite}/{e.name}: {why}")
                self.assertEqual(plan.variants[0], EAGER, e.name)
                self.assertIn(COMPILE, plan.variants)
                # Every operator is a single small op, its autograd backwards included (captured on
                # their forward's stream); trainer steps and layers are launched directly.
                self.assertEqual(plan.cuda_graph, suite == "operators", e.name)
                if suite == "operators":
                    self.assertEqual(plan.note, "", e.name)  # nothing about them needs explaining

    def test_minimal_bytes_are_the_experiments(self):
        for e in self.suites["operators"].experiments:
            self.assertGreater(e.minimal.bytes, 0, e.name)
            self.assertTrue(all(v.bytes == e.minimal.bytes for v in e.variants), e.name)

    def test_layers_padding_follows_seqbench_lengths(self):
        from seqbench_torch.families import layers
        seen = 0
        for e in self.suites["layers"].experiments:
            if e.params.get("layer") not in ("embedding", "criterion"):
                continue
            seen += 1
            self.assertIn("sentence_lengths", e.inputs, e.name)
            spec = (layers.embedding_spec if e.params["layer"] == "embedding" else layers.criterion_spec)(
                e.params, e.inputs)
            self.assertEqual(len(spec.pads), e.params["batch"], e.name)
            share = sum(spec.pads) / (e.params["batch"] * e.params["seq_len"])
            self.assertAlmostEqual(share, e.params["pad_fraction"], places=5, msg=e.name)
        self.assertGreater(seen, 0)

    def test_operator_params_share_the_layers_vocabulary(self):
        # One vocabulary across suites (suites/layers/README.md): params.direction, never "pass";
        # seq_len, never "len"; and the LayerNorm experiments record the eps their kernels use.
        for e in self.suites["operators"].experiments:
            self.assertNotIn("pass", e.params, e.name)
            self.assertNotIn("len", e.params, e.name)
            backward = e.family.endswith("_bwd")
            self.assertEqual(e.params.get("direction"), "bwd" if backward else "fwd", e.name)
            if e.family.startswith("layernorm"):
                self.assertEqual(e.params.get("eps"), 1e-5, e.name)

    def test_calls_per_sample_come_from_seqbench(self):
        # Several calls a sample (each on its own copy) only for the operators' small experiments:
        # fewer bytes, more calls, never above the cap; the runner uses seqbench's numbers as they are.
        for suite in ("trainer", "layers"):
            self.assertTrue(all(e.calls_per_sample == 1 for e in self.suites[suite].experiments), suite)
        ops = sorted(self.suites["operators"].experiments, key=lambda e: e.minimal.bytes)
        self.assertGreater(ops[0].calls_per_sample, 1)
        self.assertEqual(ops[-1].calls_per_sample, 1)
        for small, large in zip(ops, ops[1:]):
            self.assertGreaterEqual(small.calls_per_sample, large.calls_per_sample, (small.name, large.name))
        self.assertTrue(all(1 <= e.calls_per_sample <= listing.MAX_CALLS_PER_SAMPLE for e in ops))

    def test_trainer_lists_its_tensors(self):
        for e in self.suites["trainer"].experiments:
            elements = e.inputs["tensor_elements"]
            self.assertEqual(sum(elements), e.params["parameters"], e.name)
            self.assertEqual(plan_for(e).variants, (EAGER, FUSED, COMPILE))


class ParseList(unittest.TestCase):
    def test_refuses_another_schema(self):
        with self.assertRaisesRegex(RunnerError, "expected schema 'seqbench.list/1', got 'seqbench.list/2'"):
            listing.parse_list({"schema": "seqbench.list/2", "suites": []})

    def test_refuses_a_broken_layout(self):
        with self.assertRaisesRegex(RunnerError, "unexpected layout"):
            listing.parse_list({"schema": "seqbench.list/1", "suites": [{"name": "x"}]})

    def test_calls_per_sample_is_checked(self):
        def doc(calls):
            e = {"name": "dropout_fwd/f32/elements=8", "params": {}, "baseline": "unfused",
                 "variants": [{"name": "unfused", "bytes": 64, "flops": 0}], "calls_per_sample": calls}
            return {"schema": "seqbench.list/1",
                    "suites": [{"name": "operators", "description": "", "needs_gpu": True, "experiments": [e]}]}

        self.assertEqual(listing.parse_list(doc(64))[0].experiments[0].calls_per_sample, 64)
        for bad in (0, 65, 2.0, "3", True, None):
            with self.assertRaisesRegex(RunnerError, r"operators/dropout_fwd/f32/elements=8: calls_per_sample .* is not "
                                                     r"an integer in 1\.\.64"):
                listing.parse_list(doc(bad))

    def test_inputs_are_optional(self):
        doc = {"schema": "seqbench.list/1", "suites": [{"name": "operators", "description": "", "needs_gpu": True,
               "experiments": [{"name": "dropout_fwd/f32/elements=8", "params": {"elements": 8, "p": 0.1, "dtype": "f32"},
                                "baseline": "unfused", "variants": [{"name": "unfused", "bytes": 64, "flops": 0}]}]}]}
        (suite,) = listing.parse_list(json.loads(json.dumps(doc)))
        self.assertEqual(suite.experiments[0].inputs, {})
        self.assertEqual(suite.experiments[0].calls_per_sample, 1)  # a list that predates the field
        self.assertEqual(suite.experiments[0].family, "dropout_fwd")


class Families(unittest.TestCase):
    def test_unknown_family_is_skipped_with_a_reason(self):
        with self.assertRaisesRegex(Unmapped, "no torch equivalent for family 'beam_search_fwd'"):
            plan_for(experiment("operators", "beam_search_fwd/f32/x", {"dtype": "f32"}))
        with self.assertRaisesRegex(Unmapped, "suite 'device' has no torch equivalent"):
            plan_for(experiment("device", "copy/16MiB", {}))

    def test_layernorm_takes_the_experiments_eps(self):
        from seqbench_torch.families.layernorm import layernorm_eps

        self.assertEqual(layernorm_eps({"eps": 1e-6}), 1e-6)
        for bad in (0.0, -1e-5, float("inf"), "1e-5", True):
            with self.assertRaisesRegex(Unmapped, "params.eps"):
                layernorm_eps({"eps": bad})

    def test_direction_says_backward(self):
        from seqbench_torch.families.common import is_backward

        for params, backward in (({"direction": "bwd"}, True), ({"direction": "fwd"}, False), ({}, False)):
            self.assertEqual(is_backward(experiment("operators", "merge_heads/f32/x", params)), backward, params)
        self.assertTrue(is_backward(experiment("operators", "dropout_bwd/f32/x", {})))

    def test_prefixes_pick_the_most_specific_family(self):
        from seqbench_torch.families import bias_act_dropout, dropout, module_for

        self.assertIs(module_for("operators", "bias_act_dropout_fwd"), bias_act_dropout)
        self.assertIs(module_for("operators", "dropout_bwd"), dropout)
        self.assertIsNone(module_for("operators", "dropoutx_fwd"))

    def test_missing_params_name_the_key(self):
        with self.assertRaisesRegex(Unmapped, "params lack 'hidden'"):
            plan_for(experiment("operators", "layernorm_fwd/f32/x", {"tokens": 4, "dtype": "f32"}))
        with self.assertRaisesRegex(Unmapped, "params lack 'eps'"):
            plan_for(experiment("operators", "layernorm_fwd/f32/x", {"tokens": 4, "hidden": 8, "dtype": "f32"}))
        with self.assertRaisesRegex(Unmapped, "params.dtype 'f64'"):
            plan_for(experiment("operators", "dropout_fwd/f64/x", {"elements": 4, "p": 0.1, "dtype": "f64"}))
        with self.assertRaisesRegex(Unmapped, "params.mask 'key_lengths'"):
            plan_for(experiment("operators", "softmax_fwd/f32/x", {"batch": 1, "heads": 1, "q_len": 2, "k_len": 2,
                                                                   "mask": "key_lengths", "dtype": "f32"}))
        with self.assertRaisesRegex(Unmapped, "inputs.tensor_elements is missing"):
            plan_for(experiment("trainer", "adam/x", {"optimizer": "adam", "lr": 1e-3, "loss_scale": 1.0,
                                                      "betas": [0.9, 0.98]}))
        adam = {"optimizer": "adam", "lr": 1e-3, "loss_scale": 1.0, "betas": [0.9, 0.98], "eps": 1e-8,
                "weight_decay": 0.0}
        sgd = {"optimizer": "sgd", "lr": 1e-3, "loss_scale": 1.0, "momentum": 0.9, "nesterov": False,
               "weight_decay": 0.0}
        for params, name, missing in ((adam, "adam/x", "eps"), (adam, "adam/x", "weight_decay"),
                                      (sgd, "sgd/x", "nesterov"), (sgd, "sgd/x", "momentum")):
            incomplete = {k: v for k, v in params.items() if k != missing}
            with self.assertRaisesRegex(Unmapped, f"params lack '{missing}'"):
                plan_for(experiment("trainer", name, incomplete, {"tensor_elements": [4, 8]}))
        for params, name in ((adam, "adam/x"), (sgd, "sgd/x")):
            plan_for(experiment("trainer", name, params, {"tensor_elements": [4, 8]}))
            plan_for(experiment("trainer", name, dict(params, max_grad_norm=0.0), {"tensor_elements": [4, 8]}))
            # Clipping is not mapped: timed without it, torch would do less work than seqbench.
            with self.assertRaisesRegex(Unmapped, "params.max_grad_norm 1.0: gradient clipping has no PyTorch"):
                plan_for(experiment("trainer", name, dict(params, max_grad_norm=1.0), {"tensor_elements": [4, 8]}))

    def test_cross_entropy_conventions_map_to_torch_label_smoothing(self):
        from seqbench_torch.families.cross_entropy import torch_label_smoothing

        self.assertEqual(torch_label_smoothing("paper", 0.1, 50), 0.1)
        self.assertAlmostEqual(torch_label_smoothing("fairseq", 0.1, 50), 0.1 * 50 / 49)
        self.assertEqual(torch_label_smoothing("fairseq", 0.1, 1), 0.0)
        with self.assertRaisesRegex(Unmapped, "params.convention 'hf' is not paper or fairseq"):
            torch_label_smoothing("hf", 0.1, 50)

    def test_new_families_refuse_incomplete_params(self):
        with self.assertRaisesRegex(Unmapped, "params lack 'convention'"):
            plan_for(experiment("operators", "cross_entropy_fwd/f32/x", {"rows": 8, "vocab": 50, "dtype": "f32"}))
        with self.assertRaisesRegex(Unmapped, "params.positions 'rotary'"):
            plan_for(experiment("operators", "embedding_fwd/f32/x",
                                {"batch": 2, "seq_len": 4, "vocab": 50, "hidden": 8, "p": 0.1, "dtype": "f32",
                                 "positions": "rotary"}))
        with self.assertRaisesRegex(Unmapped, "not a multiple of heads"):
            plan_for(experiment("operators", "qkv_split_fwd/f32/x",
                                {"batch": 2, "seq_len": 4, "hidden": 9, "heads": 2, "projections": 3, "dtype": "f32"}))


if __name__ == "__main__":
    unittest.main()
