"""The shared frame of the tools/ tests: a temporary folder per test, files written into it, and
the tool under test run as a separate process (its exit status and output are what is checked)."""
import os
import subprocess
import sys
import tempfile
import unittest

SOURCE_DIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOOLS_DIR = os.path.join(SOURCE_DIR, "tools")
sys.path.insert(0, TOOLS_DIR)


class ToolTest(unittest.TestCase):
    tool = ""  # the script under tools/, set by each test class

    def setUp(self):
        self._tmp = tempfile.TemporaryDirectory(prefix="seqbench-tool-test-")
        self.dir = self._tmp.name

    def tearDown(self):
        self._tmp.cleanup()

    def write(self, name, text):
        path = os.path.join(self.dir, name)
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
        return path

    def run_tool(self, *args):
        return subprocess.run([sys.executable, os.path.join(TOOLS_DIR, self.tool), *args], capture_output=True,
                              text=True, timeout=60)
