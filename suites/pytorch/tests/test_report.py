"""What the runner writes is a valid seqbench.report/1 document, by the C++ validator (`seqbench
table` reads every input through read_report), and joins into seqbench's tables."""
import copy
import json
import os
import stat
import unittest

from tests import support
from seqbench_torch import meta, report
from seqbench_torch.errors import RunnerError
from seqbench_torch.stats import summarize_samples

DEVICE = {"name": "NVIDIA H100 80GB HBM3", "compute_capability": "9.0", "sm_count": 132, "l2_bytes": 52428800,
          "memory_bytes": 85045870592, "clocks": {"sm_max_mhz": 1980, "memory_max_mhz": 2619},
          "driver": "13.0", "runtime": "13.0", "cublas": "13.0.0", "copy_gbps": None}
INFO = {"seqbench_version": "0.1.0", "git_sha": "3f5c2a9e8b7d6c5f4e3a2b1c0d9e8f7a6b5c4d3e", "git_dirty": False,
        "build": {"type": "Release", "flags": "-O3", "cuda_architectures": "90", "nvcc": "13.0"}, "device": DEVICE}
FRAMEWORKS = {"python": "3.11.7", "torch": "2.11.0", "torch_cuda": "13.0", "triton": "3.5.0", "cudnn": "91000",
              "numpy": None}
NAME = "layernorm_fwd/bf16/tokens=4096,hidden=1024"
PARAMS = {"tokens": 4096, "hidden": 1024, "dtype": "bf16"}


def experiment(variants, baseline, copy_gbps, nbytes=16781312.0):
    entry = {"name": NAME, "params": PARAMS, "baseline": baseline,
             "variants": [report.make_variant(n, summarize_samples(s), nbytes, 0.0, copy_gbps) for n, s in variants]}
    report.finalize_speedups(entry)
    return entry


def torch_report(copy_gbps=2950.0):
    doc = report.new_report("operators", meta.collect_meta(INFO, 1234, FRAMEWORKS, copy_gbps))
    doc["experiments"].append(experiment([("torch_eager", [0.031, 0.030, 0.032]),
                                          ("torch_compile", [0.0124, 0.0123, 0.0125])], "torch_eager", copy_gbps))
    doc["checks"].append(report.check("layernorm_fwd bf16 vs seqbench", True, 0.0039, None, 0.0078))
    doc["unmapped"].append({"experiment": "beam_search/x", "reason": "skipped: no torch equivalent"})
    return doc


def seqbench_report():
    """What `seqbench run` writes for the same experiment on the same device (no "runner")."""
    doc = copy.deepcopy(torch_report())
    for key in ("runner", "frameworks"):
        del doc["meta"][key]
    del doc["unmapped"]
    doc["checks"] = []
    doc["experiments"] = [experiment([("unfused", [0.0251]), ("fused", [0.0062])], "unfused", 2950.0)]
    return doc


class Report(support.ScratchTest):
    def write(self, name, doc):
        path = self.path(name)
        report.write_json_atomic(path, doc)
        return path

    def test_the_cpp_validator_accepts_it(self):
        for copy_gbps in (2950.0, None):
            path = self.write("pytorch-operators.json", torch_report(copy_gbps))
            done = support.run_seqbench("table", path)
            self.assertEqual(done.returncode, 0, done.stderr)
            self.assertIn("## operators (PyTorch 2.11.0) — NVIDIA H100 80GB HBM3", done.stdout)

    def test_without_a_device(self):
        info = dict(INFO, device=None)
        doc = report.new_report("operators", meta.collect_meta(info, 0, FRAMEWORKS, None))
        doc["experiments"].append(experiment([("torch_eager", [1.0])], "torch_eager", None))
        done = support.run_seqbench("table", self.write("r.json", doc))
        self.assertEqual(done.returncode, 0, done.stderr)

    def test_meta_records_runner_and_versions(self):
        m = torch_report()["meta"]
        self.assertEqual(m["runner"], "pytorch")
        self.assertEqual(m["frameworks"]["torch"], "2.11.0")
        self.assertEqual(m["device"]["copy_gbps"], 2950.0)
        self.assertRegex(m["timestamp"], r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")

    def test_the_cpp_validator_rejects_a_broken_one(self):
        doc = torch_report()
        doc["experiments"][0]["variants"][1]["speedup"] = 0
        done = support.run_seqbench("table", self.write("bad.json", doc))
        self.assertEqual(done.returncode, 1)
        self.assertIn("speedup: must be > 0", done.stderr)

    def test_seqbench_table_joins_the_speedup_columns(self):
        mine = self.write("operators.json", seqbench_report())
        torch = self.write("pytorch-operators.json", torch_report())
        done = support.run_seqbench("table", mine, torch)
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertIn("| speedup | vs torch eager | vs torch.compile |", done.stdout)
        # fused 0.0062 ms against torch eager 0.031 and torch.compile 0.0124.
        self.assertIn("| 4.05× | 5.00× | 2.00× |", done.stdout)
        alone = support.run_seqbench("table", mine)
        self.assertNotIn("vs torch", alone.stdout)

    def test_seqbench_table_joins_the_layers_suite(self):
        # A layer experiment: bytes 0 (GEMM-bound, no GB/s), GEMM FLOPs, variants baseline/managed.
        name, params, flops = "encoder_fwd/bf16/B=64,L=128", {"layer": "encoder", "dtype": "bf16"}, 1.0e11

        def layer_report(runner_variants, baseline, torch_side):
            doc = copy.deepcopy(torch_report())
            doc["suite"] = "layers"
            doc["checks"], doc["unmapped"] = [], []
            if not torch_side:
                for key in ("runner", "frameworks"):
                    del doc["meta"][key]
                del doc["unmapped"]
            entry = {"name": name, "params": params, "baseline": baseline,
                     "variants": [report.make_variant(n, summarize_samples(x), 0.0, flops, 2950.0)
                                  for n, x in runner_variants]}
            report.finalize_speedups(entry)
            doc["experiments"] = [entry]
            return doc

        mine = self.write("layers.json", layer_report([("baseline", [2.0]), ("managed", [1.0])], "baseline", False))
        torch = self.write("pytorch-layers.json",
                           layer_report([("torch_eager", [3.0]), ("torch_compile", [1.5])], "torch_eager", True))
        done = support.run_seqbench("table", mine, torch)
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertIn("## layers (PyTorch 2.11.0)", done.stdout)
        self.assertIn("| speedup | vs torch eager | vs torch.compile |", done.stdout)
        # managed 1.0 ms against baseline 2.0, torch eager 3.0 and torch.compile 1.5; 100 TFLOP/s.
        managed = next(line for line in done.stdout.splitlines() if "| managed |" in line)
        self.assertIn("| 100 | 2.00× | 3.00× | 1.50× |", managed)

    def test_rates_and_speedups(self):
        e = experiment([("torch_eager", [2.0]), ("torch_compile", [0.5])], "torch_eager", 1000.0, nbytes=2e9)
        eager, compiled = e["variants"]
        self.assertEqual((eager["gbps"], eager["pct_copy_bw"], eager["speedup"]), (1000.0, 100.0, 1.0))
        self.assertEqual((compiled["gbps"], compiled["speedup"]), (4000.0, 4.0))
        self.assertIsNone(eager["tflops"])
        with self.assertRaisesRegex(RunnerError, "baseline 'x' was not measured"):
            report.finalize_speedups({"name": "e", "baseline": "x", "variants": []})

    def test_check_entries_follow_the_null_rules(self):
        self.assertFalse(report.check("c", True, float("nan"), 0.0, 1.0)["passed"])
        self.assertIsNone(report.check("c", True, 0.1, float("inf"), 1.0)["max_rel_err"])
        self.assertTrue(report.check("c", True, 0.1, float("inf"), 1.0)["passed"])


class AtomicWrite(support.ScratchTest):
    def test_writes_the_document_and_no_temporary(self):
        path = self.path("r.json")
        report.write_json_atomic(path, {"a": 1})
        with open(path, encoding="utf-8") as f:
            self.assertEqual(json.load(f), {"a": 1})
        self.assertEqual(os.listdir(self.dir), ["r.json"])
        self.assertEqual(stat.S_IMODE(os.stat(path).st_mode) & 0o600, 0o600)

    def test_replaces_an_existing_file_whole(self):
        path = self.path("r.json")
        report.write_json_atomic(path, {"old": "x" * 10000})
        report.write_json_atomic(path, {"new": 1})
        with open(path, encoding="utf-8") as f:
            self.assertEqual(json.load(f), {"new": 1})

    def test_a_missing_folder_fails_and_creates_nothing(self):
        with self.assertRaisesRegex(RunnerError, "cannot write '.*missing/r.json'"):
            report.write_json_atomic(self.path("missing", "r.json"), {})
        self.assertEqual(os.listdir(self.dir), [])

    def test_a_failed_serialization_leaves_the_old_file_and_no_temporary(self):
        path = self.path("r.json")
        report.write_json_atomic(path, {"old": 1})
        with self.assertRaises(ValueError):
            report.write_json_atomic(path, {"nan": float("nan")})  # JSON cannot hold NaN
        with open(path, encoding="utf-8") as f:
            self.assertEqual(json.load(f), {"old": 1})
        self.assertEqual(os.listdir(self.dir), ["r.json"])


class DeviceSlug(unittest.TestCase):
    def test_as_the_cpp_side(self):
        self.assertEqual(meta.device_slug("NVIDIA H100 80GB HBM3"), "nvidia-h100-80gb-hbm3")
        self.assertEqual(meta.device_slug(" NVIDIA  H200 "), "nvidia-h200")
        self.assertEqual(meta.device_slug(None), "cpu")
        self.assertEqual(meta.device_slug("***"), "gpu")


if __name__ == "__main__":
    unittest.main()
