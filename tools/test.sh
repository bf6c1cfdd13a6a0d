#!/usr/bin/env bash
# The test command (README, .ci/run): installs what is missing, builds, runs every test.
# Without a GPU the gpu-labelled tests are reported as skipped, each with its reason.
#   tools/test.sh [preset]      preset: ci (default), dev, release
set -euo pipefail
cd "$(dirname "$0")/.."
preset=${1:-ci}
bash tools/setup.sh
export PATH="/usr/local/cuda/bin:$PATH"
cmake --preset "$preset"
cmake --build --preset "$preset"
ctest --preset "$preset"
