// The precision drift study (trainer/NOTES.md): after 1000 Adam steps on least squares
// (2048 parameters, 256 samples, lr 1e-3), the distance of each precision mode from fp64 training,
// as a fraction of how far fp64 training moved. Measured (seed 20241122):
//   f32  no_master            1.1e-6
//   f16  master_fp32          2.8e-4     f16  no_master   0.075
//   bf16 master_fp32          2.6e-3     bf16 stochastic_rounding 0.069     bf16 no_master 0.80
// and the final loss (fp64: 2.64): bf16 no_master 655, stochastic rounding 2.70, master 2.64.
// The assertions keep the ordering with margins of 3x or more below what was measured, so a
// change of the rule that costs accuracy fails here, not a random reseed.
#include "trainer/drift_study.h"

#include <gtest/gtest.h>

#include <cmath>
#include <iostream>

#include "core/error.h"
#include "tests/common/expect_error.h"

namespace seqbench::trainer {
namespace {

// The bounds are drift_study_checks' (trainer/drift_study.h), which the trainer suite also reports.
TEST(DriftStudy, PrecisionModesOrderAsMeasured) {
  const DriftStudyOptions options;
  const std::vector<DriftResult> results = run_drift_study(options);
  const std::vector<CheckResult> checks = drift_study_checks(results, options);
  ASSERT_EQ(checks.size(), results.size());
  for (const CheckResult& c : checks) {
    std::cout << c.name << ": " << c.detail << "\n";
    EXPECT_TRUE(c.passed) << c.name << ": " << c.detail;
  }
}

// Options the study cannot measure are refused with the value: lr 0 gave a NaN drift (the reference
// does not move: 0 / 0), and a loss scale of 0 or NaN failed as "step 0 overflowed".
TEST(DriftStudy, OptionsItCannotMeasureAreNamed) {
  DriftStudyOptions options;
  options.steps = 1;
  const auto message = [&] {
    return seqbench::testing::error_of([&] {
      (void)run_drift_case(options, DType::f32, PrecisionMode::no_master, DriftBackend::host_emulation);
    });
  };
  options.lr = 0.0;
  EXPECT_NE(message().find("drift study: lr 0 must be > 0"), std::string::npos) << message();
  options.lr = 1e-3;
  for (const float scale : {0.0f, NAN, -1.0f, INFINITY}) {
    options.loss_scale = scale;
    EXPECT_NE(message().find("drift study: loss_scale "), std::string::npos) << scale << ": " << message();
    EXPECT_NE(message().find(" must be finite and > 0"), std::string::npos) << scale << ": " << message();
  }
  options.loss_scale = 1.0f;
  EXPECT_EQ(message(), "");
}

// A change that costs accuracy fails its case's check: the same results with bf16's master copy
// drifting as far as stochastic rounding fail bf16/master_fp32 and bf16/stochastic_rounding.
TEST(DriftStudy, ChecksFailAWorseMasterCopy) {
  const DriftStudyOptions options;
  std::vector<DriftResult> results = run_drift_study(options);
  const DriftResult* sr = nullptr;
  for (const DriftResult& r : results)
    if (r.dtype == DType::bf16 && r.mode == PrecisionMode::stochastic_rounding) sr = &r;
  ASSERT_NE(sr, nullptr);
  for (DriftResult& r : results)
    if (r.dtype == DType::bf16 && r.mode == PrecisionMode::master_fp32) r.param_drift = sr->param_drift;
  for (const CheckResult& c : drift_study_checks(results, options)) {
    const bool hit =
        c.name == "trainer/drift/bf16/master_fp32" || c.name == "trainer/drift/bf16/stochastic_rounding";
    EXPECT_EQ(c.passed, !hit) << c.name << ": " << c.detail;
  }
  results.pop_back();
  EXPECT_THROW(drift_study_checks(results, options), Error);
}

// drift_device_checks (the trainer suite's GPU family) on results made here: equal runs pass, one
// parameter one ulp off fails its case alone, and mismatched inputs are refused.
TEST(DriftStudy, DeviceChecksFailOneUlpAndRefuseMismatches) {
  DriftStudyOptions options;
  options.params = 64;
  options.samples = 16;
  options.steps = 5;
  const std::vector<DriftResult> host = run_drift_study(options);
  std::vector<DriftResult> device = host;
  for (DriftResult& r : device) r.backend = DriftBackend::device;
  for (const CheckResult& c : drift_device_checks(host, device)) EXPECT_TRUE(c.passed) << c.name;
  device[2].params[17] = std::nextafter(device[2].params[17], INFINITY);
  const std::vector<CheckResult> checks = drift_device_checks(host, device);
  for (std::size_t i = 0; i < checks.size(); ++i) EXPECT_EQ(checks[i].passed, i != 2) << checks[i].name;
  EXPECT_DOUBLE_EQ(checks[2].max_rel_err, 1.0 / 64);
  EXPECT_GT(checks[2].max_abs_err, 0.0);
  EXPECT_THROW(drift_device_checks(host, host), Error);  // the "device" results are host runs
  EXPECT_THROW(drift_device_checks({}, device), Error);  // no host case
}

}  // namespace
}  // namespace seqbench::trainer
