"""check_dump.py and cpu_smoke.py as a user runs them, up to where they need the real torch: usage,
the one-line errors, and nothing checked or run without torch (a stand-in `torch` package on
PYTHONPATH makes it absent or CUDA-less even where the real one is installed)."""
import json
import os
import unittest

from seqbench_torch import cpu_smoke
from tests import support
from tests.test_cli import NO_CUDA, NO_TORCH

CHECK_DUMP = os.path.join(support.RUNNER_DIR, "check_dump.py")
CPU_SMOKE = os.path.join(support.RUNNER_DIR, "cpu_smoke.py")


class Commands(support.ScratchTest):
    def assert_one_line_error(self, done, code, prog, part):
        self.assertEqual(done.returncode, code, done.stderr)
        lines = done.stderr.splitlines()
        self.assertEqual(len(lines), 1, done.stderr)
        self.assertTrue(lines[0].startswith(f"{prog}: error: "), lines[0])
        self.assertIn(part, lines[0])

    def dump(self, experiment="layernorm_fwd/f32/tokens=1,hidden=1"):
        folder = self.path("dump", "operators", experiment.replace("/", "_"))
        os.makedirs(folder)
        with open(os.path.join(folder, "manifest.json"), "w", encoding="utf-8") as f:
            json.dump({"schema": "seqbench.dump/1", "experiment": experiment, "params": {}, "arrays": []}, f)
        return self.path("dump")

    def test_check_dump_usage_is_exit_2(self):
        done = self.run_script(CHECK_DUMP)
        self.assert_one_line_error(done, 2, "check_dump", "--dump")
        done = self.run_script(CHECK_DUMP, "--dump", self.dir, "--suite", "trainer")
        self.assert_one_line_error(done, 2, "check_dump", "invalid choice: 'trainer'")

    def test_check_dump_folder_errors(self):
        self.assert_one_line_error(self.run_script(CHECK_DUMP, "--dump", self.path("absent")), 1, "check_dump",
                                   "--dump folder")
        self.assert_one_line_error(self.run_script(CHECK_DUMP, "--dump", self.dir), 1, "check_dump",
                                   "holds none of the folders operators, layers")
        dump = self.dump()
        self.assert_one_line_error(self.run_script(CHECK_DUMP, "--dump", dump, "--filter", "("), 2, "check_dump",
                                   "invalid --filter regex")
        # Nothing selected is an error, before torch is imported (a filter that matches nothing
        # must not pass as "0 failed").
        self.assert_one_line_error(self.run_script(CHECK_DUMP, "--dump", dump, "--filter", "softmax",
                                                   fake_torch=NO_TORCH), 1, "check_dump", "nothing to check")

    def test_check_dump_without_torch_or_cuda(self):
        dump = self.dump()
        self.assert_one_line_error(self.run_script(CHECK_DUMP, "--dump", dump, fake_torch=NO_TORCH), 1, "check_dump",
                                   "PyTorch is not importable")
        fake = NO_CUDA + "def device(name):\n    class D:\n        type = name.split(':')[0]\n    return D()\n"
        self.assert_one_line_error(self.run_script(CHECK_DUMP, "--dump", dump, fake_torch=fake), 1, "check_dump",
                                   "sees no CUDA device (use --device cpu")
        self.assert_one_line_error(self.run_script(CHECK_DUMP, "--dump", dump, "--device", "mps", fake_torch=fake), 1,
                                   "check_dump", "neither cuda nor cpu")

    def test_cpu_smoke_usage_and_without_torch(self):
        self.assert_one_line_error(self.run_script(CPU_SMOKE), 2, "cpu_smoke", "--seqbench")
        done = self.run_script(CPU_SMOKE, "--seqbench", support.seqbench_binary(), fake_torch=NO_TORCH)
        self.assert_one_line_error(done, 1, "cpu_smoke", "PyTorch is not importable")
        # an option value that names nothing or does not parse is bad usage, before torch is needed
        binary = support.seqbench_binary()
        self.assert_one_line_error(self.run_script(CPU_SMOKE, "--seqbench", binary, "--suite", "nope",
                                                   fake_torch=NO_TORCH), 2, "cpu_smoke", "invalid choice: 'nope'")
        self.assert_one_line_error(self.run_script(CPU_SMOKE, "--seqbench", binary, "--filter", "(",
                                                   fake_torch=NO_TORCH), 2, "cpu_smoke", "invalid --filter regex")

    def test_cpu_smoke_finds_the_tensors_of_a_result(self):
        class T:  # stands in for a tensor: what tensors() looks for
            def is_floating_point(self):
                return True

        a, b = T(), T()
        self.assertEqual(cpu_smoke.tensors(None), [])
        self.assertEqual(cpu_smoke.tensors(a), [a])
        self.assertEqual(cpu_smoke.tensors((a, [None, b], 3)), [a, b])


if __name__ == "__main__":
    unittest.main()
