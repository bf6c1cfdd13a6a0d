#!/usr/bin/env bash
# simt_seqbench_dump (tests/simt/CMakeLists.txt): `seqbench dump --quick` of the simt build into a
# fresh DIR, for simt_pytorch_parity. Fails when the dump fails (any experiment) or dumps nothing.
#   dump_test.sh SIMT_SEQBENCH DIR FILTER
set -eu
bin=$1 dir=$2 filter=$3
rm -rf "$dir"
exec "$bin" dump --quick --filter "$filter" --out "$dir"
