"""tests/simt/rewrite.py's guard on inline PTX: the simt build cannot run PTX, so an `asm volatile`
is refused (with its line) unless it sits in a preprocessor branch that only device compilation
enters, `#if defined(__CUDA_ARCH__) [&& ...]` or `#ifdef __CUDA_ARCH__`, up to its #elif, #else or
#endif; a condition the host's preprocessor can make true (`||`, `__CUDA_ARCH__ < 900`, which is
0 < 900 there) does not count. The globaltimer read is still rewritten wherever it is."""
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import rewrite  # noqa: E402

SOURCE = """before
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("red.global.add.v4.f32 [%0], {%1, %2, %3, %4};" ::"l"(p), "f"(a), "f"(b), "f"(c), "f"(d));
#  if SOMETHING
  nested
#  endif
#else
  host_else
#endif
#ifdef __CUDA_ARCH__  // device
  device_ifdef
#elif 1
  host_elif
#endif
#if defined(__CUDA_ARCH__) || HOST_TOO
  either
#endif
#if __CUDA_ARCH__ < 900
  host_as_well
#endif
#ifndef __CUDA_ARCH__
  host_only
#endif
"""


def line_of(text, needle):
    return text.split("\n").index(next(line for line in text.split("\n") if needle in line))


class DeviceOnlyLines(unittest.TestCase):
    def test_device_branches_and_only_those(self):
        inside = rewrite.device_only_lines(SOURCE)
        for needle in ("asm volatile", "nested", "device_ifdef"):
            self.assertIn(line_of(SOURCE, needle), inside, needle)
        for needle in ("before", "host_else", "host_elif", "either", "host_as_well", "host_only"):
            self.assertNotIn(line_of(SOURCE, needle), inside, needle)

    def test_unbalanced_directives_are_errors(self):
        with self.assertRaises(rewrite.RewriteError):
            rewrite.device_only_lines("#endif\n")
        with self.assertRaises(rewrite.RewriteError):
            rewrite.device_only_lines("#else\n")


class InlinePtx(unittest.TestCase):
    def test_ptx_in_a_device_branch_passes_unchanged(self):
        out = rewrite.rewrite(SOURCE, "k.cu")
        self.assertIn('asm volatile("red.global.add.v4.f32', out)
        self.assertEqual(out.count("\n"), SOURCE.count("\n"))

    def test_ptx_the_host_compiles_is_refused_with_its_line(self):
        for needle in ("before", "host_else", "host_elif", "either", "host_as_well", "host_only"):
            bad = SOURCE.replace(needle, 'asm volatile("nop;");', 1)
            with self.assertRaises(rewrite.RewriteError) as caught:
                rewrite.rewrite(bad, "k.cu")
            self.assertIn(f"k.cu:{line_of(bad, 'nop;') + 1}:", str(caught.exception))

    def test_the_globaltimer_read_is_rewritten_anywhere(self):
        out = rewrite.rewrite('asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));\n', "t.cu")
        self.assertEqual(out, "start = ::simt::globaltimer_ns();\n")


if __name__ == "__main__":
    unittest.main()
