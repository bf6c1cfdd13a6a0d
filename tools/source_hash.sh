#!/usr/bin/env bash
# Prints one SHA-256 over every file the `seqbench` binary is built from (the build files and the
# C++/CUDA sources), the script that configures it (tools/gpu.sh) and the PyTorch runner (whose
# reports take their git sha from the binary), by path and content; not tests/ or reports/.
# tools/prebuild.sh records it beside a binary built here; tools/gpu.sh uses that binary on the GPU
# machine only when the hash of the tree it was given is the same, so a prebuilt binary never
# stands in for other code. It needs no git: the GPU machine's copy of the tree may come without one.
set -euo pipefail
cd "$(dirname "$0")/.."
find CMakeLists.txt CMakePresets.json cmake core kernels layers reference suites trainer tools/gpu.sh \
  -name __pycache__ -prune -o -type f -print0 |
  LC_ALL=C sort -z | xargs -0 sha256sum | sha256sum | cut -d' ' -f1
