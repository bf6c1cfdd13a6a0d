// The precision drift study with its steps on the device (trainer/drift_study.h): the fused
// kernels' trajectory over a whole training run ends bitwise where the host emulation's does, in
// every precision mode, so that the drift the CPU study reports is the device's. One step's
// bitwise agreement is fused_optimizer_test's; this is the same promise compounded over many
// steps, each feeding the next step's gradient.
#include <gtest/gtest.h>

#include <iostream>

#include "core/error.h"
#include "tests/common/gpu_test.h"
#include "trainer/drift_study.h"

namespace seqbench::trainer {
namespace {

void expect_device_equals_host(const DriftStudyOptions& options) {
  const std::vector<DriftResult> host = run_drift_study(options);
  const std::vector<DriftResult> device = run_drift_study(options, DriftBackend::device);
  const std::vector<CheckResult> checks = drift_device_checks(host, device);
  ASSERT_EQ(checks.size(), 6u);
  for (const CheckResult& c : checks) {
    std::cout << c.name << ": " << c.detail << "\n";
    EXPECT_TRUE(c.passed) << c.name << ": " << c.detail;
  }
}

// The study's problem (2048 parameters: whole 16-byte vectors) and an odd one (203: a scalar
// tail after the last vector, in every dtype).
TEST(DriftStudyGpu, DeviceTrajectoryEqualsHostEmulationBitwise) {
  SEQBENCH_REQUIRE_GPU();
  DriftStudyOptions options;  // 1000 steps
  expect_device_equals_host(options);
  options.params = 203;
  options.samples = 37;
  options.seed += 1;
  expect_device_equals_host(options);
}

TEST(DriftStudyGpu, SgdWithNesterovAndAdamWToo) {
  SEQBENCH_REQUIRE_GPU();
  DriftStudyOptions options;
  options.params = 203;
  options.samples = 37;
  options.steps = 500;
  options.config.kind = OptimizerKind::sgd;
  options.config.momentum = 0.9;
  options.config.nesterov = true;
  options.lr = 1e-2;
  expect_device_equals_host(options);
  options.config = OptimizerConfig{};
  options.config.kind = OptimizerKind::adamw;
  options.config.weight_decay = 0.01;
  options.lr = 1e-3;
  expect_device_equals_host(options);
}

}  // namespace
}  // namespace seqbench::trainer
