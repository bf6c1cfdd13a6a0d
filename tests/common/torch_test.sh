#!/usr/bin/env bash
# A ctest that needs PyTorch (suites/pytorch/check_dump.py, cpu_smoke.py): runs `PYTHON ARGS...` with
# the python of SEQBENCH_TORCH_PYTHON, else the one given; skipped, saying why, when that python
# cannot import torch (CI installs none: suites/pytorch/README.md says how to run these).
#   torch_test.sh PYTHON ARGS...
set -u
python=${SEQBENCH_TORCH_PYTHON:-$1}
shift
if ! why=$("$python" -c "import torch" 2>&1); then
  echo "SKIPPED: PyTorch is not importable by '$python' ($(printf '%s' "$why" | tail -n 1)); set" \
       "SEQBENCH_TORCH_PYTHON to a python that has it (suites/pytorch/README.md)"
  exit 0
fi
exec "$python" "$@"
