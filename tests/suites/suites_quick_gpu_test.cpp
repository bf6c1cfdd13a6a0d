// The layers and trainer suites' quick runs on the device, through the runner's own timing path,
// so that the GPU test call of a lease (tools/gpu.sh, call 1) already runs every host path a
// `seqbench run --suite layers|trainer` would: each experiment's prepare (layer construction,
// parameter blocks, planning), each variant's work under the real GpuTimer (two samples: what is
// checked is that it runs, not how long it takes), and every check family, including the Fig. 20
// memory loops, which no other test calls. Under tests/simt the same runs at the tiny shapes
// (SuiteOptions::tiny), on the CPU.
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

#if defined(SEQBENCH_SIMT)
// Under tests/simt the kernels and GEMMs run on CPU fibers, where the quick shapes (Transformer-Big
// layers, 61M-parameter updates) take hours: the tiny shapes run the same experiments' code.
constexpr SuiteOptions kShapes{.quick = true, .tiny = true};
#else
constexpr SuiteOptions kShapes{.quick = true};
#endif

// `gpu_family`: whether the suite has a GPU check family (the layers suite's memory loops; the
// trainer suite's drift study on the device, against the host emulation). Every family that
// `seqbench run` would run here runs, the CPU one included.
void run_quick_suite(const std::string& name, bool gpu_family) {
  const std::vector<SuiteSpec> suites = all_suites(kShapes);
  const SuiteSpec& suite = find_suite(suites, name);
  ASSERT_EQ(static_cast<bool>(suite.gpu_checks), gpu_family) << name;
  std::vector<CheckResult> checks;
  for (const auto& family : {suite.cpu_checks, suite.gpu_checks}) {
    if (!family) continue;
    const std::vector<CheckResult> some = family(kSeed);
    EXPECT_FALSE(some.empty()) << name << ": a check family returned no checks";
    checks.insert(checks.end(), some.begin(), some.end());
  }
  for (const CheckResult& c : checks) {
    EXPECT_NE(c.name.rfind("checks/", 0), 0u)
        << name << ": check family threw: " << c.name << ": " << c.detail;
    if (!c.passed)
      std::cout << "[ " << name << " ] check not passed (a target, reported): " << c.name << ": " << c.detail
                << "\n";
    // The numbers behind a verdict (e.g. the device memory a memory loop's second half took, as
    // cudaMemGetInfo saw it), so that the test log has them.
    for (const auto& [key, value] : c.values)
      std::cout << "[ " << name << " ] " << c.name << ": " << key << " = " << value << "\n";
  }
  const nlohmann::json measured = testing::time_every_experiment_twice(suite);
  for (const nlohmann::json& e : measured)
    for (const nlohmann::json& v : e.at("variants"))
      EXPECT_GT(v.at("median_ms").get<double>(), 0.0) << e.at("name") << "/" << v.at("name");
}

TEST(QuickSuitesGpu, LayersSuiteRunsEveryExperimentAndCheckFamily) {
  SEQBENCH_REQUIRE_GPU();
  run_quick_suite("layers", true);
}

TEST(QuickSuitesGpu, TrainerSuiteRunsEveryExperimentAndCheckFamily) {
  SEQBENCH_REQUIRE_GPU();
  run_quick_suite("trainer", true);
}

}  // namespace
}  // namespace seqbench
