"""tools/ptxas_report.py on a build log written the way nvcc -Xptxas -v and ninja write one: every
kernel's registers, stack frame and spills are read, a kernel compiled in two objects is one row
with its largest numbers, and any spill makes the exit status 1."""
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from tool_test import ToolTest  # noqa: E402
import ptxas_report  # noqa: E402

LN = "_ZN8seqbench7kernels17layernorm_forwardIfEEvPT_PKS2_i"
SM = "_ZN8seqbench7kernels14softmax_kernelI6__halfEEvPT_PKS3_l"
HELPER = "_ZN8seqbench7kernels6detail11block_floatEf"

LOG = f"""[12/40] Building CUDA object kernels/CMakeFiles/seqbench_kernels.dir/layernorm.cu.o
ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function '{LN}' for 'sm_90'
ptxas info    : Function properties for {LN}
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 40 registers, used 1 barriers, 400 bytes cmem[0]
ptxas info    : Compile time = 17.633 ms
[13/40] Building CUDA object kernels/CMakeFiles/seqbench_kernels.dir/softmax.cu.o
ptxas info    : Function properties for {HELPER}
    16 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Compiling entry function '{SM}' for 'sm_90'
ptxas info    : Function properties for {SM}
    24 bytes stack frame, 8 bytes spill stores, 12 bytes spill loads
ptxas info    : Used 255 registers, used 1 barriers, 24 bytes cumulative stack size
ptxas info    : Compile time = 120.5 ms
[20/40] Building CUDA object tests/kernels/CMakeFiles/x.dir/layernorm_test.cu.o
ptxas info    : Compiling entry function '{LN}' for 'sm_90'
ptxas info    : Function properties for {LN}
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 42 registers, used 1 barriers, 400 bytes cmem[0]
[40/40] Linking CXX executable suites/seqbench
"""


class PtxasReport(ToolTest):
    tool = "ptxas_report.py"

    def test_every_function_is_read_and_duplicates_keep_their_largest_numbers(self):
        functions = ptxas_report.parse(LOG.splitlines())
        self.assertEqual(set(functions), {LN, SM, HELPER})
        ln, sm, helper = functions[LN], functions[SM], functions[HELPER]
        self.assertTrue(ln.entry and sm.entry)
        self.assertFalse(helper.entry)
        self.assertEqual((ln.registers, ln.compiles, ln.spills, ln.stack), (42, 2, 0, 0))
        self.assertEqual((sm.registers, sm.stack, sm.spill_stores, sm.spill_loads), (255, 24, 8, 12))
        self.assertEqual((helper.registers, helper.stack), (None, 16))
        self.assertEqual(ptxas_report.summary(functions),
                         "ptxas: 2 kernel(s) for sm_90, 1 function(s) spill, 2 with a stack frame, at most 255 registers")

    def test_a_spill_fails_and_is_named_and_the_table_is_written(self):
        table = os.path.join(self.dir, "ptxas.md")
        done = self.run_tool(self.write("build.log", LOG), "--markdown", table)
        self.assertEqual(done.returncode, 1, done.stderr)
        lines = done.stdout.splitlines()
        self.assertEqual(lines[0], ptxas_report.summary(ptxas_report.parse(LOG.splitlines())))
        self.assertEqual(len(lines), 2)
        self.assertIn("spills 8 B stored / 12 B loaded: ", lines[1])
        self.assertIn("softmax_kernel", lines[1])
        self.assertEqual(os.stat(table).st_mode & 0o777, 0o644)
        with open(table, encoding="utf-8") as f:
            rows = [r for r in f.read().splitlines() if r.startswith("| `")]
        self.assertEqual(len(rows), 3)
        self.assertIn("softmax_kernel", rows[0])  # the spilling function first
        self.assertTrue(rows[0].endswith("| yes | sm_90 | 255 | 24 | 8 | 12 | 1 |"), rows[0])
        self.assertTrue(any(r.endswith("| yes | sm_90 | 42 | 0 | 0 | 0 | 2 |") for r in rows), rows)
        self.assertTrue(any(r.endswith("| no | — | — | 16 | 0 | 0 | — |") for r in rows), rows)

    def test_no_spill_passes(self):
        clean = LOG.replace("8 bytes spill stores, 12 bytes spill loads", "0 bytes spill stores, 0 bytes spill loads")
        done = self.run_tool(self.write("build.log", clean))
        self.assertEqual(done.returncode, 0, done.stdout + done.stderr)
        self.assertEqual(done.stdout.splitlines(),
                         ["ptxas: 2 kernel(s) for sm_90, no spills, 2 with a stack frame, at most 255 registers"])

    def test_a_log_without_a_report_says_so(self):
        done = self.run_tool(self.write("build.log", "[1/2] Linking CXX executable suites/seqbench\n"))
        self.assertEqual(done.returncode, 0)
        self.assertIn("no report in the log", done.stdout)

    def test_a_missing_log_is_an_error_naming_it(self):
        done = self.run_tool(os.path.join(self.dir, "nope.log"))
        self.assertEqual(done.returncode, 2)
        self.assertIn("cannot read", done.stderr)
        self.assertIn("nope.log", done.stderr)


if __name__ == "__main__":
    unittest.main()
