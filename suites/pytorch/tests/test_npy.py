"""The .npy reader against the format seqbench's writer (suites/npy.cpp) produces, built by hand here."""
import struct
import unittest

from tests import support  # noqa: F401
from seqbench_torch import npy
from seqbench_torch.errors import RunnerError
from seqbench_torch.parity import tolerance


def npy_bytes(descr, shape, payload):
    dims = "(" + ", ".join(map(str, shape)) + ("," if len(shape) == 1 else "") + ")"
    d = "{'descr': '%s', 'fortran_order': False, 'shape': %s, }" % (descr, dims)
    total = (10 + len(d) + 1 + 63) // 64 * 64
    d = d + " " * (total - 10 - len(d) - 1) + "\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(d)) + d.encode() + payload


class Npy(unittest.TestCase):
    def test_reads_f32(self):
        data = npy_bytes("<f4", (2, 2), struct.pack("<4f", 1.0, -2.5, 0.0, 3.25))
        self.assertEqual(len(data), 128 + 16)  # 10 + 59 + 1 header bytes padded to 128, then the data
        descr, shape, payload = npy.parse(data)
        self.assertEqual((descr, shape), ("<f4", (2, 2)))
        self.assertEqual(npy.values(descr, payload), [1.0, -2.5, 0.0, 3.25])

    def test_reads_bf16_bits_and_f16(self):
        bits = [0x3F80, 0xC020, 0x0000]  # 1.0, -2.5, 0.0 as bfloat16
        descr, shape, payload = npy.parse(npy_bytes("<u2", (3,), struct.pack("<3H", *bits)))
        self.assertEqual(shape, (3,))
        self.assertEqual(npy.values(descr, payload, "bf16"), [1.0, -2.5, 0.0])
        descr, _, payload = npy.parse(npy_bytes("<f2", (), struct.pack("<e", 0.5)))
        self.assertEqual(npy.values(descr, payload), [0.5])

    def test_refuses_what_seqbench_never_writes(self):
        with self.assertRaisesRegex(RunnerError, "not a .npy file"):
            npy.parse(b"PK\x03\x04")
        with self.assertRaisesRegex(RunnerError, "unsupported .npy layout descr='<f8'"):
            npy.parse(npy_bytes("<f8", (1,), b"\0" * 8))
        with self.assertRaisesRegex(RunnerError, r"4 data bytes, shape \(2,\) needs 8"):
            npy.parse(npy_bytes("<f4", (2,), b"\0" * 4))

    def test_parity_tolerance_grows_with_the_reduction(self):
        self.assertEqual(tolerance("bf16", 0), 2 * 2.0 ** -8)
        self.assertGreater(tolerance("f32", 4096), tolerance("f32", 1))


if __name__ == "__main__":
    unittest.main()
