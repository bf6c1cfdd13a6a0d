// The loss scaler's state machine (the host mirror of the device transition) against
// torch.cuda.amp.GradScaler's semantics, and its configuration checks. Host only.
#include "trainer/loss_scaler.h"

#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <random>
#include <utility>

#include "core/error.h"
#include "tests/common/expect_error.h"

namespace seqbench::trainer {
namespace {

TEST(LossScaler, DefaultsAreTorchs) {
  const LossScalerConfig config;
  EXPECT_EQ(config.init_scale, 65536.0f);
  EXPECT_EQ(config.growth_factor, 2.0f);
  EXPECT_EQ(config.backoff_factor, 0.5f);
  EXPECT_EQ(config.growth_interval, 2000);
  const LossScalerState s = initial_loss_scaler_state(config);
  EXPECT_EQ(s.scale, 65536.0f);
  EXPECT_EQ(s.growth_tracker, 0);
}

TEST(LossScaler, GrowsAfterExactlyGrowthIntervalGoodSteps) {
  const LossScalerConfig config;
  LossScalerState s = initial_loss_scaler_state(config);
  for (int i = 1; i < config.growth_interval; ++i) {
    s = next_loss_scaler_state(s, false, config);
    ASSERT_EQ(s.scale, 65536.0f) << "grew early, after " << i << " good steps";
    ASSERT_EQ(s.growth_tracker, i);
  }
  s = next_loss_scaler_state(s, false, config);
  EXPECT_EQ(s.scale, 131072.0f);
  EXPECT_EQ(s.growth_tracker, 0);
}

TEST(LossScaler, OverflowBacksOffAndResetsTheTracker) {
  const LossScalerConfig config{1024.0f, 2.0f, 0.5f, 4};
  LossScalerState s = initial_loss_scaler_state(config);
  s = next_loss_scaler_state(s, false, config);
  s = next_loss_scaler_state(s, false, config);
  s = next_loss_scaler_state(s, false, config);
  ASSERT_EQ(s.growth_tracker, 3);
  s = next_loss_scaler_state(s, true, config);
  EXPECT_EQ(s.scale, 512.0f);
  EXPECT_EQ(s.growth_tracker, 0);
  // Growth needs a full interval of good steps again after the overflow.
  for (int i = 0; i < 3; ++i) s = next_loss_scaler_state(s, false, config);
  EXPECT_EQ(s.scale, 512.0f);
  s = next_loss_scaler_state(s, false, config);
  EXPECT_EQ(s.scale, 1024.0f);
  // Consecutive overflows keep backing off.
  s = next_loss_scaler_state(s, true, config);
  s = next_loss_scaler_state(s, true, config);
  EXPECT_EQ(s.scale, 256.0f);
  EXPECT_EQ(s.growth_tracker, 0);
}

TEST(LossScaler, GrowthStopsShortOfInfinityButResetsTheTracker) {
  const LossScalerConfig config{FLT_MAX, 2.0f, 0.5f, 1};
  const LossScalerState s = next_loss_scaler_state(initial_loss_scaler_state(config), false, config);
  EXPECT_EQ(s.scale, FLT_MAX);
  EXPECT_EQ(s.growth_tracker, 0);
}

// The growth's float rounding at the top of the range, where the finiteness test decides: a product
// at the midpoint between FLT_MAX and 2^128 rounds to inf (the scale is kept), one just below it to
// FLT_MAX (taken).
TEST(LossScaler, GrowthRoundsToFloatAtTheTopOfTheRange) {
  const auto grow_once = [](float scale, double growth) {
    const LossScalerConfig config{scale, growth, 0.5, 1};
    return next_loss_scaler_state(initial_loss_scaler_state(config), false, config);
  };
  const float two127 = std::ldexp(1.0f, 127);
  EXPECT_EQ(grow_once(two127, 2.0 - std::ldexp(1.0, -24)).scale, two127);   // 2^128 - 2^103: inf, kept
  EXPECT_EQ(grow_once(two127, 2.0 - std::ldexp(1.0, -23)).scale, FLT_MAX);  // 2^128 - 2^104 exactly
  const float below = std::nextafter(FLT_MAX, 0.0f);                        // 2^128 - 2^105
  EXPECT_EQ(grow_once(below, 1.0 + std::ldexp(1.0, -24)).scale, FLT_MAX);   // 2^128 - 2^104 - 2^81
  EXPECT_EQ(grow_once(below, 1.0 + std::ldexp(1.0, -24)).growth_tracker, 0);
}

// A literal transcription of torch's _amp_update_scale_cuda_kernel (float* current_scale, double
// growth_factor and backoff_factor), against which random flag sequences are replayed.
LossScalerState torch_update(LossScalerState s, bool found_inf, const LossScalerConfig& c) {
  if (found_inf) {
    s.scale = static_cast<float>(s.scale * c.backoff_factor);
    s.growth_tracker = 0;
  } else {
    const int successful = s.growth_tracker + 1;
    if (successful == c.growth_interval) {
      const float new_scale = static_cast<float>(s.scale * c.growth_factor);
      if (std::isfinite(new_scale)) s.scale = new_scale;
      s.growth_tracker = 0;
    } else {
      s.growth_tracker = successful;
    }
  }
  return s;
}

TEST(LossScaler, RandomFlagSequencesFollowTorch) {
  std::mt19937_64 rng(99);
  // Factors that are not powers of two too: their products round, once, in double (see the config).
  const std::pair<double, double> factors[] = {{2.0, 0.5}, {3.0, 0.9}, {1.0001, 0.125}};
  for (const int interval : {1, 2, 3, 7, 2000})
    for (const auto& [growth, backoff] : factors) {
      const LossScalerConfig config{65536.0f, growth, backoff, interval};
      LossScalerState ours = initial_loss_scaler_state(config), theirs = ours;
      for (int step = 0; step < 5000; ++step) {
        const bool overflow = rng() % 13 == 0;
        ours = next_loss_scaler_state(ours, overflow, config);
        theirs = torch_update(theirs, overflow, config);
        ASSERT_EQ(ours.scale, theirs.scale) << "interval " << interval << " step " << step;
        ASSERT_EQ(ours.growth_tracker, theirs.growth_tracker) << "interval " << interval << " step " << step;
      }
    }
}

TEST(LossScaler, BadConfigurationsAreRejectedWithTheValue) {
  auto message = [](const LossScalerConfig& c) {
    return seqbench::testing::error_of([&] { validate_loss_scaler_config(c); });
  };
  EXPECT_NE(message({0.0f, 2.0f, 0.5f, 10}).find("init_scale 0"), std::string::npos);
  EXPECT_NE(message({1.0f, 1.0f, 0.5f, 10}).find("growth_factor 1"), std::string::npos);
  EXPECT_NE(message({1.0f, 2.0f, 1.0f, 10}).find("backoff_factor 1"), std::string::npos);
  EXPECT_NE(message({1.0f, 2.0f, 0.0f, 10}).find("backoff_factor 0"), std::string::npos);
  EXPECT_NE(message({1.0f, 2.0f, 0.5f, 0}).find("growth_interval 0"), std::string::npos);
  EXPECT_EQ(message(LossScalerConfig{}), "");
}

// The scale is a float: factors within its resolution of 1 pass torch's checks (> 1, < 1) but
// give the old scale back (a backoff of 0.99999999 left 65536 through 1000 overflows, so that every
// later step would be skipped), and a scale below 1/FLT_MAX has no finite reciprocal. Refused,
// with the value; the limits 1 ± 2^-23 are accepted and move every normal float scale, from both
// ends of each binade (tested below), so the limit is the resolution and no stricter.
TEST(LossScaler, FactorsThatCannotMoveAFloatScaleAreRejected) {
  auto message = [](const LossScalerConfig& c) {
    return seqbench::testing::error_of([&] { validate_loss_scaler_config(c); });
  };
  EXPECT_NE(message({65536.0f, 2.0, 0.99999999, 10}).find("backoff_factor 0.99999999"), std::string::npos);
  EXPECT_NE(message({65536.0f, 2.0, 0.99999999, 10}).find("outside (0, 1 - 2^-23]"), std::string::npos);
  EXPECT_NE(message({65536.0f, 1.00000001, 0.5, 10}).find("growth_factor 1.00000001"), std::string::npos);
  EXPECT_NE(message({65536.0f, 1.0 + std::ldexp(1.0, -24), 0.5, 10}).find(">= 1 + 2^-23"), std::string::npos);
  EXPECT_NE(
      message({1e-40f, 2.0, 0.5, 10}).find("has no finite reciprocal in float (it must be >= 2.93874e-39)"),
      std::string::npos);
  const double growth = 1.0 + std::ldexp(1.0, -23), backoff = 1.0 - std::ldexp(1.0, -23);
  const LossScalerConfig edge{1.0f, growth, backoff, 1};
  EXPECT_EQ(message(edge), "");
  EXPECT_EQ(message({1e-38f, 2.0, 0.5, 10}), "");  // reciprocal 1e38 < FLT_MAX
  for (int e = -126; e < 127; ++e)
    for (const float scale : {std::ldexp(1.0f, e), std::nextafter(std::ldexp(1.0f, e + 1), 0.0f)}) {
      const LossScalerState s{scale, 0};
      ASSERT_GT(next_loss_scaler_state(s, false, edge).scale, scale) << scale;
      ASSERT_LT(next_loss_scaler_state(s, true, edge).scale, scale) << scale;
    }
}

}  // namespace
}  // namespace seqbench::trainer
