"""tools/clock_trace.py on traces written the way nvidia-smi -lms writes them: the clock figures,
the clock-event reasons by name, a slowdown called out first, and unreadable lines and fields
counted rather than read as numbers."""
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from tool_test import ToolTest  # noqa: E402
import clock_trace  # noqa: E402


def sample(sm, mem=2619, power="412.30", temp=55, reasons="0x0000000000000000", gpu=0, t="10:00:00.000"):
    return f"{gpu}, 2026/11/24 {t}, {sm}, {mem}, {power}, {temp}, {reasons}"


class ClockTrace(ToolTest):
    tool = "clock_trace.py"

    def test_steady_clocks_print_one_value_and_no_reason(self):
        lines = [sample(1980) for _ in range(4)]
        self.assertEqual(clock_trace.summary(*clock_trace.parse(lines)),
                         "4 samples; SM 1980 MHz; memory 2619 MHz; power max 412 W; temperature max 55 C; "
                         "reasons: none")

    def test_a_power_cap_mid_run_is_called_out_with_its_sample_count(self):
        lines = [sample(1980), sample(1755, power="699.1", temp=63, reasons="0x0000000000000004"),
                 sample(1830, reasons="0x0000000000000044"), sample(1980, reasons="0x0000000000000001")]
        line = clock_trace.summary(*clock_trace.parse(lines))
        self.assertTrue(line.startswith("SLOWED (hw_thermal_slowdown, sw_power_cap) 4 samples"), line)
        self.assertIn("SM p50 1905 MHz (min 1755, max 1980)", line)
        self.assertIn("power max 699 W; temperature max 63 C", line)
        self.assertIn("reasons: gpu_idle in 1, hw_thermal_slowdown in 1, sw_power_cap in 2", line)

    def test_idle_alone_is_not_a_slowdown_and_unknown_bits_are_named(self):
        line = clock_trace.summary(*clock_trace.parse([sample(345, reasons="0x0000000000001001")]))
        self.assertFalse(line.startswith("SLOWED"), line)
        self.assertIn("reasons: gpu_idle in 1, other_0x1000 in 1", line)

    def test_unreadable_lines_and_fields_are_counted_not_read(self):
        lines = ["Unable to determine the device handle for GPU0000:04:00.0: Unknown Error", "",
                 sample(1980, power="[N/A]", reasons="[Not Supported]"), sample("[N/A]", power="[N/A]")]
        line = clock_trace.summary(*clock_trace.parse(lines))
        self.assertEqual(line, "2 samples; SM 1980 MHz; memory 2619 MHz; power n/a; temperature max 55 C; "
                               "reasons: none; 1 line(s) unreadable")

    def test_several_gpus_are_summarized_apart(self):
        lines = [sample(1980, gpu=0), sample(1500, gpu=1, reasons="0x0000000000000008")]
        line = clock_trace.summary(*clock_trace.parse(lines))
        self.assertIn("gpu 0: 1 samples; SM 1980 MHz", line)
        self.assertIn("SLOWED (hw_slowdown) gpu 1: 1 samples; SM 1500 MHz", line)

    def test_the_command_prints_the_line_and_names_a_missing_file(self):
        done = self.run_tool(self.write("clocks.csv", "\n".join([sample(1980), sample(1980)]) + "\n"))
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertTrue(done.stdout.startswith("2 samples; SM 1980 MHz"), done.stdout)
        missing = os.path.join(self.dir, "absent.csv")
        done = self.run_tool(missing)
        self.assertEqual(done.returncode, 2)
        self.assertIn(missing, done.stderr)
        self.assertEqual(done.stdout, "")

    def test_no_samples_says_so(self):
        self.assertEqual(clock_trace.summary(*clock_trace.parse(["nvidia-smi: not found"])),
                         "NO SAMPLES (1 line(s) unreadable)")


if __name__ == "__main__":
    unittest.main()
