// The runner's timing loop, exposed for its CPU tests (tests/suites/runner_test.cpp): a fake
// sampler stands in for GpuTimer, so that the failure-to-check path and the preparing and freeing of
// experiments can be driven without a device. Not part of the public interface (runner.h).
#pragma once

#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "core/check_result.h"
#include "suites/experiment.h"
#include "suites/gpu_timer.h"

namespace seqbench::runner_detail {

// Times the work, `calls_per_sample` calls a sample (the work rotates over that many copies of the
// experiment), through a CUDA graph when the experiment asks for one; returns the milliseconds per
// call, one entry per sample, and how they were taken (GpuTimer::sample in the runner).
using Sampler = std::function<TimedSamples(const Work&, bool cuda_graph, int calls_per_sample)>;

// The last part of the run/ failure of an experiment whose samples could not be summarized (no
// variant is named so: variant names are identifiers).
inline constexpr const char* kSummaryFailure = "(summary)";

// Times the selected experiments of one suite through Google Benchmark; returns their report
// entries. Each experiment is prepared (ExperimentSpec::calls_per_sample times, each copy's variant
// called in turn) on its first variant's first run and freed after its last variant's last
// repetition, so one experiment's state is resident at a time. An experiment whose
// prepare or timing throws (an epilogue the device's cuBLASLt lacks, memory) leaves the report and
// adds a failed check "run/<suite>/<experiment>/<variant>" carrying the error to `failures`, one per
// failing variant: the other experiments' measurements are kept, and the run still exits non-zero.
// One whose samples, all taken, cannot be summarized (a p20 of 0 ms) adds one failed check
// "run/<suite>/<experiment>/(summary)", detail "not reported: <error>", and leaves the report too.
// Each variant records "calls_per_sample", "cuda_graph" (true only when every repetition replayed a graph)
// and, when the sampler gave one, its first "note" (why a requested graph was not used), to which a variant
// whose repetitions were timed both ways adds how many replayed a graph (their samples are pooled).
nlohmann::json time_experiments(const SuiteSpec& suite, const std::vector<const ExperimentSpec*>& experiments,
                                const Sampler& sample, std::optional<double> copy_gbps, int repetitions,
                                std::ostream& log, std::vector<CheckResult>& failures);

// What time_experiments_controlled did: the measured entries and failures as above, and the
// experiments it did not (fully) run, each {"experiment", "reason"} in `not_run`.
struct TimingOutcome {
  nlohmann::json experiments = nlohmann::json::array();
  std::vector<CheckResult> failures;
  nlohmann::json not_run = nlohmann::json::array();
  std::string device_lost;             // non-empty: "after <suite/experiment/variant>: <sticky error>"
  bool stopped = false;                // a stop request (SIGTERM, SIGINT) ended the run early
  std::size_t not_started_budget = 0;  // experiments the budget kept from starting
};

// How the runner steers the loop; every member is optional.
struct TimingHooks {
  // Before each experiment: a non-empty reason keeps it from starting (the time budget); it is
  // listed in not_run as "not started: <reason>".
  std::function<std::string()> may_not_start;
  // Whether a stop was requested: no variant starts after it; the unfinished experiments are
  // listed as "not run: <reason>" (stop_reason, default "stopped").
  std::function<bool()> stop_requested;
  std::string stop_reason = "stopped";
  // After a variant failed: non-empty when the device is lost (a sticky CUDA error) with what it
  // says; the loop then stops and lists every experiment not finished as "not run: device lost
  // after <suite/experiment/variant>: <error>" instead of recording each as its own failure.
  std::function<std::string()> sticky_error;
  // After every experiment (measured, failed or not run), with the outcome so far: the runner
  // rewrites the report here. `pending` are the experiments not yet reached.
  std::function<void(const TimingOutcome&, const std::vector<const ExperimentSpec*>& pending)>
      after_experiment;
};

// time_experiments, one experiment at a time (each its own Google Benchmark pass), under `hooks`.
// An experiment whose prepare() failed is not prepared again for its other variants: each of them
// fails with the same error. Prints "start <suite/experiment/variant>" (flushed) before each
// variant's run and its elapsed seconds after it.
TimingOutcome time_experiments_controlled(const SuiteSpec& suite,
                                          const std::vector<const ExperimentSpec*>& experiments,
                                          const Sampler& sample, std::optional<double> copy_gbps,
                                          int repetitions, std::ostream& log, const TimingHooks& hooks);

// SIGTERM (gpu.sh's `timeout`) and SIGINT, within the scope (run_suites holds one), set a flag
// instead of ending the process: the runner starts nothing new, writes what finished and exits
// non-zero. The first signal puts the default back, so a second one kills as usual; the scope's
// end restores the handlers that were there before.
class StopSignalScope {
 public:
  StopSignalScope();
  ~StopSignalScope();
  StopSignalScope(const StopSignalScope&) = delete;
  StopSignalScope& operator=(const StopSignalScope&) = delete;
  static int received();  // the signal received since the scope began, or 0

 private:
  void (*term_)(int);
  void (*interrupt_)(int);
};

// Throws seqbench::Error unless `old` (a valid report) may take a filtered run's part whose meta
// is `meta`: same suite, device, git sha (neither "unknown") and quick flag, and the same
// meta.source_hash where both have one, else neither dirty; `what` names the file.
void require_mergeable(const nlohmann::json& old, const nlohmann::json& meta, const std::string& suite,
                       const std::string& what);

// Why --keep-checks may not keep the checks of `old` (a valid report that a filtered run merges
// into, so of the same build); empty when it may. They must be whole: some part ran the check
// families unfiltered (meta.parts, or meta where a report has none; a part without checks_run ran
// them), and no family failed (a failed "checks/<suite>/..." entry: a family that threw, or a lost
// device, reported none of its checks).
std::string checks_not_keepable(const nlohmann::json& old);

// `fresh` (a filtered run's report, meta.parts holding its one part) merged into `old`: experiments
// this run measured or failed replace the old ones of that name; checks replace by name (and an
// old "run/" failure of an experiment this run attempted goes); not_run entries of experiments the
// merged report holds measured are dropped; meta is this run's, meta.parts the old parts and this
// one, meta.git_dirty true when any part's was.
nlohmann::json merge_reports(const nlohmann::json& old, const nlohmann::json& fresh);

}  // namespace seqbench::runner_detail
