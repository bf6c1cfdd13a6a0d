// The layers and trainer suites' quick runs on the device, through the runner's own timing path,
// so that the GPU test call of a lease (tools/gpu.sh, call 1) already runs every host path a
// `seqbench run --suite layers|trainer` would: each experiment's prepare (layer construction,
// parameter blocks, planning), each variant's work under the real GpuTimer (two samples: what is
// checked is that it runs, not how long it takes), and every GPU check family, including the
// Fig. 20 memory loops, which no other test calls.
//
// A check family that throws (checks_or_failure's "checks/<family>") or a variant that fails fails
// this test by name. A check that ran and missed its target (a peak ratio, a speedup) is printed,
// not failed: targets belong to the reports, not to tests.
#include <gtest/gtest.h>

#include <cstdint>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "suites/experiment.h"
#include "tests/common/gpu_test.h"
#include "tests/suites/two_sample_timing.h"

namespace seqbench {
namespace {

constexpr std::uint64_t kSeed = 20261124;

void run_quick_suite(const std::string& name) {
  const std::vector<SuiteSpec> suites = all_suites(SuiteOptions{true});
  const SuiteSpec& suite = find_suite(suites, name);
  ASSERT_TRUE(suite.gpu_checks) << name << " has no GPU checks";
  for (const CheckResult& c : suite.gpu_checks(kSeed)) {
    EXPECT_NE(c.name.rfind("checks/", 0), 0u)
        << name << ": check family threw: " << c.name << ": " << c.detail;
    if (!c.passed)
      std::cout << "[ " << name << " ] check not passed (a target, reported): " << c.name << "\n";
  }
  const nlohmann::json measured = testing::time_every_experiment_twice(suite);
  for (const nlohmann::json& e : measured)
    for (const nlohmann::json& v : e.at("variants"))
      EXPECT_GT(v.at("median_ms").get<double>(), 0.0) << e.at("name") << "/" << v.at("name");
}

TEST(QuickSuitesGpu, LayersSuiteRunsEveryExperimentAndCheckFamily) {
  SEQBENCH_REQUIRE_GPU();
  run_quick_suite("layers");
}

TEST(QuickSuitesGpu, TrainerSuiteRunsEveryExperimentAndCheckFamily) {
  SEQBENCH_REQUIRE_GPU();
  run_quick_suite("trainer");
}

}  // namespace
}  // namespace seqbench
