#!/usr/bin/env python3
"""Hold a `seqbench dump` against PyTorch on the same inputs, on the GPU or the CPU: see
seqbench_torch/check_dump.py and README.md beside this file.

    python3 suites/pytorch/check_dump.py --dump DIR [--device cpu] [--suite operators] [--filter REGEX]
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from seqbench_torch.check_dump import main  # noqa: E402  (the path above comes first)

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
