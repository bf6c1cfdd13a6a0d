#!/usr/bin/env bash
# The main job (README): installs what is missing, builds in Release, runs `seqbench run` on its
# defaults (all suites; GPU suites are skipped with the reason where there is no GPU), and prints
# where the reports and tables went. Extra arguments go to `seqbench run`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh
export PATH="/usr/local/cuda/bin:$PATH"
cmake --preset release
cmake --build --preset release
./build/release/suites/seqbench run "$@"
