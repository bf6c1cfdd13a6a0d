"""tools/fit_gelu_erf.py --check on kernels/gelu.h: the header's kappa and polynomial are the fit's
and its Horner chain uses them in order (exit 0), and a header with one coefficient moved by 3
float ulps, a coefficient missing, a coefficient defined twice, a chain out of order, or another
kappa is refused (exit 1, naming what differs)."""
import os
import re
import struct
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from tool_test import SOURCE_DIR, ToolTest  # noqa: E402

HEADER = os.path.join(SOURCE_DIR, "kernels", "gelu.h")


def moved(value, ulps):
    bits = struct.unpack("i", struct.pack("f", value))[0] + ulps
    return struct.unpack("f", struct.pack("i", bits))[0]


class FitGeluErfTest(ToolTest):
    tool = "fit_gelu_erf.py"

    def setUp(self):
        super().setUp()
        with open(HEADER, encoding="utf-8") as f:
            self.text = f.read()

    def test_the_header_holds_the_fit(self):
        result = self.run_tool("--check", HEADER)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("match the fit", result.stdout)
        # The fit itself: a relative error of h below one float rounding.
        error = float(re.search(r"relative error of h of ([0-9.]+) u_f32", result.stdout).group(1))
        self.assertLess(error, 1.0)
        # As the kernels evaluate it, float Horner steps included: a few roundings.
        in_float = float(re.search(r"([0-9.]+) u_f32 relative in h", result.stdout).group(1))
        self.assertLess(in_float, 5.0)

    def test_a_moved_coefficient_is_refused(self):
        match = re.search(r"kGeluErfP5 = ([-+0-9.e]+)f;", self.text)
        value = moved(float(match.group(1)), 3)
        text = self.text.replace(match.group(0), f"kGeluErfP5 = {value:.9e}f;")
        result = self.run_tool("--check", self.write("gelu.h", text))
        self.assertEqual(result.returncode, 1)
        self.assertIn("coefficient 5", result.stderr)

    def test_a_missing_coefficient_is_refused(self):
        text = re.sub(r"constexpr float kGeluErfP8 = [^;]*;", "", self.text)
        text = text.replace("float p = -kGeluErfP8;\n  p = fmaf(p, tau, -kGeluErfP7);", "float p = -kGeluErfP7;")
        result = self.run_tool("--check", self.write("gelu.h", text))
        self.assertEqual(result.returncode, 1)
        self.assertIn("8 coefficients in the header, 9 in the fit", result.stderr)

    def test_a_coefficient_defined_twice_is_refused(self):
        line = re.search(r"constexpr float kGeluErfP3 = [^;]*;", self.text).group(0)
        result = self.run_tool("--check", self.write("gelu.h", self.text.replace(line, line + "\n" + line)))
        self.assertEqual(result.returncode, 1)
        self.assertIn("kGeluErfP3 is defined twice", result.stderr)

    def test_a_horner_chain_out_of_order_is_refused(self):
        text = self.text.replace("fmaf(p, tau, -kGeluErfP2);", "fmaf(p, tau, -kGeluErfPX);")
        text = text.replace("fmaf(p, tau, -kGeluErfP3);", "fmaf(p, tau, -kGeluErfP2);")
        text = text.replace("fmaf(p, tau, -kGeluErfPX);", "fmaf(p, tau, -kGeluErfP3);")
        result = self.run_tool("--check", self.write("gelu.h", text))
        self.assertEqual(result.returncode, 1)
        self.assertIn("the Horner chain uses the coefficients in the order", result.stderr)

    def test_another_kappa_is_refused(self):
        text = self.text.replace("kGeluErfKappa = 0.38;", "kGeluErfKappa = 0.4;")
        result = self.run_tool("--check", self.write("gelu.h", text))
        self.assertEqual(result.returncode, 1)
        self.assertIn("kappa 0.4 in the header", result.stderr)


if __name__ == "__main__":
    unittest.main()
