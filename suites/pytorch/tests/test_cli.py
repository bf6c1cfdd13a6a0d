"""The command as a user runs it: exit codes, one-line errors, and nothing written without torch or CUDA.

A stand-in `torch` package on PYTHONPATH makes torch absent (or CUDA-less) even on a machine that
has the real one."""
import os
import re
import signal
import subprocess
import sys
import time
import unittest

from tests import support

NO_TORCH = 'raise ImportError("No module named \'torch\' (simulated)")\n'
NO_CUDA = (
    '__version__ = "2.11.0"\n'
    "class version:\n    cuda = None\n"
    "class cuda:\n    @staticmethod\n    def is_available():\n        return False\n"
)
OLD_TORCH = '__version__ = "1.13.1"\n'
BROKEN_TORCH = 'raise OSError("libcudart.so.12: cannot open shared object file:\\n No such file or directory")\n'
BROKEN_CUDA = (
    '__version__ = "2.11.0"\n'
    "class cuda:\n    @staticmethod\n    def is_available():\n        raise RuntimeError('driver too old')\n"
)
# A torch whose import takes long (as a cold CUDA initialization can): it says so, then sleeps.
SLOW_TORCH = (
    "import os, time\n"
    "open(os.environ['SLOW_TORCH_MARK'], 'w').close()\n"
    "time.sleep(60)\n"
)


class Command(support.ScratchTest):
    def run_py(self, *args, fake_torch=None):
        return self.run_script(support.RUN_PY, *args, fake_torch=fake_torch)

    def assert_one_line_error(self, done, code, part):
        self.assertEqual(done.returncode, code, done.stderr)
        lines = done.stderr.splitlines()
        self.assertEqual(len(lines), 1, done.stderr)
        self.assertTrue(lines[0].startswith("seqbench-pytorch: error: "), lines[0])
        self.assertIn(part, lines[0])

    def test_without_torch_exits_non_zero_and_writes_nothing(self):
        out = self.path("out")
        done = self.run_py("--seqbench", support.seqbench_binary(), "--out", out, fake_torch=NO_TORCH)
        self.assert_one_line_error(done, 1, "PyTorch is not importable")
        self.assertFalse(os.path.exists(out))

    def test_without_cuda_exits_non_zero_and_writes_nothing(self):
        out = self.path("out")
        done = self.run_py("--seqbench", support.seqbench_binary(), "--out", out, fake_torch=NO_CUDA)
        self.assert_one_line_error(done, 1, "sees no CUDA device")
        self.assertFalse(os.path.exists(out))

    def test_a_torch_that_fails_to_import_is_one_line(self):
        # Not only ImportError: a broken CUDA library raises OSError from torch's import (L3).
        done = self.run_py("--seqbench", support.seqbench_binary(), "--out", self.path("o"), fake_torch=BROKEN_TORCH)
        self.assert_one_line_error(done, 1, "PyTorch is not importable (OSError: libcudart.so.12: cannot open shared "
                                            "object file: No such file or directory)")
        self.assertFalse(os.path.exists(self.path("o")))
        done = self.run_py("--seqbench", support.seqbench_binary(), "--out", self.path("o"), fake_torch=BROKEN_CUDA)
        self.assert_one_line_error(done, 1, "cannot query CUDA (RuntimeError: driver too old)")

    def test_budget_seconds_must_be_positive(self):
        for bad in ("0", "-5", "soon", "inf", "nan"):
            self.assert_one_line_error(self.run_py("--seqbench", "x", "--budget-seconds", bad), 2, "--budget-seconds")

    def test_sigterm_is_one_line_and_exit_1(self):
        pkg = self.path("fake", "torch")
        os.makedirs(pkg)
        with open(os.path.join(pkg, "__init__.py"), "w", encoding="utf-8") as f:
            f.write(SLOW_TORCH)
        env = dict(os.environ, SLOW_TORCH_MARK=self.path("mark"),
                   PYTHONPATH=self.path("fake") + os.pathsep + os.environ.get("PYTHONPATH", ""))
        proc = subprocess.Popen([sys.executable, support.RUN_PY, "--seqbench", support.seqbench_binary(), "--out",
                                 self.path("o")], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        try:
            deadline = time.monotonic() + 60
            while not os.path.exists(self.path("mark")) and time.monotonic() < deadline:
                time.sleep(0.05)
            proc.send_signal(signal.SIGTERM)
            _, err = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        self.assertEqual(proc.returncode, 1, err)
        self.assertEqual(err.splitlines(), ["seqbench-pytorch: error: terminated by SIGTERM (nothing measured yet)"])

    def test_seeds_at_the_ends_of_the_range_are_taken(self):
        from seqbench_torch import cli
        for text, value in (("0", 0), ("7", 7), ("18446744073709551615", 2**64 - 1)):
            self.assertEqual(cli.parser().parse_args(["--seqbench", "x", "--seed", text]).seed, value)

    def test_the_exit_codes_agree(self):
        from seqbench_torch import cli, measure
        self.assertEqual(cli.EXIT_INCOMPLETE, measure.EXIT_INCOMPLETE)
        self.assertNotIn(cli.EXIT_INCOMPLETE, (cli.EXIT_FAILURE, cli.EXIT_USAGE))

    def test_torch_1_is_refused(self):
        done = self.run_py("--seqbench", support.seqbench_binary(), "--out", self.path("o"), fake_torch=OLD_TORCH)
        self.assert_one_line_error(done, 1, "PyTorch 1.13.1 is too old")

    def test_usage_errors(self):
        self.assert_one_line_error(self.run_py(), 2, "--seqbench")
        self.assert_one_line_error(self.run_py("--seqbench", "x", "--bogus"), 2, "--bogus")
        # seeds as seqbench takes them: the report schema refuses a negative meta.seed
        for bad in ("-5", "+3", "010", "0x10", "1e3", " 7", "", "18446744073709551616", "٣"):
            self.assert_one_line_error(self.run_py("--seqbench", "x", "--seed", bad), 2,
                                       f"--seed {bad!r} is not an integer from 0 to 18446744073709551615")
        self.assert_one_line_error(self.run_py("--seqbench", self.path("absent")), 1, "not found or not executable")
        binary = support.seqbench_binary()
        # values that name nothing or do not parse are bad usage too (2), as in seqbench itself
        self.assert_one_line_error(self.run_py("--seqbench", binary, "--filter", "("), 2, "invalid --filter regex '('")
        self.assert_one_line_error(self.run_py("--seqbench", binary, "--suite", "nope"), 2, "unknown suite 'nope'")
        self.assert_one_line_error(self.run_py("--seqbench", binary, "--suite", "memory"), 2,
                                   "suite 'memory' has no PyTorch equivalent")

    def test_a_missing_parity_folder_is_named_before_torch_is_needed(self):
        done = self.run_py("--seqbench", support.seqbench_binary(), "--parity", self.path("nope"), fake_torch=NO_TORCH)
        self.assert_one_line_error(done, 1, "--parity folder")

    def test_dry_run_needs_no_torch_and_honours_the_filter(self):
        done = self.run_py("--seqbench", support.seqbench_binary(), "--quick", "--dry-run", "--filter",
                           "layernorm_fwd/bf16/.*/torch_compile$", fake_torch=NO_TORCH)
        self.assertEqual(done.returncode, 0, done.stderr)
        lines = done.stdout.splitlines()
        self.assertTrue(lines)
        for line in lines:
            self.assertRegex(line, r"^operators/layernorm_fwd/bf16/\S+: torch_compile \(CUDA graph(, \d+ calls a sample)?\)$")
        # The quick shapes are small: some samples hold several calls (seqbench's own N, from its list).
        self.assertTrue(any(re.search(r", \d+ calls a sample\)$", line) for line in lines), lines)

    def test_dry_run_maps_the_layers_suite_without_cuda_graphs(self):
        done = self.run_py("--seqbench", support.seqbench_binary(), "--quick", "--dry-run", "--suite", "layers",
                           "--filter", "_bwd/", fake_torch=NO_TORCH)
        self.assertEqual(done.returncode, 0, done.stderr)
        lines = done.stdout.splitlines()
        self.assertTrue(lines)
        for line in lines:
            self.assertRegex(line, r"^layers/\w+_bwd/\S+: torch_eager torch_compile$")


if __name__ == "__main__":
    unittest.main()
