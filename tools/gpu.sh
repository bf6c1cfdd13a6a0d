#!/usr/bin/env bash
# One call on a GPU machine does everything pending (DESIGN.md, "The GPU build-test-bench script"):
#   1. configure and build in Release for the machine (sm_90 unless CUDA_ARCH says otherwise),
#      through the offline bundle (.bundle/, from tools/bundle.sh) where packages are missing, what
#      a carried .prebuilt (tools/prebuild.sh) does not already give;
#   2. run the gpu-labelled ctest tests (the cpu ones are CI's), then compute-sanitizer memcheck and
#      racecheck on the GPU test binaries where the tool and the machine support them;
#   3. run the requested suites with --out reports/<device>/; then `seqbench dump --quick` of the
#      suites the PyTorch runner maps (into build/gpu-dump/, not $OUT: it is large); then, where
#      torch is importable, the PyTorch baselines of the same suites (suites/pytorch/run.py) into
#      the same folder, with --parity over that dump (its differences land in the torch reports'
#      checks) and --budget-seconds (what is left of the call less 30 s: it starts no experiment
#      it cannot finish, and lists those "not started: time budget"; a SIGTERM from `timeout`
#      still leaves every finished experiment in the report); then regenerate that folder's
#      tables, which join both (the "vs torch" columns), and TARGETS.md, the issues' targets judged
#      from every report there (`seqbench targets`: met, missed or not measured, each with its cases);
#   4. print a short summary last.
# $OUT (or ./gpu-out) holds exactly three files, so that all of them come back from a lease (a call
# returns at most 8 files, and which are dropped beyond that is unspecified): logs.tar (every log:
# nvidia-smi.txt, clocks.csv (the clocks while the suites time), configure/build/ctest/sanitizer/run/
# dump/pytorch logs, ptxas.md, info.txt, under
# build/gpu-logs/ on the machine, and any report a run moved aside: reports/<device>/<name>.json.
# {quick,full,unreadable}-<time>), reports.tar (reports/<device>/ without those) and summary.txt (the summary
# printed last). All three are rewritten (temp file + rename) after every stage and every suite, so
# a call killed at its limit still returns what finished; a kill mid-write can leave at most a
# logs.tar.tmp and a reports.tar.tmp beside them (5 files in all, in every stage combination).
#
#   tools/gpu.sh [--quick] [suite ...]      default: every suite
#   STAGES="build test" tools/gpu.sh        only some stages (build, test, sanitize, run, dump, torch), run
#                                           in that order; a lease's call is limited to 10 minutes, so a
#                                           full pass takes several calls (the plan below). Name build in
#                                           every call: it is the stage that takes up a carried .prebuilt
#                                           (with nothing to compile it costs seconds)
#   TARGETS="seqbench" tools/gpu.sh ...     build only those targets (default: what the call needs and
#                                           .prebuilt does not give: seqbench, and seqbench_gpu_tests
#                                           for the test and sanitize stages); TARGETS=seqbench still
#                                           takes a fitting .prebuilt's seqbench, never its tests
#   PREBUILT=0 tools/gpu.sh ...             ignore a carried .prebuilt (tools/prebuild.sh sets it)
#   RUN_RESUME=1 tools/gpu.sh ...           the run stage runs, of each suite whose report is already in
#                                           reports/<device>/, only the experiments it lacks (not run,
#                                           failed, or outside an earlier filter: tools/resume_filter.py)
#                                           and merges them in (--keep-checks: the checks an earlier
#                                           unfiltered part ran are kept, not run again, unless a check
#                                           family failed); a complete one is not run again. A
#                                           report of another build (sha, source hash) is run whole,
#                                           and a resume_filter failure leaves the report and fails
#                                           the suite, rather than replace it. On a
#                                           warm machine it first restores the reports an earlier
#                                           call kept under build/gpu-reports/ that the tree lacks
#   RUN_FILTER="RE" tools/gpu.sh ...        the run stage runs only what the ECMAScript regex RE selects
#                                           (seqbench run --filter), merged into the suite's report
#   TORCH_FILTER="RE" tools/gpu.sh ...      the torch stage measures only what the Python regex RE
#                                           selects (the runner's --filter, over suite/experiment/
#                                           variant); each such part merges into reports/<device>/
#                                           pytorch-<suite>.json (suites/pytorch/README.md, "Reports")
#
# Provenance: the GPU machine gets the working tree without .git, so a build there would record git
# sha "unknown" (and no report of it could be merged with another part). Before EVERY `run` call
# the session runs tools/stamp.sh on this machine: it writes BUILD_STAMP (sha, dirty flag, source
# hash; untracked and deliberately not git-ignored, since ignored files do not travel -- never
# commit it), which cmake/WriteBuildInfo.cmake reads where git cannot answer. This script moves a
# stamp whose source hash is not the tree's aside (BUILD_STAMP.stale) before it builds, and says so.
#
# A task's device time is 15 minutes in all (900 s, earlier tries at the same work counted in): the
# machine's start (a minute or more), every call, every idle wait and the give-back count; no
# machine starts with under 4 minutes left, a call runs at most 10 minutes, and a machine goes back
# 30 s after a call. So a task gets one start and two calls back to back: about 560 s, then what
# is left (~150-200 s). Nothing is built there that can be built here, and nothing runs there
# that needs no GPU: the cpu tests are CI's, and the reference and memory suites are CPU work
# (Fig. 20's measured memory is the layers suite's GPU checks; reports/cpu/ holds the accounting).
# Ignored folders do not outlive a session. On the CPU machine, before call 1:
#   - tools/bundle.sh (.bundle: the packages a fallback build there needs), commit, then
#     tools/prebuild.sh (about 8 minutes on 2 cores, no device time: seqbench and the gpu tests
#     into .prebuilt/; it prints the size a call carries, under the 64 MiB limit), then tools/stamp.sh;
#   - the device `status`: budget_left_s is what the calls below share.
# Every call carries .bundle and .prebuilt; the summary's build lines say that nothing was built, or
# what was and why (a prebuilt part that is stale or does not run there is built there instead).
#   1. STAGES="build test run dump torch" CALL_BUDGET=560 tools/gpu.sh device trainer layers operators
#      (run's timeout_s 600): the gpu tests (the first results), then the suites in that order, each
#      with what is left, so that the small ones finish first and the largest (operators: 308
#      experiments, 750 variants) is the one a short budget leaves incomplete (its report lists
#      not_run); then the parity dump and the PyTorch baselines with whatever is left (the runner
#      starts no experiment it cannot finish and lists the rest "not started: time budget").
#      Predicted before any GPU run: the suites' sampling is about 110 s in all (the timer's policy
#      over the listed bytes and FLOPs at 80 % of the H200's 4.3 TB/s copy and 500 TFLOP/s:
#      operators 64 s, trainer 22 s, layers 19 s, device 1 s), plus allocation, graph captures, the
#      softmax tuner and the checks (the operator checks' host references took 1 of 20 gdb samples of
#      their simt test, the rest being the emulated device: seconds there); the gpu tests are bounded
#      by their simt run (367 s summed on 2 CPU cores with the device code emulated; 70 s the
#      slowest). So call 1 should finish the suites and leave minutes to the PyTorch side;
#   2. as the very next tool call, while the machine is warm (it goes back 30 s after call 1
#      returns, and a fresh start costs minutes that are not there), with budget_left_s from call
#      1's reply (`lease`): STAGES="build run sanitize" RUN_RESUME=1
#      CALL_BUDGET=min(560, budget_left_s - 60) tools/gpu.sh device trainer layers operators
#      (timeout_s min(600, budget_left_s - 20)). Nothing needs doing here first: call 1 kept its
#      reports on the machine (build/gpu-reports/, which a warm machine keeps) and RUN_RESUME=1
#      restores those the tree lacks, and the BUILD_STAMP written before call 1 still names the tree.
#      RUN_RESUME=1 runs only the experiments the reports lack (tools/resume_filter.py; --keep-checks
#      keeps checks an unfiltered part ran whole), a complete suite costs nothing, then
#      compute-sanitizer memcheck and racecheck on the gpu tests with what is left (kernels first).
#      Then give_back, and unpack call 2's reports.tar (it holds call 1's reports too; call 1's is
#      the fallback if call 2 returns none).
# The PyTorch side (issue #6: torch.compile costs seconds an experiment) is not expected to finish
# in the same task; a later task's calls finish it (STAGES="build dump torch", TORCH_FILTER in parts,
# each merged into reports/<device>/pytorch-<suite>.json) with a .prebuilt of the same sources, on
# the same kind of GPU: its reports join these when their meta.source_hash is the same
# (tools/source_hash.sh covers the sources, not reports/ or tests/), so commit only reports/
# between the two. The parity dump is always of quick shapes (numerics, not timing); the torch
# side must use the --quick setting of the C++ reports it is joined with (both full here): quick
# experiments have other names and shapes, and `seqbench table` leaves a quick-against-full
# "vs torch" cell empty.
# The parts of a suite merge into one report only when built from one git sha and the same sources
# (meta.source_hash, tools/source_hash.sh at build time; where a part has none, no part may be
# dirty): use one .prebuilt for every call, or unpack each part's reports.tar into the tree without
# committing until the suite is complete (reports/ does not count as dirty; a commit or a source
# change between builds does, and the runner and merge.py refuse to mix).
# A call on a fresh machine (the warm one went back) finds no kept reports: unpack the last
# reports.tar into the tree before it. Commit reports/<device>/ only after the last call: a commit
# changes HEAD, and a call that then falls back to building (its .prebuilt refused) records the new
# sha, whose reports no earlier part merges with.
# Pass each call's CALL_BUDGET from the device's budget_left_s as above: a call the tool cuts short
# loses what this script had not yet packed into $OUT. Name on every call the kind the first call
# got (the reply's `device`): a call that falls back to another kind writes another reports/<device>/
# folder, which neither resumes nor joins the first one's.
#
# A failing stage is reported in the summary and the later stages still run: a build with errors
# keeps going (ninja -k 0) and the stages use whatever was built; each suite runs in its own
# process, so a sticky CUDA error (an illegal address) costs one suite, not all that follow. Time
# limits keep one hung or slow binary from eating a lease's call: CTEST_TIMEOUT (per test, 300 s)
# and SANITIZE_TIMEOUT (per binary and tool, 120 s) and SANITIZE_BUDGET (the stage, 300 s).
# SEQBENCH_EXPECT_GPU=1 is exported, so a GPU test that finds no usable device FAILS here rather
# than skipping (tests/common/gpu_test.h).
# CALL_BUDGET (seconds, default 560) is what this call may use in all: a lease's call is killed at
# its limit (600 s) with only what is already under $OUT coming back. Every stage is given the
# time that is left (timeout), and a stage that has not ended KILL_GRACE (15 s) after its SIGTERM
# is killed (timeout -k: a hung kernel, or a variant longer than the budget, ignores the runner's
# SIGTERM flag until it returns), so every stage has ended by CALL_BUDGET + KILL_GRACE (575 s) and
# the reports and summary are still packed after it; the short steps after that take at most what is
# left (at least 1 s). A stage that finds under STAGE_MIN (20 s) left is skipped and says
# so, and seqbench run gets --budget-seconds (what is left less 20 s): it starts no experiment it
# cannot finish, rewrites its report after every experiment, and on SIGTERM writes what finished.
# The summary tells, per suite: ok; incomplete (the budget left experiments unstarted, exit 3);
# FAILED with the report written (its failed checks counted); CRASHED (no report written or
# updated: an error before or outside the measurements, or a signal); TIMED OUT (or KILLED, when it
# outlived the grace; the report holds what finished before).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
out=${OUT:-$PWD/gpu-out}
mkdir -p "$out"
# Every log lands here; logs.tar in $OUT carries them all back. GPU_LOGS names another folder, used
# as it is (tools/prebuild.sh reads build.log there); the default one starts empty.
if [ -n "${GPU_LOGS:-}" ]; then
  logs=$GPU_LOGS
else
  logs=$PWD/build/gpu-logs
  rm -rf "$logs"
fi
mkdir -p "$logs"
quick=()
suites=()
for arg in "$@"; do
  case "$arg" in
    --quick) quick=(--quick) ;;
    *) suites+=(--suite "$arg") ;;
  esac
done
export PATH="/usr/local/cuda/bin:$PATH"
export SEQBENCH_EXPECT_GPU=1
export PYTHONUNBUFFERED=1  # the torch stage's log, through tee, line by line (a kill keeps what it said)
stages=" ${STAGES:-build test sanitize run dump torch} "
# A misspelt stage ("tests") would be skipped without a word, and the device call wasted.
for stage in $stages; do
  case $stage in
    build | test | sanitize | run | dump | torch) ;;
    *)
      echo "tools/gpu.sh: unknown stage '$stage' in STAGES (known: build test sanitize run dump torch)" >&2
      exit 2
      ;;
  esac
done
summary=()
step() { summary+=("$(printf '%-28s %s' "$1" "$2")"); }
# Writes $OUT's file NAME from stdin, atomically (a temp file, then rename).
put() { cat >"$out/$1.tmp" && mv -f "$out/$1.tmp" "$out/$1"; }
# Reports a run moved aside (<name>.json.quick-*, .full-*, .unreadable-*): logs.tar carries them,
# reports.tar does not (unpacked into the tree, they would be committed beside the reports).
aside_pattern=('*.json.quick-*' '*.json.full-*' '*.json.unreadable-*')
aside_files() {
  [ -n "${dir:-}" ] && [ -d "$dir" ] &&
    find "$dir" -maxdepth 1 -type f \( -name "${aside_pattern[0]}" -o -name "${aside_pattern[1]}" \
      -o -name "${aside_pattern[2]}" \) | LC_ALL=C sort
}
pack_logs() {
  local aside=()
  mapfile -t aside < <(aside_files 2>/dev/null)
  tar -cf - -C "$logs" --exclude='./logs.tar*' --exclude='./reports.tar*' --exclude='./summary.txt*' . \
    ${aside[0]:+-C "$PWD" "${aside[@]}"} 2>/dev/null | put logs.tar
}
write_summary() { printf '%s\n' "${summary[@]}" | put summary.txt; }
# After every stage (and suite): what finished so far is in $OUT, should the call be killed next.
checkpoint() {
  pack_logs
  write_summary
}
call_budget=${CALL_BUDGET:-560}
stage_min=${STAGE_MIN:-20}
kill_grace=${KILL_GRACE:-15}
# Seconds left of the call's budget, at least 1 (timeout 0 would mean no limit at all).
left() {
  local l=$((call_budget - SECONDS))
  ((l < 1)) && l=1
  echo "$l"
}
# A stage runs when it was asked for and enough of the call's budget is left; otherwise `why`
# says which, for the summary.
want() {
  if [[ "$stages" != *" $1 "* ]]; then
    why=skipped
    return 1
  fi
  (($(left) >= $stage_min)) && return 0
  why="skipped (call budget spent: $(left) s of $call_budget left)"
  return 1
}
# At most N seconds, and no more than what is left of the call's budget (at least 1).
within() {
  local l
  l=$(left)
  ((l > $1)) && l=$1
  echo "$l"
}
# rc 124 is timeout's: the stage ran out of the call's budget; 137, killed KILL_GRACE after that.
timed_out() { [ "$1" -eq 124 ] || [ "$1" -eq 137 ]; }
killed() { [ "$1" -eq 137 ]; }
pack_reports() {
  [ -n "${dir:-}" ] && ls "$dir"/*.json >/dev/null 2>&1 || return 0
  tar -cf - "${aside_pattern[@]/#/--exclude=}" "$dir" | put reports.tar
  keep_reports
}
# A copy of the reports under build/ (ignored: a warm machine keeps it between calls, while the tree
# is laid anew from the session's), so that a RUN_RESUME=1 call right after this one resumes them
# even when the session has not yet unpacked this call's reports.tar into its tree.
kept_reports=build/gpu-reports
keep_reports() {
  mkdir -p "$kept_dir" && find "$dir" -maxdepth 1 -type f -name '*.json' -exec cp -p {} "$kept_dir/" \;
}

timeout -k 5 30 nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv \
  >"$logs/nvidia-smi.txt" 2>&1

# A BUILD_STAMP (tools/stamp.sh) names the commit only for the tree it was written from.
if [ -f BUILD_STAMP ]; then
  if [ "$(sed -n 's/^source_hash=//p' BUILD_STAMP)" = "$(tools/source_hash.sh)" ]; then
    step "build stamp" "$(sed -n 's/^git_sha=//p' BUILD_STAMP | cut -c1-12) (dirty: $(sed -n 's/^git_dirty=//p' BUILD_STAMP))"
  else
    mv -f BUILD_STAMP BUILD_STAMP.stale
    step "build stamp" "STALE (written for other sources; moved aside): git sha will be unknown"
  fi
elif [ ! -d .git ]; then
  step "build stamp" "NONE and no .git: git sha will be unknown (run tools/stamp.sh before the call)"
fi
checkpoint

build=build/gpu
bin=$build/suites/seqbench
# The gpu tests this call runs (test and sanitize stages): the build's, or the prebuilt pack's.
test_dir=$build
test_env=()
tests_wanted=false
[[ "$stages" == *" test "* || "$stages" == *" sanitize "* ]] && tests_wanted=true
# A call may skip its build: tools/prebuild.sh builds `seqbench` and the gpu tests on a machine
# without a GPU, with this script's own build stage, into .prebuilt/ (carry it). Each part is used
# (only the build stage looks for them) only when it was built from these very sources
# (tools/source_hash.sh: the C++ sources, this script, the PyTorch runner; with --with-tests, tests/
# as well, for the tests), for this architecture, and runs here (seqbench: and sees the device);
# whatever is not used is built here, and the summary says why. seqbench is run through
# .prebuilt/run-seqbench, never copied into build/gpu, so ninja cannot take it for its own; the tests
# are unpacked into build/gpu-tests (a relocatable ctest folder, tools/pack_tests.py).
# PREBUILT=0 ignores a carried .prebuilt (tools/prebuild.sh itself sets it).
prebuilt=.prebuilt
prebuilt_tests=build/gpu-tests
use_prebuilt() {
  local info
  if [ "${PREBUILT:-1}" = 0 ]; then
    pre_why="not used (PREBUILT=0)"
  elif [ ! -e "$prebuilt/seqbench" ]; then
    pre_why="none carried"
  elif [ ! -x "$prebuilt/seqbench" ] || [ ! -x "$prebuilt/run-seqbench" ]; then
    pre_why="not executable here (the copy lost its exec bit?)"
  elif [ -n "${TARGETS:-}" ] && [ "$TARGETS" != seqbench ]; then
    pre_why="not used: this call builds $TARGETS"
  elif [ "$(cat "$prebuilt/SOURCE_HASH" 2>/dev/null)" != "$(tools/source_hash.sh)" ]; then
    pre_why="stale: built from other sources than these"
  elif [ "$(cat "$prebuilt/CUDA_ARCH" 2>/dev/null)" != "${CUDA_ARCH:-90}" ]; then
    pre_why="built for sm_$(cat "$prebuilt/CUDA_ARCH" 2>/dev/null), this call wants sm_${CUDA_ARCH:-90}"
  # LD_BIND_NOW: a library symbol the image lacks (an older cuBLAS) fails here, not mid-suite.
  elif ! info=$(LD_BIND_NOW=1 timeout -k 5 60 "$prebuilt/run-seqbench" info --json 2>"$logs/prebuilt-probe.log"); then
    pre_why="does not run here: $(grep -m1 . "$logs/prebuilt-probe.log" || echo "no message")"
  elif ! printf '%s' "$info" |
       python3 -c 'import json,sys; sys.exit(0 if json.load(sys.stdin)["device"] else 1)' 2>/dev/null; then
    pre_why="runs here but sees no device"
  else
    pre_why="prebuilt by tools/prebuild.sh ($(cat "$prebuilt/BUILT" 2>/dev/null | head -n 1))"
    return 0
  fi
  # A carried binary that is not used says why; with none carried there is nothing to say.
  [ -e "$prebuilt/seqbench" ] && step prebuilt "$pre_why"
  return 1
}
# The prebuilt gpu tests, once the prebuilt seqbench is in use (both come from one prebuild).
use_prebuilt_tests() {
  local probe
  rm -rf "$prebuilt_tests"
  if [ ! -f "$prebuilt/gpu-tests.tar.xz" ] || [ ! -x "$prebuilt/with-libs" ]; then
    pre_tests_why="none in $prebuilt (made before tools/prebuild.sh packed the tests?)"
  elif [ "$(cat "$prebuilt/TESTS_HASH" 2>/dev/null)" != "$(tools/source_hash.sh --with-tests)" ]; then
    pre_tests_why="stale: the tests changed since they were built"
  elif ! { mkdir -p "$prebuilt_tests" &&
           if command -v xz >/dev/null 2>&1; then
             tar -xJf "$prebuilt/gpu-tests.tar.xz" -C "$prebuilt_tests"
           else
             # filter="data" where the Python knows it (3.12 warns without one, which would be the
             # first line of a refusal's reason).
             python3 -c 'import sys, tarfile
kw = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
tarfile.open(sys.argv[1]).extractall(sys.argv[2], **kw)' "$prebuilt/gpu-tests.tar.xz" "$prebuilt_tests"
           fi; } >"$logs/prebuilt-tests-probe.log" 2>&1; then
    pre_tests_why="could not be unpacked: $(grep -m1 . "$logs/prebuilt-tests-probe.log" || echo "no message")"
  elif ! probe=$(find "$prebuilt_tests/bin" -maxdepth 1 -type f -perm -u+x | LC_ALL=C sort | head -n 1) ||
       [ -z "$probe" ] || [ ! -f "$prebuilt_tests/CTestTestfile.cmake" ]; then
    pre_tests_why="the pack holds no test binary or no CTestTestfile.cmake"
  elif ! LD_BIND_NOW=1 timeout -k 5 60 "${test_env[@]}" "$probe" --gtest_list_tests \
         >>"$logs/prebuilt-tests-probe.log" 2>&1; then
    pre_tests_why="do not run here: $(basename "$probe"): $(grep -m1 -v '^$' "$logs/prebuilt-tests-probe.log" || echo "no message")"
  else
    pre_tests_why="prebuilt ($(find "$prebuilt_tests/bin" -type f | wc -l) binaries, $(grep -c '^add_test' "$prebuilt_tests/CTestTestfile.cmake") tests)"
    return 0
  fi
  rm -rf "$prebuilt_tests"
  return 1
}
# What this call builds: TARGETS where given; otherwise what it needs and no prebuilt part gives it:
# seqbench, and the gpu tests (seqbench_gpu_tests) for the test and sanitize stages. The cpu tests
# are CI's: a lease's minutes are kept for what needs the GPU.
build_targets=()
if ! want build; then
  step build "$why"
else
  if use_prebuilt; then
    bin=$PWD/$prebuilt/run-seqbench
    step build "seqbench: $pre_why"
    if [ -n "${TARGETS:-}" ] && $tests_wanted; then
      step "build (gpu tests)" "none built or unpacked (TARGETS=$TARGETS): the tests are what $build holds"
    elif $tests_wanted; then
      test_env=("$PWD/$prebuilt/with-libs")
      if use_prebuilt_tests; then
        test_dir=$prebuilt_tests
      else
        test_env=()
        build_targets=(seqbench_gpu_tests)
      fi
      step "build (gpu tests)" "$pre_tests_why"
    fi
  elif [ -n "${TARGETS:-}" ]; then
    read -r -a build_targets <<<"$TARGETS"
  else
    build_targets=(seqbench)
    $tests_wanted && build_targets+=(seqbench_gpu_tests)
  fi
  if [ ${#build_targets[@]} -eq 0 ]; then
    :
  elif ! timeout -k "$kill_grace" "$(within 120)" cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
       -DCMAKE_CUDA_ARCHITECTURES="${CUDA_ARCH:-90}" -DSEQBENCH_PTXAS_VERBOSE=ON -DSEQBENCH_SIMT=OFF \
       >"$logs/configure.log" 2>&1; then
    step configure FAILED; tail -n 40 "$logs/configure.log"
    if [ "${bin:-}" != "$PWD/$prebuilt/run-seqbench" ]; then
      checkpoint; printf '%s\n' "${summary[@]}"; exit 1
    fi
    # The prebuilt seqbench still runs the suites (a failing stage must not cost the later ones);
    # only the gpu tests were to be built, and none are: an empty folder, which ctest's
    # --no-tests=error reports as a failure rather than running a stale build's tests.
    step "build (gpu tests)" "NOT BUILT (configure failed; see configure.log)"
    test_dir=$logs/no-tests
    mkdir -p "$test_dir"
  elif timeout -k "$kill_grace" "$(left)" cmake --build "$build" -j "$(nproc)" --target "${build_targets[@]}" -- -k 0 \
       >"$logs/build.log" 2>&1; then
    step build "ok (${build_targets[*]})"
  elif timed_out $?; then
    step build "TIMED OUT (call budget; see build.log)"
  else
    # Keep going with what did build: one broken file must not cost every test and suite.
    step build "FAILED ($(grep -c '^FAILED: ' "$logs/build.log") target(s), see build.log; continuing)"
    grep -A 12 '^FAILED: ' "$logs/build.log" | head -n 60
  fi
fi
if [ ! -x "$bin" ]; then
  step seqbench "NOT BUILT: run, dump, torch and tables are skipped"
fi
# ptxas -v of every kernel: registers, stack and spills a kernel, in ptxas.md (tools/ptxas_report.py),
# from this call's build, or else from the prebuilt binary's (its build.log); a spill is named in the
# summary.
ptxas_log=$logs/build.log
ptxas_of=""
if [ ! -f "$ptxas_log" ] && [ "$bin" = "$PWD/$prebuilt/run-seqbench" ] && [ -f "$prebuilt/build.log" ]; then
  ptxas_log=$prebuilt/build.log
  ptxas_of=" (the prebuilt build's)"
fi
if [ -f "$ptxas_log" ]; then
  python3 tools/ptxas_report.py "$ptxas_log" --markdown "$logs/ptxas.md" >"$logs/ptxas-summary.txt" 2>&1
  case $? in
    0) step ptxas "$(head -n 1 "$logs/ptxas-summary.txt")$ptxas_of" ;;
    1) step ptxas "SPILLS: $(head -n 1 "$logs/ptxas-summary.txt")$ptxas_of (named below and in ptxas.md)" ;;
    *) step ptxas "FAILED: $(tail -n 1 "$logs/ptxas-summary.txt")$ptxas_of" ;;
  esac
  tail -n +2 "$logs/ptxas-summary.txt" | head -n 20
fi
checkpoint

if want test; then
  # -L gpu: the cpu tests (the simt build's included: -DSEQBENCH_SIMT=OFF above) are CI's, and the
  # torch_cpu ones are what this machine's torch and seqbench dump stages run for real; a lease's
  # minutes go to what needs the GPU. --no-tests=error: a build that produced no tests is a
  # failure, not "ok". CTEST_JOBS (8): the tests' host references are most of their time, and the
  # machine has 16 cores; the ones that time the GPU or take GBs of it are RUN_SERIAL.
  timeout -k "$kill_grace" "$(left)" "${test_env[@]}" ctest --test-dir "$test_dir" --output-on-failure \
    -j "${CTEST_JOBS:-8}" --timeout "${CTEST_TIMEOUT:-300}" -L gpu --no-tests=error >"$logs/ctest.log" 2>&1
  rc=$?
  if [ "$rc" -eq 0 ]; then
    step ctest ok
  elif timed_out "$rc"; then
    step ctest "TIMED OUT (call budget; ctest.log has the tests that finished)"
  else
    step ctest FAILED
  fi
  step "ctest result" "$(grep -E 'tests passed|tests failed' "$logs/ctest.log" | tail -n 1)"
  step "ctest skipped" "$(grep -c '\*\*\*Skipped' "$logs/ctest.log")"
elif [ "$why" != skipped ]; then
  step ctest "$why"
fi
checkpoint

if ! want sanitize; then
  step compute-sanitizer "$why"
elif command -v compute-sanitizer >/dev/null 2>&1; then
  san_failed=()
  san_timed_out=()  # unfinished: no finding either way
  san_refusal=
  san_skipped=0
  san_runs=0
  san_start=$SECONDS
  # The binaries of the gpu-labelled tests (ctest's own list, so no CPU-only binary is sanitized
  # for nothing), kernels first, then layers, trainer and the rest: the budget may not reach them all.
  mapfile -t san_bins < <(timeout -k 1 "$(within 60)" ctest --test-dir "$test_dir" -L gpu --show-only=json-v1 2>/dev/null | python3 -c '
import json, sys
seen = []
for t in json.load(sys.stdin).get("tests", []):
    cmd = t.get("command") or []
    if cmd and cmd[0] not in seen:
        seen.append(cmd[0])
# By folder in a build (tests/kernels/...), by name in the prebuilt pack (bin/kernels_...).
order = ("kernels", "layers", "trainer")
rank = lambda b: next((i for i, d in enumerate(order) if f"/{d}/" in b or b.rsplit("/", 1)[-1].startswith(d + "_")),
                      len(order))
print("\n".join(sorted(seen, key=rank)))' 2>/dev/null)
  for test_bin in "${san_bins[@]}"; do
    [ -x "$test_bin" ] || continue
    # The operator suite through the timer: the kernel tests sanitize the same kernels, and its ~500
    # graphed calls under two tools would spend the budget the kernel tests need.
    # The same for the quick suites (the layer and trainer tests sanitize their kernels and layers).
    # The timer's own test breaks CUDA's rules on purpose (a launch the device refuses, a sync inside
    # a capture: API errors the sanitizer reports) and times a known-duration kernel the tools slow.
    case "$test_bin" in *operators_timing_gpu_test | *suites_quick_gpu_test | *gpu_timer_test) continue ;; esac
    for tool in memcheck racecheck; do
      if ((SECONDS - san_start >= ${SANITIZE_BUDGET:-300} || $(left) < $stage_min)); then
        san_skipped=$((san_skipped + 1))
        continue
      fi
      echo "== $tool $(basename "$test_bin")" >>"$logs/sanitizer.log"
      san_runs=$((san_runs + 1))
      san_limit=${SANITIZE_TIMEOUT:-120}
      ((san_limit > $(left))) && san_limit=$(left)
      # The drift study's 18000 device steps repeat fused_optimizer_test's kernels: left out here.
      timeout -k "$kill_grace" "$san_limit" "${test_env[@]}" compute-sanitizer --tool "$tool" --error-exitcode 9 "$test_bin" \
        --gtest_filter='-DriftStudyGpu.*' >"$logs/sanitizer-run.log" 2>&1
      rc=$?
      cat "$logs/sanitizer-run.log" >>"$logs/sanitizer.log"
      # Some machines' sanitizer refuses the device itself (seen on a gVisor H200: "Device not
      # supported", then error 999 at the first allocation). Every later run would fail the same way
      # and spend the budget, and "FAILED" would read as a finding: the stage stops and says so.
      san_refusal=$(grep -i -m 1 'device not supported\|device is not supported' "$logs/sanitizer-run.log" | cut -c1-160)
      if [ -n "$san_refusal" ]; then
        san_refusal="$san_refusal; at run $san_runs, $tool $(basename "$test_bin")"
        break 2
      fi
      if timed_out "$rc"; then
        san_timed_out+=("$tool $(basename "$test_bin")")
      elif [ "$rc" -ne 0 ]; then
        san_failed+=("$tool $(basename "$test_bin") rc=$rc")
      fi
    done
  done
  rm -f "$logs/sanitizer-run.log"  # each run's output is in sanitizer.log too
  san_status="ok ($san_runs runs)"
  [ "$san_runs" -eq 0 ] && san_status="NOTHING SANITIZED (no gpu test binary found in $test_dir)"
  [ -n "${san_refusal:-}" ] && san_status="NOT SUPPORTED here (compute-sanitizer: ${san_refusal}): stage stopped"
  [ ${#san_failed[@]} -gt 0 ] && san_status="FAILED: $(printf '%s; ' "${san_failed[@]}")"
  if [ ${#san_timed_out[@]} -gt 0 ]; then
    unfinished=$(printf '%s; ' "${san_timed_out[@]}")
    san_status="$san_status (timed out, so not checked: ${unfinished%; })"
  fi
  [ "$san_skipped" -gt 0 ] && san_status="$san_status (budget spent: $san_skipped run(s) not started)"
  step compute-sanitizer "$san_status"
else
  step compute-sanitizer "not installed"
fi
checkpoint

slug=
[ -x "$bin" ] && slug=$(timeout -k 5 "$(within 60)" "$bin" info --json 2>/dev/null | python3 -c 'import json,re,sys
d=json.load(sys.stdin)["device"]
print(re.sub(r"[^a-z0-9]+","-",d["name"].lower()).strip("-") if d else "cpu")' 2>/dev/null)
# (Not built: the build's step has said so, and run, dump and torch skip themselves.)
if [ -x "$bin" ] && { [ "$slug" = cpu ] || [ -z "$slug" ]; }; then
  # No device, or no answer: run, dump and torch would write into reports/cpu (the committed CPU
  # folder) or reports/unknown-device, so they are left out.
  if [ "$slug" = cpu ]; then
    step device "NONE VISIBLE to seqbench: $(timeout -k 1 "$(within 30)" "$bin" info 2>&1 | grep '^device:'); run, dump and torch skipped"
  else
    step device "UNKNOWN (seqbench info --json gave no device name); run, dump and torch skipped"
  fi
  for no_device_stage in run dump torch; do stages=${stages/ $no_device_stage / }; done
fi
dir=reports/${slug:-unknown-device}
kept_dir=$kept_reports/${slug:-unknown-device}
# RUN_RESUME=1: the reports this machine's earlier call kept, where the tree has none of that name
# (a report the session unpacked is newer or the same) and they are of this very build (git sha and
# source hash, as seqbench run requires to merge: an older build's would only be refused).
if [ "${RUN_RESUME:-0}" = 1 ] && [ -d "$kept_dir" ] && [ -x "$bin" ]; then
  mapfile -t restore < <(timeout -k 1 "$(within 30)" "$bin" info --json 2>/dev/null | python3 -c '
import glob, json, os, sys
build = json.load(sys.stdin)
for kept in sorted(glob.glob(os.path.join(sys.argv[1], "*.json"))):
    try:
        meta = json.load(open(kept))["meta"]
    except (OSError, ValueError, KeyError, TypeError):
        continue
    same = all(meta.get(k) == build.get(k) for k in ("git_sha", "source_hash"))
    if same and not os.path.exists(os.path.join(sys.argv[2], os.path.basename(kept))):
        print(kept)' "$kept_dir" "$dir" 2>/dev/null)
  if [ ${#restore[@]} -gt 0 ]; then
    mkdir -p "$dir" && cp -p "${restore[@]}" "$dir/" &&
      step "reports kept" "restored ${#restore[@]} report(s) of this build from this machine's earlier call into $dir (the tree had none of those names)"
  fi
fi
# A trace of the clocks, power, temperature and clock-event (throttle) reasons every 500 ms while the
# suites and the PyTorch baselines time (clocks.csv in logs.tar; one summary line, from
# tools/clock_trace.py): a report's meta.clocks is a single reading, which cannot show a power cap
# that came and went mid-suite. The field was renamed clocks_event_reasons (older drivers know
# only clocks_throttle_reasons), so the first name nvidia-smi accepts is used.
trace_pid=
if [[ "$stages" == *" run "* || "$stages" == *" torch "* ]] && command -v nvidia-smi >/dev/null 2>&1; then
  for reasons_field in clocks_event_reasons.active clocks_throttle_reasons.active; do
    trace_fields=$(python3 tools/clock_trace.py --fields),$reasons_field
    if timeout -k 5 20 nvidia-smi --query-gpu="$trace_fields" --format=csv,noheader,nounits >/dev/null 2>&1; then
      nvidia-smi --query-gpu="$trace_fields" --format=csv,noheader,nounits -lms 500 >"$logs/clocks.csv" 2>&1 &
      trace_pid=$!
      break
    fi
  done
  [ -z "$trace_pid" ] && step clocks "no trace (nvidia-smi accepts neither clock-event field)"
fi
stop_clock_trace() {
  [ -n "$trace_pid" ] || return 0
  kill "$trace_pid" 2>/dev/null
  wait "$trace_pid" 2>/dev/null
  trace_pid=
  step clocks "$(timeout -k 1 "$(within 30)" python3 tools/clock_trace.py "$logs/clocks.csv" 2>&1 | head -c 600)"
}
trap 'kill "$trace_pid" 2>/dev/null' EXIT
if ! want run; then
  step "seqbench run" "$why"
elif [ ! -x "$bin" ]; then
  step "seqbench run" "skipped (not built)"
else
  # One process per suite (all of them unless named): a sticky CUDA error ends only its own suite.
  run_names=()
  for ((i = 1; i < ${#suites[@]}; i += 2)); do run_names+=("${suites[$i]}"); done
  if [ ${#run_names[@]} -eq 0 ]; then
    mapfile -t run_names < <(timeout -k 1 "$(within 30)" "$bin" list --json |
      python3 -c 'import json,sys; print("\n".join(s["name"] for s in json.load(sys.stdin)["suites"]))')
  fi
  run_failed=()
  run_crashed=()
  run_incomplete=()
  run_not_started=()
  run_ok=()
  : >"$logs/run.log"
  for name in "${run_names[@]}"; do
    if (($(left) < $stage_min)); then
      run_not_started+=("$name")
      continue
    fi
    # The runner's own budget ends 20 s before the call's, so that it stops starting experiments
    # (its report rewritten after each) before `timeout` has to end it; at least 10 s.
    run_budget=$(($(left) - 20))
    ((run_budget < 10)) && run_budget=10
    report="$dir/$name.json"
    # RUN_FILTER selects by hand; RUN_RESUME=1 runs only what the suite's report lacks
    # (tools/resume_filter.py), merged into it, so that a suite too long for one call ends complete.
    run_filter=()
    if [ -n "${RUN_FILTER:-}" ]; then
      run_filter=(--filter "$RUN_FILTER")
    elif [ "${RUN_RESUME:-0}" = 1 ] && [ -f "$report" ]; then
      # The binary's build, so that a report of another build is replaced, not resumed (or, were
      # it complete, kept as this build's).
      timeout -k 1 "$(within 30)" "$bin" info --json >"$logs/build-info.json" 2>>"$logs/run.log"
      pending=$(timeout -k 1 "$(within 30)" "$bin" list --json "${quick[@]}" |
        python3 tools/resume_filter.py - "$report" "$name" --build "$logs/build-info.json" 2>>"$logs/run.log")
      case $? in
        0)
          # --keep-checks: the report's checks are this build's (a merge requires one build); the
          # runner runs them anyway where they are not whole (seqbench run --help).
          run_filter=(--filter "$pending" --keep-checks)
          echo "== $name: resumed, $(($(grep -o '|' <<<"$pending" | wc -l) + 1)) experiment(s) pending" >>"$logs/run.log"
          ;;
        3)
          run_ok+=("$name (complete: nothing to resume)")
          continue
          ;;
        4) echo "== $name: not resumable (see above); run whole" >>"$logs/run.log" ;;
        *)
          # A failed `seqbench list` or info, or bad input (exit 2): running whole would replace
          # the report an earlier call measured with what this call's budget allows.
          echo "== $name: resume_filter failed (see above); not run, the report left as it is" >>"$logs/run.log"
          run_failed+=("$name (not resumed: tools/resume_filter.py failed, see run.log)")
          continue
          ;;
      esac
    fi
    # Written or not: the report is replaced (rename: a new inode) whenever the run writes it.
    before=$(stat -c '%i %Y' "$report" 2>/dev/null)
    timeout -k "$kill_grace" "$(left)" "$bin" run "${quick[@]}" --suite "$name" "${run_filter[@]}" --out "$dir" \
      --budget-seconds "$run_budget" 2>&1 | tee -a "$logs/run.log"
    rc=${PIPESTATUS[0]}
    after=$(stat -c '%i %Y' "$report" 2>/dev/null)
    written=""
    if [ -n "$after" ] && [ "$after" != "$before" ]; then
      written=$(python3 -c 'import json,sys
d=json.load(open(sys.argv[1]))
failed=sum(1 for c in d["checks"] if not c["passed"])
not_run=len(d.get("not_run", []))
print(f"report written: {failed} failed check(s), {not_run} experiment(s) not run")' "$report" 2>/dev/null ||
        echo "report written but unreadable")
    fi
    if killed "$rc"; then
      run_failed+=("$name (KILLED ${kill_grace} s after the call budget's SIGTERM: a hung or long variant; ${written:-no report written})")
    elif timed_out "$rc"; then
      run_failed+=("$name (TIMED OUT: call budget; ${written:-no report written})")
    elif [ "$rc" -eq 0 ]; then
      run_ok+=("$name")
    elif [ "$rc" -eq 3 ]; then
      run_incomplete+=("$name (${written:-no report written})")
    elif ((rc > 128)); then
      run_crashed+=("$name (CRASHED by signal $((rc - 128)); ${written:-no report written})")
    elif [ -n "$written" ]; then
      run_failed+=("$name (rc=$rc, $written)")
    else
      error=$(tail -n 40 "$logs/run.log" | grep 'seqbench: error' | tail -n 1 | cut -c1-200)
      run_crashed+=("$name (CRASHED rc=$rc, no report written: ${error:-see run.log})")
    fi
    pack_reports
    checkpoint
  done
  # A suite that never started did not fail: it is listed apart, for the next call.
  detail=""
  [ ${#run_incomplete[@]} -gt 0 ] &&
    detail="$detail; incomplete (time budget, see the report's not_run): ${run_incomplete[*]}"
  [ ${#run_not_started[@]} -gt 0 ] && detail="$detail; not started (call budget spent): ${run_not_started[*]}"
  if [ ${#run_names[@]} -eq 0 ]; then
    step "seqbench run" "FAILED (no suite listed)"
  elif [ ${#run_failed[@]} -eq 0 ] && [ ${#run_crashed[@]} -eq 0 ]; then
    status=ok
    [ ${#run_incomplete[@]} -gt 0 ] || [ ${#run_not_started[@]} -gt 0 ] && status=incomplete
    step "seqbench run" "$status (${run_ok[*]:-none})$detail"
  else
    bad=("${run_crashed[@]}" "${run_failed[@]}")
    step "seqbench run" "FAILED: $(printf '%s; ' "${bad[@]}")ok: ${run_ok[*]:-none}$detail"
  fi
fi
checkpoint
# The PyTorch baselines: only the suites it maps (operators, trainer, layers), only where torch imports.
torch_suites=()
for ((i = 1; i < ${#suites[@]}; i += 2)); do
  case "${suites[$i]}" in operators | trainer | layers) torch_suites+=(--suite "${suites[$i]}") ;; esac
done
# The parity dump: quick shapes (numerics, not scale); the runner's --parity reads every manifest.
dump_dir=build/gpu-dump
if ! want dump; then
  step "seqbench dump" "$why"
elif [ ${#suites[@]} -gt 0 ] && [ ${#torch_suites[@]} -eq 0 ]; then
  step "seqbench dump" "skipped (no suite the PyTorch runner maps)"
elif [ ! -x "$bin" ]; then
  step "seqbench dump" "skipped (not built)"
else
  rm -rf "$dump_dir"
  # With the torch stage to follow, the dump gets half of what is left: it must not starve the
  # stage that reads it.
  dump_limit=$(left)
  [[ "$stages" == *" torch "* ]] && dump_limit=$((dump_limit / 2))
  timeout -k "$kill_grace" "$dump_limit" "$bin" dump --quick "${torch_suites[@]}" --out "$dump_dir" \
    >"$logs/dump.log" 2>&1
  rc=$?
  if [ "$rc" -eq 0 ]; then
    step "seqbench dump" "ok ($(du -sh "$dump_dir" | cut -f1))"
  elif timed_out "$rc"; then
    step "seqbench dump" "TIMED OUT (its share of the call: $dump_limit s; dump.log in logs.tar)"
  else
    step "seqbench dump" "FAILED (see dump.log in logs.tar)"
  fi
fi
checkpoint
parity=()
[ -d "$dump_dir" ] && parity=(--parity "$dump_dir")
torch_filter=()
[ -n "${TORCH_FILTER:-}" ] && torch_filter=(--filter "$TORCH_FILTER")
if ! want torch; then
  step "pytorch baselines" "$why"
elif [ ${#suites[@]} -gt 0 ] && [ ${#torch_suites[@]} -eq 0 ]; then
  step "pytorch baselines" "skipped (no operators, trainer or layers suite requested)"
elif ! python3 -c 'import torch' >/dev/null 2>&1; then
  step "pytorch baselines" "skipped (torch not importable)"
elif [ ! -x "$bin" ]; then
  step "pytorch baselines" "skipped (seqbench not built)"
else
  # The runner's own budget ends 30 s before the call's, so that it stops starting experiments
  # (and writes its reports) before `timeout` has to end it; at least 10 s.
  torch_budget=$(($(left) - 30))
  ((torch_budget < 10)) && torch_budget=10
  timeout -k "$kill_grace" "$(left)" python3 suites/pytorch/run.py --seqbench "$bin" "${quick[@]}" "${torch_suites[@]}" \
    "${torch_filter[@]}" "${parity[@]}" --budget-seconds "$torch_budget" --out "$dir" 2>&1 |
    tee "$logs/pytorch.log"
  rc=$?
  filtered=${TORCH_FILTER:+ (TORCH_FILTER=$TORCH_FILTER)}
  if [ "$rc" -eq 0 ]; then
    step "pytorch baselines" "ok$filtered"
  elif [ "$rc" -eq 3 ]; then
    step "pytorch baselines" "incomplete$filtered: the time budget left experiments unstarted (see pytorch.log; the rest with TORCH_FILTER)"
  elif timed_out "$rc"; then
    step "pytorch baselines" "TIMED OUT (call budget; the reports hold what finished, see pytorch.log in logs.tar)"
  else
    step "pytorch baselines" "FAILED$filtered (see pytorch.log in logs.tar)"
  fi
  pack_reports
fi
stop_clock_trace
checkpoint
if [[ "$stages" == *" run "* || "$stages" == *" torch "* ]] && [ -x "$bin" ] &&
   ls "$dir"/*.json >/dev/null 2>&1; then
  if timeout -k 1 "$(within 30)" "$bin" table "$dir"/*.json --output "$dir/TABLES.md" 2>"$logs/table.log"; then
    step tables "$dir/TABLES.md"
  else
    rc=$?
    step tables "FAILED (exit $rc; $(head -c 300 "$logs/table.log")): $dir/TABLES.md may be stale"
  fi
  # The issues' targets judged from every report in the folder (suites/targets.h). Its exit status
  # is the verdict (0 met, 1 missed, 3 not measured), not a stage failure; anything else is one, and
  # leaves no TARGETS.md behind that an earlier call wrote.
  rm -f "$dir/TARGETS.md"
  verdict=$(timeout -k 1 "$(within 30)" "$bin" targets "$dir"/*.json --output "$dir/TARGETS.md" 2>&1)
  rc=$?
  case $rc in
    0 | 1 | 3) step targets "${verdict#targets: }" ;;
    *) step targets "FAILED (exit $rc): ${verdict:-no output}" ;;
  esac
  pack_reports
fi
if [ -x "$bin" ]; then
  timeout -k 1 "$(within 30)" "$bin" info >"$logs/info.txt" 2>&1
else
  echo "seqbench info: not built" >"$logs/info.txt"
fi
checkpoint

echo
echo "== summary =="
cat "$logs/info.txt"
printf '%s\n' "${summary[@]}"
