// The operator suite's quick experiments through the runner and the real GpuTimer, as `seqbench run`
// times them: every variant of every experiment must replay a CUDA graph of its calls_per_sample
// calls (one per prepared copy) with no note, which is the suite's timing rule (suites/gpu_timer.h,
// rule 5 and graph_calls_per_sample) checked before any report is taken. A kernel that
// synchronizes, allocates or strays off its stream inside a launcher fails here by name.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "suites/experiment.h"
#include "suites/gpu_timer.h"
#include "suites/runner_detail.h"
#include "tests/common/gpu_test.h"

namespace seqbench {
namespace {

TEST(OperatorSuiteGpu, EveryQuickExperimentReplaysAGraphOfItsCopies) {
  SEQBENCH_REQUIRE_GPU();
  const std::vector<SuiteSpec> suites = all_suites(SuiteOptions{true});
  const SuiteSpec& operators = find_suite(suites, "operators");
  std::vector<const ExperimentSpec*> selected;
  for (const ExperimentSpec& e : operators.experiments) selected.push_back(&e);
  ASSERT_FALSE(selected.empty());
  // Two samples a variant: what is checked is how they were taken, not how long they took.
  TimerPolicy policy = TimerPolicy::quick();
  policy.min_samples = 2;
  policy.max_samples = 2;
  GpuTimer timer(policy);
  std::vector<CheckResult> failures;
  std::ostringstream log;
  const nlohmann::json measured = runner_detail::time_experiments(
      operators, selected,
      [&](const Work& work, bool cuda_graph, int calls) { return timer.sample(work, cuda_graph, calls); },
      std::nullopt, 1, log, failures);
  for (const CheckResult& f : failures) ADD_FAILURE() << f.name << ": " << f.detail;
  ASSERT_EQ(measured.size(), selected.size()) << log.str();
  int rotated = 0;
  for (std::size_t i = 0; i < selected.size(); ++i) {
    const ExperimentSpec& spec = *selected[i];
    const nlohmann::json& e = measured[i];
    ASSERT_EQ(e.at("name"), spec.name);
    rotated += spec.calls_per_sample > 1;
    for (const nlohmann::json& v : e.at("variants")) {
      const std::string name = spec.name + "/" + v.at("name").get<std::string>();
      EXPECT_TRUE(v.at("cuda_graph").get<bool>())
          << name << ": " << v.value("note", std::string("(no note)"));
      EXPECT_FALSE(v.contains("note")) << name << ": " << v.value("note", std::string());
      EXPECT_EQ(v.at("calls_per_sample").get<int>(), spec.calls_per_sample) << name;
      EXPECT_GT(v.at("median_ms").get<double>(), 0.0) << name;
    }
  }
  EXPECT_GT(rotated, 0);  // the quick shapes are small: some samples hold several copies' calls
}

}  // namespace
}  // namespace seqbench
