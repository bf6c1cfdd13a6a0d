"""The timing policy equals suites/gpu_timer.{h,cpp}'s, read from the sources so they cannot drift."""
import os
import re
import unittest

from tests import support
from seqbench_torch.policy import TimerPolicy


def source(name):
    with open(os.path.join(support.SOURCE_DIR, "suites", name), encoding="utf-8") as f:
        return f.read()


def cpp_defaults():
    text = source("gpu_timer.h")
    block = text[text.index("struct TimerPolicy"):]
    return {k: v for k, v in re.findall(r"\b(\w+) = ([\w.]+);", block[: block.index("static TimerPolicy quick")])}


def cpp_quick():
    text = source("gpu_timer.cpp")
    body = text[text.index("TimerPolicy TimerPolicy::quick()"):]
    body = body[: body.index("return policy;")]
    return dict(re.findall(r"policy\.(\w+) = ([\w.]+);", body))


def value(text):
    return {"true": True, "false": False}.get(text) if text in ("true", "false") else float(text)


class TimerPolicyParity(unittest.TestCase):
    def test_defaults_match_the_cpp_timer(self):
        defaults = cpp_defaults()
        self.assertEqual(set(defaults), {"warmup_runs", "min_samples", "max_samples", "budget_seconds", "flush_l2"})
        for key, text in defaults.items():
            self.assertEqual(getattr(TimerPolicy(), key), value(text), key)

    def test_quick_matches_the_cpp_timer(self):
        quick = cpp_quick()
        self.assertTrue(quick)
        for key, text in quick.items():
            self.assertEqual(getattr(TimerPolicy.quick(), key), value(text), key)

    def test_calls_cap_matches_the_cpp_timer(self):
        # listing.MAX_CALLS_PER_SAMPLE mirrors kMaxCallsPerSample: read it from the header so they cannot drift.
        from seqbench_torch.listing import MAX_CALLS_PER_SAMPLE

        (cap,) = re.findall(r"kMaxCallsPerSample = (\d+);", source("gpu_timer.h"))
        self.assertEqual(MAX_CALLS_PER_SAMPLE, int(cap))

    def test_stopping_rule(self):
        p = TimerPolicy()
        self.assertFalse(p.done(9, 100.0))  # below min_samples, whatever the time
        self.assertFalse(p.done(10, 0.5))  # budget not spent
        self.assertTrue(p.done(10, 1.0))
        self.assertTrue(p.done(200, 0.0))  # max_samples


if __name__ == "__main__":
    unittest.main()
