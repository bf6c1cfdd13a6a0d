#!/usr/bin/env bash
# Builds `seqbench` on this machine (nvcc, no GPU needed) into .prebuilt/ (ignored by git), so that
# a GPU lease's run-only calls (TARGETS=seqbench tools/gpu.sh ...) spend no device time building it.
# Carry .prebuilt with those calls; tools/gpu.sh uses it only when it was built from the same sources
# (tools/source_hash.sh), for the same architecture, and runs there and sees the device, and builds
# as usual otherwise (a binary built on one machine's image may not run on another's).
#
#   tools/prebuild.sh      # after committing: the binary records the git sha it was built from
#
# The build is tools/gpu.sh's own build stage (same configure flags, build/gpu). .prebuilt/ holds:
#   seqbench      the binary;             run-seqbench  runs it with lib/ on the library path
#   lib/          the shared libraries it needs that are neither glibc's, the compiler's nor CUDA's
#                 (Google Benchmark's); cuBLAS comes from the GPU machine's own CUDA Toolkit
#   SOURCE_HASH   tools/source_hash.sh;   CUDA_ARCH     the architecture it was built for
#   BUILT         what it is (seqbench info) and where it was built;   build.log  the build's log
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/usr/local/cuda/bin:$PATH"

# The binary records HEAD and whether the tree differs from it (core/build_info.h), and every report
# it writes carries both: a prebuilt binary is only worth carrying when those name the code exactly.
if [ -n "$(git status --porcelain --untracked-files=no 2>/dev/null)" ]; then
  echo "prebuild: the working tree has uncommitted changes; commit first, so that the binary's git" \
       "sha (which every report it writes carries) names the code it runs" >&2
  exit 1
fi

# A fresh configure: options left in build/gpu's cache by hand must not reach the binary unseen.
rm -f build/gpu/CMakeCache.txt
sources_before=$(tools/source_hash.sh)
log=build/prebuild-out
mkdir -p "$log"
echo "prebuild: building seqbench in build/gpu (tools/gpu.sh's build stage; this takes a while on few cores)"
STAGES=build TARGETS=seqbench OUT="$PWD/$log" GPU_LOGS="$PWD/$log" CALL_BUDGET=${CALL_BUDGET:-7200} tools/gpu.sh >"$log/gpu.log" 2>&1 || true
if [ ! -x build/gpu/suites/seqbench ] || ! grep -q '^build  *ok$' "$log/gpu.log"; then
  echo "prebuild: the build failed; see $log/build.log" >&2
  grep -A 12 '^FAILED: ' "$log/build.log" | head -n 40 >&2 || true
  exit 1
fi

stage=.prebuilt.tmp
rm -rf "$stage"
mkdir -p "$stage/lib"
cp build/gpu/suites/seqbench "$stage/seqbench"
# The libraries a GPU machine's image may lack: all but glibc's, the compiler runtime's and CUDA's.
ldd "$stage/seqbench" | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' | while read -r name path; do
  case "$name" in
    libc.so* | libm.so* | libdl.so* | librt.so* | libpthread.so* | ld-linux* | libstdc++* | libgcc_s*) ;;
    libcublas* | libcudart* | libcuda.so*) ;;
    *) cp -L "$path" "$stage/lib/$name" ;;
  esac
done
cat >"$stage/run-seqbench" <<'WRAPPER'
#!/bin/sh
# seqbench from tools/prebuild.sh, with the libraries carried beside it and the CUDA Toolkit's usual
# library folders on the path (the binary's run path names the build machine's).
here=$(cd "$(dirname "$0")" && pwd)
LD_LIBRARY_PATH="$here/lib:/usr/local/cuda/lib64:/usr/local/cuda/lib:/usr/local/cuda/targets/x86_64-linux/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
  exec "$here/seqbench" "$@"
WRAPPER
chmod +x "$stage/run-seqbench"
if [ "$(tools/source_hash.sh)" != "$sources_before" ]; then
  echo "prebuild: the sources changed during the build; run it again" >&2
  exit 1
fi
echo "$sources_before" >"$stage/SOURCE_HASH"
sed -n "s/^CMAKE_CUDA_ARCHITECTURES:[A-Z]*=//p" build/gpu/CMakeCache.txt >"$stage/CUDA_ARCH"
{
  echo "git $(git rev-parse --short HEAD), nvcc $(nvcc --version | sed -n 's/.*release \([0-9.]*\).*/\1/p'), on $(. /etc/os-release && echo "$PRETTY_NAME") ($(ldd --version | head -n 1 | awk '{print "glibc " $NF}'))"
  "$stage/run-seqbench" info
} >"$stage/BUILT"
cp "$log/build.log" "$stage/build.log"
# Only now is the old one replaced: a build that fails or is stopped leaves the last good .prebuilt.
rm -rf .prebuilt
mv "$stage" .prebuilt
echo "prebuild: .prebuilt/ is $(du -sh .prebuilt | cut -f1); carry it with run-only calls:"
echo "  STAGES=\"build run\" TARGETS=seqbench tools/gpu.sh ...   (carry: .bundle, .prebuilt)"
head -n 1 .prebuilt/BUILT
