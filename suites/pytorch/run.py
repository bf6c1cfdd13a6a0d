#!/usr/bin/env python3
"""PyTorch baselines for seqbench's experiments: see README.md beside this file.

    python3 suites/pytorch/run.py --seqbench build/release/suites/seqbench [--suite operators] ...
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from seqbench_torch.cli import main  # noqa: E402  (the path above comes first)

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
