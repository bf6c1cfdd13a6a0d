"""The parity oracle's pure parts: which oracle takes which dumped experiment, the float32 dropout
scale, the label-smoothing conversion, the sinusoid frequencies, the integer .npy arrays, and the
walk over dump folders (no torch: a family without an oracle never reaches it)."""
import json
import math
import os
import re
import struct
import unittest
from unittest import mock

from tests import support
from tests.test_npy import npy_bytes
from seqbench_torch import npy, parity
from seqbench_torch.errors import RunnerError


class OracleFor(unittest.TestCase):
    def test_every_dumping_family_has_an_oracle(self):
        names = {
            "layernorm_fwd/bf16/tokens=4096,hidden=1024": ("layernorm", False),
            "softmax_bwd/f32/bh=8x16,len=512": ("softmax", True),
            "cross_entropy_fwd/bf16/N=4096,V=32000": ("cross_entropy", False),
            "qkv_split_fwd/bf16/tokens=4096,L=512,H=1024,heads=16,P=3": ("qkv_split", False),
            "qkv_split_bwd/f32/tokens=4096,L=512,H=1024,heads=16,P=3": ("qkv_split", True),
            "merge_heads/bf16/tokens=4096,L=512,H=1024,heads=16,P=1": ("merge_heads", False),
            "dropout_bwd/bf16/elements=16777216": ("dropout", True),
            "bias_act_dropout_fwd/bf16/gelu_tanh/rows=4096,cols=1024": ("bias_act_dropout", False),
            "bias_dropout_residual_bwd/f32/rows=4096,cols=1024": ("bias_dropout_residual", True),
            "embedding_bwd/bf16/tokens=4096,H=1024,vocab=32000,learned": ("embedding", True),
        }
        for name, (key, backward) in names.items():
            oracle, bwd = parity.oracle_for(name)
            self.assertIs(oracle, parity.ORACLES[key], name)
            self.assertEqual(bwd, backward, name)

    def test_unknown_family_has_none(self):
        self.assertEqual(parity.oracle_for("adam/f32/params=1"), (None, False))
        self.assertEqual(parity.oracle_for("adam/f32/params=1", "trainer"), (None, False))
        # A suite's families are its own: the operator names mean nothing in another suite.
        self.assertEqual(parity.oracle_for("softmax_fwd/f32/bh=8x16,len=512", "trainer"), (None, False))


class RealList(unittest.TestCase):
    """Both sides agree: every operator experiment dumps (seqbench list --json's dump_variant) and
    every family that dumps has an oracle here."""

    def test_every_operator_experiment_dumps_to_an_oracle(self):
        result = support.run_seqbench("list", "--json")
        self.assertEqual(result.returncode, 0, result.stderr)
        doc = json.loads(result.stdout)
        operators = [s for s in doc["suites"] if s["name"] == "operators"][0]["experiments"]
        self.assertGreater(len(operators), 50)
        for e in operators:
            self.assertIsNotNone(e["dump_variant"], e["name"])
            self.assertIn(e["dump_variant"], [v["name"] for v in e["variants"]], e["name"])
            self.assertIsNotNone(parity.oracle_for(e["name"], "operators")[0], e["name"])
        for s in doc["suites"]:
            for e in s["experiments"]:
                if e["dump_variant"] is not None:
                    self.assertIsNotNone(parity.oracle_for(e["name"], s["name"])[0], f"{s['name']}/{e['name']}")


class DropoutScale(unittest.TestCase):
    def test_float32_as_the_kernels_form_it(self):
        self.assertEqual(parity.f32(0.1), struct.unpack("<f", struct.pack("<f", 0.1))[0])
        # 1/(1 - 0.1f) in float: 0.1f = 0x3DCCCCCD, 1 - 0.1f = 0x3F666666, its reciprocal 0x3F8E38E4.
        self.assertEqual(struct.pack("<f", parity.keep_scale(0.1)), struct.pack("<I", 0x3F8E38E4))
        self.assertEqual(parity.keep_scale(0.0), 1.0)
        self.assertEqual(parity.keep_scale(0.5), 2.0)
        self.assertEqual(parity.keep_scale(1.0), 0.0)  # everything dropped: 0, not inf


class LabelSmoothing(unittest.TestCase):
    def weights(self, ls, vocab):  # F.cross_entropy's target distribution
        return 1.0 - ls + ls / vocab, ls / vocab

    def test_fairseq_convention(self):
        for eps, vocab in ((0.1, 32000), (0.1, 2), (0.25, 7)):
            w_t, w_o = self.weights(parity.torch_label_smoothing("fairseq", eps, vocab), vocab)
            self.assertAlmostEqual(w_t, 1.0 - eps, places=15)
            self.assertAlmostEqual(w_o, eps / (vocab - 1), places=15)
        self.assertEqual(parity.torch_label_smoothing("fairseq", 0.1, 1), 0.0)

    def test_paper_convention(self):
        w_t, w_o = self.weights(parity.torch_label_smoothing("paper", 0.1, 100), 100)
        self.assertAlmostEqual(w_t, 1.0 - 0.1 + 0.1 / 100, places=15)
        self.assertAlmostEqual(w_o, 0.1 / 100, places=15)

    def test_unknown_convention(self):
        with self.assertRaisesRegex(RunnerError, "params.convention 'x' is not 'paper' or 'fairseq'"):
            parity.torch_label_smoothing("x", 0.1, 10)


class Sinusoids(unittest.TestCase):
    def test_reference_frequencies(self):
        self.assertEqual(parity.sinusoid_frequencies(1), [])
        self.assertEqual(parity.sinusoid_frequencies(3), [1.0])  # half = 1: the single frequency 1
        f = parity.sinusoid_frequencies(8)
        self.assertEqual(len(f), 4)
        self.assertEqual(f[0], 1.0)
        self.assertAlmostEqual(f[-1], 1e-4, places=15)  # 10000^-1 at k = half - 1
        self.assertAlmostEqual(f[1], 10000.0 ** (-1.0 / 3.0), places=15)


class IntegerArrays(unittest.TestCase):
    def test_reads_keep_masks_and_ids(self):
        descr, shape, payload = npy.parse(npy_bytes("|u1", (2, 3), bytes([1, 0, 1, 1, 1, 0])))
        self.assertEqual((descr, shape), ("|u1", (2, 3)))
        self.assertEqual(npy.values(descr, payload), [1, 0, 1, 1, 1, 0])
        descr, shape, payload = npy.parse(npy_bytes("<i4", (3,), struct.pack("<3i", 5, -1, 31999)))
        self.assertEqual(npy.values(descr, payload), [5, -1, 31999])
        with self.assertRaisesRegex(RunnerError, r"3 data bytes, shape \(2,\) needs 8"):
            npy.parse(npy_bytes("<i4", (2,), b"\0" * 3))


class Folders(support.ScratchTest):
    def write(self, experiment, schema="seqbench.dump/1"):
        folder = self.path("dump", "operators", experiment.replace("/", "_").replace(",", "_").replace("=", "_"))
        os.makedirs(folder)
        with open(os.path.join(folder, "manifest.json"), "w", encoding="utf-8") as f:
            json.dump({"schema": schema, "suite": "operators", "experiment": experiment, "params": {},
                       "variant": "fused", "arrays": []}, f)

    def test_no_oracle_no_torch(self):
        self.write("no_such_family_fwd/f32/n=1")
        self.assertEqual(parity.parity_checks(None, self.path("dump"), "operators", re.compile(".*")), [])
        self.assertEqual(parity.parity_checks(None, self.path("dump"), "trainer", re.compile(".*")), [])

    def test_filter_and_schema(self):
        self.write("softmax_fwd/f32/bh=1x1,len=8")
        self.assertEqual(parity.parity_checks(None, self.path("dump"), "operators", re.compile("layernorm")), [])
        self.write("x_fwd/f32/n=2", schema="seqbench.dump/2")
        self.assertEqual(parity.parity_checks(None, self.path("dump"), "operators", re.compile("nothing")), [])
        # Another schema is that experiment's failed check (D3), not the end of the run.
        (c,) = parity.parity_checks(None, self.path("dump"), "operators", re.compile("/x_fwd"))
        self.assertEqual((c["name"], c["experiment"], c["passed"]), ("x_fwd/f32/n=2 vs PyTorch ?", "x_fwd/f32/n=2", False))
        self.assertIn("expected schema 'seqbench.dump/1', got 'seqbench.dump/2'", c["detail"])

    def test_an_error_in_one_experiment_is_its_failed_check_and_the_others_run(self):
        self.write("softmax_fwd/f32/bh=1x1,len=8")
        self.write("softmax_fwd/f32/bh=1x1,len=16")
        errors, asked = [], []

        def oracle(torch, arrays, params, backward):
            raise RuntimeError("oracle blew up")

        with mock.patch.dict(parity.ORACLES, {"softmax": oracle}):
            checks = parity.parity_checks(None, self.path("dump"), "operators", re.compile(".*"),
                                          may_start=lambda e: asked.append(e) or True, on_error=errors.append)
        self.assertEqual([c["experiment"] for c in checks], ["softmax_fwd/f32/bh=1x1,len=16",
                                                             "softmax_fwd/f32/bh=1x1,len=8"])
        self.assertTrue(all(not c["passed"] and c["detail"] == "error: RuntimeError: oracle blew up" for c in checks))
        self.assertEqual(len(errors), 2)
        self.assertEqual(asked, [c["experiment"] for c in checks])

    def test_what_may_not_start_is_not_checked(self):
        self.write("softmax_fwd/f32/bh=1x1,len=8")
        self.assertEqual(parity.parity_checks(None, self.path("dump"), "operators", re.compile(".*"),
                                              may_start=lambda e: False), [])

    def test_a_dumped_output_no_oracle_computes_is_listed_unchecked(self):
        folder = self.path("dump", "operators", "e")
        os.makedirs(folder)
        arrays = [{"name": "x", "role": "input", "dtype": "f32", "file": "x.npy"},
                  {"name": "y", "role": "output", "dtype": "f32", "file": "y.npy"},
                  {"name": "y_extra", "role": "output", "dtype": "f32", "file": "y_extra.npy"}]
        with open(os.path.join(folder, "manifest.json"), "w", encoding="utf-8") as f:
            json.dump({"schema": "seqbench.dump/1", "experiment": "dropout_fwd/f32/n=1", "params": {"p": 0.0},
                       "arrays": arrays}, f)

        def oracle(torch, arrays_in, params, backward):
            self.assertEqual(list(arrays_in), ["x"])
            return {"z": (object(), 1)}  # computes an output nobody dumped: nothing to compare with

        with mock.patch.dict(parity.ORACLES, {"dropout": oracle}), \
                mock.patch.object(npy, "read", lambda path: ("<f4", (1,), b"")), \
                mock.patch.object(npy, "to_torch", lambda torch, descr, shape, payload, dtype, device="cuda": object()):
            checks = parity.parity_checks(None, self.path("dump"), "operators", re.compile(".*"))
        self.assertEqual([c["name"] for c in checks], ["dropout_fwd/f32/n=1 y vs PyTorch ?",
                                                       "dropout_fwd/f32/n=1 y_extra vs PyTorch ?"])
        for c in checks:
            self.assertFalse(c["passed"])
            self.assertTrue(c["unchecked"])
            self.assertIsNone(c["tolerance"])
            self.assertIn("no PyTorch oracle output has that name (the oracle computes: z;", c["detail"])

    def test_tolerance_of_elementwise_chains(self):
        self.assertEqual(parity.tolerance("f32", 1), 4 * 2.0 ** -24)
        self.assertLess(parity.tolerance("bf16", parity.ACTIVATION_ROUNDINGS["gelu_erf"]), 2.0 ** -6)
        self.assertTrue(math.isfinite(parity.tolerance("f16", 50257 + 16)))


if __name__ == "__main__":
    unittest.main()
