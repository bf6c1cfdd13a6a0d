"""Shared by the CPU tests: the seqbench binary (SEQBENCH_BINARY, set by ctest), the runner's
folder on sys.path, and a scratch folder."""
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
RUNNER_DIR = os.path.dirname(HERE)
SOURCE_DIR = os.path.dirname(os.path.dirname(RUNNER_DIR))
RUN_PY = os.path.join(RUNNER_DIR, "run.py")
if RUNNER_DIR not in sys.path:
    sys.path.insert(0, RUNNER_DIR)


def seqbench_binary():
    """The built binary, or a skip: the tests that need it say so rather than failing."""
    path = os.environ.get("SEQBENCH_BINARY", "")
    if not path or not os.access(path, os.X_OK):
        raise unittest.SkipTest("SEQBENCH_BINARY is not set to the built seqbench (ctest sets it)")
    return path


def run_seqbench(*args):
    return subprocess.run([seqbench_binary(), *args], capture_output=True, text=True, timeout=120)


class ScratchTest(unittest.TestCase):
    def setUp(self):
        self._tmp = tempfile.TemporaryDirectory(prefix="seqbench-pytorch-test-")
        self.dir = self._tmp.name

    def tearDown(self):
        self._tmp.cleanup()

    def path(self, *parts):
        return os.path.join(self.dir, *parts)

    def run_script(self, script, *args, fake_torch=None):
        """`python3 script args...`; with `fake_torch` (a module's source), a stand-in `torch`
        package on PYTHONPATH, so that torch is absent or CUDA-less even where the real one is."""
        env = dict(os.environ)
        if fake_torch is not None:
            pkg = self.path("fake", "torch")
            os.makedirs(pkg, exist_ok=True)
            with open(os.path.join(pkg, "__init__.py"), "w", encoding="utf-8") as f:
                f.write(fake_torch)
            env["PYTHONPATH"] = self.path("fake") + os.pathsep + env.get("PYTHONPATH", "")
        return subprocess.run([sys.executable, script, *args], capture_output=True, text=True, env=env, timeout=120)
