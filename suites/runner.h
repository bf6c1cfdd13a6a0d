// `seqbench run` and `seqbench check`: select suites, time their experiments through Google
// Benchmark (registration, filtering, repetitions) with GpuTimer's manual time, run their checks,
// and write one schema-v1 report per suite.
#pragma once

#include <cstdint>
#include <filesystem>
#include <iosfwd>
#include <optional>
#include <regex>
#include <string>
#include <utility>
#include <vector>

#include "core/check_result.h"
#include "suites/experiment.h"

namespace seqbench {

struct RunOptions {
  std::vector<std::string> suites;  // empty: all
  std::string filter;               // ECMAScript regex over "suite/experiment/variant" and check names
  std::filesystem::path out_dir;    // reports land in out_dir/<suite>.json; empty: seqbench-out/<device slug>
  bool quick = false;
  std::uint64_t seed = 20261122;
  int repetitions = 1;
  // Seconds from the start: an experiment starts only while what is left covers the longest one so
  // far (at least 10 s); the others are listed "not started: time budget". Empty: no limit.
  std::optional<double> budget_seconds;
  // --keep-checks (needs a filter): a suite whose report in out_dir already holds complete checks
  // of this build (some part ran them unfiltered, and no check family failed) keeps them instead
  // of running them again; any other suite runs its checks as usual (tools/gpu.sh's RUN_RESUME: a
  // suite the last call left incomplete goes on without repeating what it already checked).
  bool keep_checks = false;
};

struct SkippedSuite {
  std::string suite;
  std::string reason;
};

struct RunResult {
  std::vector<std::filesystem::path> reports;
  std::vector<SkippedSuite> skipped;
  std::size_t checks = 0;
  std::size_t failed_checks = 0;
  std::size_t not_started = 0;  // experiments (or whole suites) the time budget kept from starting
  std::size_t kept_checks = 0;  // suites whose report kept its earlier checks (--keep-checks)
  std::vector<std::string>
      not_run;              // "<suite>/<experiment>: <reason>", and whole suites as "<suite>: <reason>"
  std::string device_lost;  // non-empty: a sticky CUDA error ended the device ("after ...: error")
  std::string
      stopped_by;  // non-empty: a SIGTERM or SIGINT kept something from running ("stopped by SIGTERM")
  std::filesystem::path out_dir;  // where the reports went (RunOptions::out_dir, or the default)
  bool gpu = false;               // whether the run saw a device
};

// Throws seqbench::Error for a combination of options run_suites refuses (a repetition count or a
// budget out of range, --keep-checks without a non-empty filter); run_suites calls it first, and
// the command line before it runs anything, as a usage error.
void require_valid_run_options(const RunOptions& options);

// Throws seqbench::Error (before anything long starts) for an unknown suite, a bad regex, a bad
// repetition count, an output folder that cannot be written, a filtered run whose existing report
// cannot take its part (another suite, device, git sha -- or an unknown one -- or quick setting), or
// SEQBENCH_EXPECT_GPU set with no GPU visible and a suite that needs one.
//
// Run control. Each suite's report is rewritten atomically after its checks and after every
// experiment, so that a crash or a kill leaves what finished (the experiments not reached listed in
// "not_run"). A check family (a suite's CPU or GPU checks) that throws is a failed check
// "checks/<suite>/<cpu|gpu>" with the message. SIGTERM and SIGINT start nothing new: what finished
// is written and stopped_by says so. After a failure a sticky CUDA error stops all timing: the rest
// is listed "not run: device lost after ...", and a later suite's GPU check family is a failed check
// "checks/<suite>/gpu" saying the same (that suite's report, if one is there, stays as it was and
// the failure and not_run entries are only in the result). With a filter, the report merges into the one
// already in out_dir (experiments and checks replaced by name; meta.parts lists the runs); meta records
// quick, filter, repetitions and the timer policy. An experiment that throws while it
// is prepared or timed is left out of its suite's report and recorded there as a failed check
// "run/<suite>/<experiment>/<variant>" with the error (counted in failed_checks), so one
// unsupported case costs neither the other measurements nor the exit status.
RunResult run_suites(const RunOptions& options, std::ostream& log);

// The --filter regex (ECMAScript; empty selects everything) of run, check and dump, or
// seqbench::Error "invalid --filter regex ...": one that does not parse, or is longer than 64K
// characters or nests groups more than 256 deep (std::regex's recursive compiler would overflow
// the stack on such patterns; runner.cpp says where the limits come from).
std::regex compile_filter(const std::string& filter);

struct CheckOptions {
  std::vector<std::string> suites;
  std::string filter;
  std::uint64_t seed = 20261122;
};

// Every selected suite's checks: CPU checks always, GPU checks where a device is present.
std::vector<CheckResult> run_checks(const CheckOptions& options, std::ostream& log,
                                    std::vector<SkippedSuite>* skipped = nullptr);

}  // namespace seqbench
