// The runner's timing loop, exposed for its CPU tests (tests/suites/runner_test.cpp): a fake
// sampler stands in for GpuTimer, so that the failure-to-check path and the preparing and freeing of
// experiments can be driven without a device. Not part of the public interface (runner.h).
#pragma once

#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <ostream>
#include <vector>

#include "core/check_result.h"
#include "suites/experiment.h"
#include "suites/gpu_timer.h"

namespace seqbench::runner_detail {

// Times the work, `calls_per_sample` calls a sample (the work rotates over that many copies of the
// experiment), through a CUDA graph when the experiment asks for one; returns the milliseconds per
// call, one entry per sample, and how they were taken (GpuTimer::sample in the runner).
using Sampler = std::function<TimedSamples(const Work&, bool cuda_graph, int calls_per_sample)>;

// Times the selected experiments of one suite through Google Benchmark; returns their report
// entries. Each experiment is prepared (ExperimentSpec::calls_per_sample times, each copy's variant
// called in turn) on its first variant's first run and freed after its last variant's last
// repetition, so one experiment's state is resident at a time. An experiment whose
// prepare or timing throws (an epilogue the device's cuBLASLt lacks, memory) leaves the report and
// adds a failed check "run/<suite>/<experiment>/<variant>" carrying the error to `failures`, one per
// failing variant: the other experiments' measurements are kept, and the run still exits non-zero.
// Each variant records "calls_per_sample", "cuda_graph" (true only when every repetition replayed a graph)
// and, when the sampler gave one, its first "note" (why a requested graph was not used), to which a variant
// whose repetitions were timed both ways adds how many replayed a graph (their samples are pooled).
nlohmann::json time_experiments(const SuiteSpec& suite, const std::vector<const ExperimentSpec*>& experiments,
                                const Sampler& sample, std::optional<double> copy_gbps, int repetitions,
                                std::ostream& log, std::vector<CheckResult>& failures);

}  // namespace seqbench::runner_detail
