#!/usr/bin/env bash
# Prints one SHA-256 over every file the `seqbench` binary is built from (the build files and the
# C++/CUDA sources), the script that configures it (tools/gpu.sh, its comment lines left out: its
# header is the GPU plan, which a session may edit between a prebuild and a device call) and the
# PyTorch runner (whose reports take their git sha from the binary), by path and content; not
# tests/ or reports/.
# tools/prebuild.sh records it beside a binary built here; tools/gpu.sh uses that binary on the GPU
# machine only when the hash of the tree it was given is the same, so a prebuilt binary never
# stands in for other code. It needs no git: the GPU machine's copy of the tree may come without one.
#
#   tools/source_hash.sh               the binary's sources (what reports record as meta.source_hash)
#   tools/source_hash.sh --with-tests  the same and tests/: what the prebuilt gpu test binaries are
#                                      built from (a change to a test alone leaves the reports'
#                                      hash, and so their merges, as they were)
set -euo pipefail
cd "$(dirname "$0")/.."
paths=(CMakeLists.txt CMakePresets.json cmake core kernels layers reference suites trainer)
case "${1:-}" in
  "") ;;
  --with-tests) paths+=(tests) ;;
  *)
    echo "source_hash.sh: unknown option '$1' (want none or --with-tests)" >&2
    exit 2
    ;;
esac
{
  find "${paths[@]}" -name __pycache__ -prune -o -type f -print0 | LC_ALL=C sort -z | xargs -0 sha256sum
  echo "$(grep -v '^[[:space:]]*#' tools/gpu.sh | sha256sum | cut -d' ' -f1)  tools/gpu.sh (code lines)"
} | sha256sum | cut -d' ' -f1
