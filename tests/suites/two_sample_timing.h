// The GPU suite tests' way of running a suite's experiments: every experiment of `suite` through
// the runner's own timing path (runner_detail::time_experiments) under the quick policy cut to two
// samples a variant, since what those tests check is that and how each variant was timed, not how
// long it took. A failed variant is a gtest failure naming it; the measured entries are returned
// (one per experiment, in the suite's order).
#pragma once

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <vector>

#include "suites/experiment.h"
#include "suites/gpu_timer.h"
#include "suites/runner_detail.h"

namespace seqbench::testing {

inline nlohmann::json time_every_experiment_twice(const SuiteSpec& suite) {
  std::vector<const ExperimentSpec*> selected;
  for (const ExperimentSpec& e : suite.experiments) selected.push_back(&e);
  EXPECT_FALSE(selected.empty()) << suite.name << " has no experiments";
  TimerPolicy policy = TimerPolicy::quick();
  policy.min_samples = 2;
  policy.max_samples = 2;
  GpuTimer timer(policy);
  std::vector<CheckResult> failures;
  std::ostringstream log;
  const nlohmann::json measured = runner_detail::time_experiments(
      suite, selected,
      [&](const Work& work, bool cuda_graph, int calls) { return timer.sample(work, cuda_graph, calls); },
      std::nullopt, 1, log, failures);
  for (const CheckResult& f : failures) ADD_FAILURE() << suite.name << ": " << f.name << ": " << f.detail;
  EXPECT_EQ(measured.size(), selected.size()) << log.str();
  for (std::size_t i = 0; i < measured.size() && i < selected.size(); ++i)
    EXPECT_EQ(measured[i].at("name"), selected[i]->name);
  return measured;
}

}  // namespace seqbench::testing
