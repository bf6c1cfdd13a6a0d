#!/usr/bin/env bash
# Writes BUILD_STAMP at the repository root: the git sha, the dirty flag and the source hash of the
# tree as it is now. Run it on the machine that has the repository right before every device call
# (`run`): the GPU machine gets the working tree without .git, so cmake/WriteBuildInfo.cmake reads
# the sha from this file there, and the reports it writes can be merged (a report whose sha is
# "unknown" never is). tools/gpu.sh moves a stamp aside (BUILD_STAMP.stale) when its source_hash is
# not the tree's (tools/source_hash.sh), so a forgotten, older stamp does not name the wrong commit.
#
# BUILD_STAMP must travel, so it is NOT in .gitignore or .git/info/exclude (the device call copies
# tracked and untracked-not-ignored files only), and it must never be committed: commit with
# explicit pathspecs (never `git add -A` / `git commit -a`). This script refuses when it is tracked.
#
#   tools/stamp.sh          write it (prints the line it wrote)
#   tools/stamp.sh --check  exit 1 unless BUILD_STAMP exists, is untracked and matches HEAD and the tree
set -euo pipefail
cd "$(dirname "$0")/.."
stamp=BUILD_STAMP
if git ls-files --error-unmatch "$stamp" >/dev/null 2>&1; then
  echo "stamp.sh: $stamp is tracked by git; remove it from the index (git rm --cached $stamp) and commit" >&2
  exit 1
fi
if git check-ignore -q "$stamp"; then
  echo "stamp.sh: $stamp is ignored by git (.gitignore or .git/info/exclude), so it would not travel to the device" >&2
  exit 1
fi
sha=$(git rev-parse HEAD)
dirty=false
# Sources only: reports/ unpacked from a device call's reports.tar does not make the tree dirty.
[ -n "$(git status --porcelain --untracked-files=no -- . ':(exclude)reports')" ] && dirty=true
hash=$(tools/source_hash.sh)
if [ "${1:-}" = --check ]; then
  [ -f "$stamp" ] && grep -qx "git_sha=$sha" "$stamp" && grep -qx "git_dirty=$dirty" "$stamp" &&
    grep -qx "source_hash=$hash" "$stamp" && exit 0
  echo "stamp.sh: $stamp is missing or stale; run tools/stamp.sh" >&2
  exit 1
fi
printf 'git_sha=%s\ngit_dirty=%s\nsource_hash=%s\n' "$sha" "$dirty" "$hash" >"$stamp.tmp"
mv "$stamp.tmp" "$stamp"
echo "stamp.sh: $stamp git_sha=$sha git_dirty=$dirty"
