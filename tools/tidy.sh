#!/usr/bin/env bash
# clang-tidy (.clang-tidy's checks) over the library's translation units: the host sources of
# core/, reference/, layers/, trainer/ and suites/, and the simt build's host-compiled copies of
# the .cu files (the device code as the CPU executor runs it; tests excluded). Needs a configured
# and built ci preset (build/ci/compile_commands.json and the simt sources it generates).
#   tools/tidy.sh [jobs]        prints each finding once; exit 1 if there is any
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=${1:-$(nproc)}
db=build/ci/compile_commands.json
[[ -f $db ]] || { echo "tidy.sh: $db is missing: run 'cmake --preset ci && cmake --build build/ci' first" >&2; exit 2; }
command -v clang-tidy >/dev/null || { echo "tidy.sh: clang-tidy is not installed" >&2; exit 2; }
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
python3 - "$db" > "$logs/files" <<'PY'
import json, os, sys
root = os.getcwd()
for f in sorted({os.path.relpath(e["file"], root) for e in json.load(open(sys.argv[1]))}):
    top = f.split("/")[0]
    simt = f.startswith("build/ci/tests/simt/src/") and not f.startswith("build/ci/tests/simt/src/tests/")
    if f.endswith(".cpp") and (top in ("core", "reference", "layers", "trainer", "suites") or simt):
        print(f)
PY
echo "clang-tidy over $(wc -l < "$logs/files") translation units, $jobs at a time ..."
# -Wno-unknown-warning-option: the compile commands carry gcc-only warning flags.
xargs -P "$jobs" -I{} sh -c 'clang-tidy -p build/ci --quiet --extra-arg=-Wno-unknown-warning-option "$1" > "$2/$(echo "$1" | tr / _).log" 2>&1 || true' _ {} "$logs" < "$logs/files"
# A path analysis may end in a system header (Google Benchmark's registration, which hands its
# allocation to the registry): those are listed apart and do not fail the run.
all=$(cat "$logs"/*.log | grep -E ': (warning|error): ' | sed "s|$PWD/||" | sort -u || true)
system=$(echo "$all" | grep -E '^/usr/' || true)
findings=$(echo "$all" | grep -vE '^/usr/' | grep . || true)
[[ -z $system ]] || printf 'in system headers (not counted):\n%s\n' "$system"
if [[ -z $findings ]]; then
  echo "no findings"
else
  echo "$findings"
  echo "$(echo "$findings" | wc -l) finding(s)"
  exit 1
fi
