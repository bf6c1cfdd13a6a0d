#!/usr/bin/env bash
# Builds `seqbench` and the gpu tests on this machine (nvcc, no GPU needed) into .prebuilt/ (ignored by
# git), so that a GPU lease's calls spend no device time building (on the H200's 16 cores a build of
# both takes a minute or two of a task's 15 device-minutes, and a failed configure there costs more).
# Carry .prebuilt with every call; tools/gpu.sh uses each part only when it was built from the same
# sources (tools/source_hash.sh; for the tests, with --with-tests), for the same architecture, and
# runs there (seqbench: and sees the device), and builds what it cannot use, saying why (a binary
# built on one machine's image may not run on another's).
#
#   tools/prebuild.sh      # after committing: the binary records the git sha it was built from
#
# The build is tools/gpu.sh's own build stage (same configure flags, build/gpu; targets seqbench and
# seqbench_gpu_tests, from clean: about 8 minutes on 2 cores). .prebuilt/ holds:
#   seqbench      the binary;             run-seqbench  runs it through with-libs
#   with-libs     runs a command with lib/ and the CUDA Toolkit's library folders on the library path
#   lib/          the shared libraries it and the tests need that are neither glibc's, the compiler's
#                 nor CUDA's (Google Benchmark's); cuBLAS comes from the GPU machine's own CUDA Toolkit
#   gpu-tests.tar.xz  every gpu-labelled test, packed by tools/pack_tests.py so that ctest runs them
#                 from the folder gpu.sh unpacks them into (xz with a 256 MiB window: the binaries
#                 share most of their bytes, so 23 of them, ~210 MB, pack into ~10 MB; compressing
#                 takes about 2.7 GB of memory)
#   SOURCE_HASH   tools/source_hash.sh;   TESTS_HASH  tools/source_hash.sh --with-tests
#   CUDA_ARCH     the architecture it was built for
#   BUILT         what it is (seqbench info, the tests' count) and where it was built;   build.log
#                 the build's log (ptxas -v of every kernel: gpu.sh's ptxas report reads it)
# It ends with the size a call carries (the tree, .bundle and .prebuilt), against the 64 MiB limit.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/usr/local/cuda/bin:$PATH"

# The binary records HEAD and whether the tree differs from it (core/build_info.h), and every report
# it writes carries both: a prebuilt binary is only worth carrying when those name the code exactly.
# Sources only, as the binary's own flag (cmake/WriteBuildInfo.cmake): reports unpacked from a
# device call and not yet committed do not make the binary dirty.
if [ -n "$(git status --porcelain --untracked-files=no -- . ':(exclude)reports' 2>/dev/null)" ]; then
  echo "prebuild: the working tree has uncommitted changes; commit first, so that the binary's git" \
       "sha (which every report it writes carries) names the code it runs" >&2
  exit 1
fi

# A clean build: options left in build/gpu's cache by hand must not reach the binary unseen, and
# build.log (ptxas -v, which gpu.sh's ptxas report reads) must cover every kernel, not only those an
# incremental build recompiled.
rm -rf build/gpu
sources_before=$(tools/source_hash.sh)
tests_before=$(tools/source_hash.sh --with-tests)
log=build/prebuild-out
# A prebuild that stopped part-way left its test pack here, which gpu.sh would tar into logs.tar.
rm -rf "$log"
mkdir -p "$log"
echo "prebuild: building seqbench and the gpu tests in build/gpu (tools/gpu.sh's build stage; this takes a while on few cores)"
PREBUILT=0 STAGES=build TARGETS="seqbench seqbench_gpu_tests" OUT="$PWD/$log" GPU_LOGS="$PWD/$log" \
  CALL_BUDGET=${CALL_BUDGET:-7200} tools/gpu.sh >"$log/gpu.log" 2>&1 || true
if [ ! -x build/gpu/suites/seqbench ] || ! grep -q '^build  *ok' "$log/gpu.log"; then
  echo "prebuild: the build failed; see $log/build.log" >&2
  grep -A 12 '^FAILED: ' "$log/build.log" | head -n 40 >&2 || true
  exit 1
fi

stage=.prebuilt.tmp
rm -rf "$stage"
mkdir -p "$stage/lib"
cp build/gpu/suites/seqbench "$stage/seqbench"
# The gpu tests (ctest's own list: discovery runs each binary with --gtest_list_tests, which needs no
# GPU), packed relocatably, then compressed as one stream so that what the binaries share is stored once.
if ! ctest --test-dir build/gpu -L gpu --show-only=json-v1 >"$log/gpu-tests.json" 2>"$log/gpu-tests.err"; then
  echo "prebuild: ctest could not list the gpu tests of build/gpu: $(head -n 3 "$log/gpu-tests.err")" >&2
  exit 1
fi
if ! python3 tools/pack_tests.py "$log/gpu-tests.json" build/gpu "$log/gpu-tests"; then
  echo "prebuild: the gpu tests could not be packed (above)" >&2
  exit 1
fi
tests_count=$(grep -c '^add_test' "$log/gpu-tests/CTestTestfile.cmake")
echo "prebuild: compressing the gpu tests (xz, single-threaded: a minute or two)"
tar -cf - -C "$log/gpu-tests" . | xz -T1 --lzma2=preset=6,dict=256MiB >"$stage/gpu-tests.tar.xz"
# The libraries a GPU machine's image may lack: all but glibc's, the compiler runtime's and CUDA's.
for binary in "$stage/seqbench" "$log"/gpu-tests/bin/*; do
  ldd "$binary" | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}'
done | LC_ALL=C sort -u | while read -r name path; do
  case "$name" in
    libc.so* | libm.so* | libdl.so* | librt.so* | libpthread.so* | ld-linux* | libstdc++* | libgcc_s*) ;;
    libcublas* | libcudart* | libcuda.so*) ;;
    *) cp -L "$path" "$stage/lib/$name" ;;
  esac
done
# with-libs runs a command with the libraries carried beside it and the CUDA Toolkit's usual library
# folders on the path (the binaries' run path names the build machine's): run-seqbench for the
# binary, and tools/gpu.sh for the packed tests and compute-sanitizer over them.
cat >"$stage/with-libs" <<'WRAPPER'
#!/bin/sh
here=$(cd "$(dirname "$0")" && pwd)
LD_LIBRARY_PATH="$here/lib:/usr/local/cuda/lib64:/usr/local/cuda/lib:/usr/local/cuda/targets/x86_64-linux/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
  exec "$@"
WRAPPER
cat >"$stage/run-seqbench" <<'WRAPPER'
#!/bin/sh
# seqbench from tools/prebuild.sh, through with-libs.
here=$(cd "$(dirname "$0")" && pwd)
exec "$here/with-libs" "$here/seqbench" "$@"
WRAPPER
chmod +x "$stage/with-libs" "$stage/run-seqbench"
if [ "$(tools/source_hash.sh)" != "$sources_before" ] || [ "$(tools/source_hash.sh --with-tests)" != "$tests_before" ]; then
  echo "prebuild: the sources changed during the build; run it again" >&2
  exit 1
fi
echo "$sources_before" >"$stage/SOURCE_HASH"
echo "$tests_before" >"$stage/TESTS_HASH"
sed -n "s/^CMAKE_CUDA_ARCHITECTURES:[A-Z]*=//p" build/gpu/CMakeCache.txt >"$stage/CUDA_ARCH"
{
  echo "git $(git rev-parse --short HEAD), nvcc $(nvcc --version | sed -n 's/.*release \([0-9.]*\).*/\1/p'), on $(. /etc/os-release && echo "$PRETTY_NAME") ($(ldd --version | head -n 1 | awk '{print "glibc " $NF}'))"
  "$stage/run-seqbench" info
  echo "gpu tests: $tests_count, from $(find "$log/gpu-tests/bin" -type f | wc -l) binaries"
} >"$stage/BUILT"
cp "$log/build.log" "$stage/build.log"
# Only now is the old one replaced: a build that fails or is stopped leaves the last good .prebuilt.
rm -rf .prebuilt
mv "$stage" .prebuilt
rm -rf "$log/gpu-tests"
# What a device call carries: the tracked and untracked-not-ignored files, plus .bundle and .prebuilt.
carried=$({ git ls-files -z --cached --others --exclude-standard | du -cb --files0-from=- 2>/dev/null | tail -n 1 | cut -f1
            du -sb .prebuilt | cut -f1
            if [ -d .bundle ]; then du -sb .bundle | cut -f1; fi; } | awk '{s += $1} END {printf "%.1f", s / 1048576}') || true
echo "prebuild: .prebuilt/ is $(du -sh .prebuilt | cut -f1) ($tests_count gpu tests); a call carrying it and .bundle moves $carried MiB of the 64 MiB limit"
echo "  tools/gpu.sh ...   (carry: .bundle, .prebuilt; the header's plan)"
head -n 1 .prebuilt/BUILT
