// `seqbench run` and `seqbench check`: select suites, time their experiments through Google
// Benchmark (registration, filtering, repetitions) with GpuTimer's manual time, run their checks,
// and write one schema-v1 report per suite.
#pragma once

#include <cstdint>
#include <filesystem>
#include <iosfwd>
#include <string>
#include <utility>
#include <vector>

#include "core/check_result.h"
#include "suites/experiment.h"

namespace seqbench {

struct RunOptions {
  std::vector<std::string> suites;  // empty: all
  std::string filter;               // ECMAScript regex over "suite/experiment/variant" and check names
  std::filesystem::path out_dir;    // reports land in out_dir/<suite>.json
  bool quick = false;
  std::uint64_t seed = 20261122;
  int repetitions = 1;
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
};

// Throws seqbench::Error (before anything long starts) for an unknown suite, a bad regex, a bad
// repetition count or an output folder that cannot be written. An experiment that throws while it
// is prepared or timed is left out of its suite's report and recorded there as a failed check
// "run/<suite>/<experiment>/<variant>" with the error (counted in failed_checks), so one
// unsupported case costs neither the other measurements nor the exit status.
RunResult run_suites(const RunOptions& options, std::ostream& log);

struct CheckOptions {
  std::vector<std::string> suites;
  std::string filter;
  std::uint64_t seed = 20261122;
};

// Every selected suite's checks: CPU checks always, GPU checks where a device is present.
std::vector<CheckResult> run_checks(const CheckOptions& options, std::ostream& log,
                                    std::vector<SkippedSuite>* skipped = nullptr);

}  // namespace seqbench
