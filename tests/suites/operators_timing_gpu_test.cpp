// The operator suite's quick experiments through the runner and the real GpuTimer, as `seqbench run`
// times them: every variant of every experiment must replay a CUDA graph of its calls_per_sample
// calls (one per prepared copy) with no note, which is the suite's timing rule (suites/gpu_timer.h,
// rule 5 and graph_calls_per_sample) checked before any report is taken. A kernel that
// synchronizes, allocates or strays off its stream inside a launcher fails here by name.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "suites/experiment.h"
#include "tests/common/gpu_test.h"
#include "tests/suites/two_sample_timing.h"

namespace seqbench {
namespace {

#if defined(SEQBENCH_SIMT)
// Under tests/simt the kernels run on CPU fibers, where the quick shapes take an hour: the tiny
// shapes (two copies a sample) run the same work functions through the same timing path.
constexpr SuiteOptions kShapes{.quick = true, .tiny = true};
#else
constexpr SuiteOptions kShapes{.quick = true};
#endif

TEST(OperatorSuiteGpu, EveryQuickExperimentReplaysAGraphOfItsCopies) {
  SEQBENCH_REQUIRE_GPU();
  const std::vector<SuiteSpec> suites = all_suites(kShapes);
  const SuiteSpec& operators = find_suite(suites, "operators");
  const nlohmann::json measured = testing::time_every_experiment_twice(operators);
  ASSERT_EQ(measured.size(), operators.experiments.size());
  int rotated = 0;
  for (std::size_t i = 0; i < measured.size(); ++i) {
    const ExperimentSpec& spec = operators.experiments[i];
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
