#!/usr/bin/env python3
"""Run every planned experiment's PyTorch code once on the CPU (no GPU, nothing timed): see
seqbench_torch/cpu_smoke.py and README.md beside this file.

    python3 suites/pytorch/cpu_smoke.py --seqbench build/ci/suites/seqbench [--suite operators] [--filter REGEX]
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from seqbench_torch.cpu_smoke import main  # noqa: E402  (the path above comes first)

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
