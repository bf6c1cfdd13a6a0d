// The per-element rule and the host emulation (the kernels' own code run on the host) against the
// fp64 reference optimizers, plus the pieces of the rule that need no GPU: coefficients, clipping,
// stochastic rounding, the skip on overflow.
#include "trainer/update_rule.h"

#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <cstring>
#include <random>
#include <sstream>

#include "core/error.h"
#include "core/philox.h"
#include "tests/common/expect_error.h"
#include "tests/trainer/optimizer_check.h"
#include "trainer/host_emulation.h"

namespace seqbench::trainer {
namespace {

TEST(UpdateRule, PowIntIsExactForSmallAndCloseForLargeExponents) {
  EXPECT_EQ(pow_int(0.9, 0), 1.0);
  EXPECT_EQ(pow_int(0.9, 1), 0.9);
  EXPECT_EQ(pow_int(0.5, 10), std::ldexp(1.0, -10));
  for (const std::int64_t t : {2, 3, 17, 1000, 123457}) {
    for (const double b : {0.9, 0.999, 0.98}) {
      const double want = std::pow(b, static_cast<double>(t));
      // Each squaring doubles the relative error carried so far and adds half an ulp, so after
      // log2(t) levels it is below 2t ulps: negligible next to the float rounding that follows
      // (1 - b^t is rounded to float, relative error 2^-24, for any t below 2^28).
      EXPECT_NEAR(pow_int(b, t), want, want * 2.0 * static_cast<double>(t) * std::ldexp(1.0, -53))
          << b << "^" << t;
    }
  }
}

TEST(UpdateRule, StepCoefficientsAreTheDoubleFormulasRoundedOnce) {
  OptimizerConfig config;
  config.kind = OptimizerKind::adamw;
  config.weight_decay = 0.01;
  for (const std::int64_t t : {1, 2, 10, 5000}) {
    const StepCoefficients c = make_step_coefficients(config, 3e-4, t);
    const double bc1 = 1 - std::pow(0.9, t), bc2 = 1 - std::pow(0.999, t);
    EXPECT_FLOAT_EQ(c.step_size, static_cast<float>(3e-4 / bc1));
    EXPECT_FLOAT_EQ(c.bias_correction2_sqrt, static_cast<float>(std::sqrt(bc2)));
    EXPECT_EQ(c.decay_factor, static_cast<float>(1 - 3e-4 * 0.01));
    EXPECT_EQ(c.weight_decay, 0.0f) << "AdamW must not add an L2 term";
    EXPECT_EQ(c.first_step, t == 1 ? 1 : 0);
  }
  config.kind = OptimizerKind::adam;
  EXPECT_EQ(make_step_coefficients(config, 3e-4, 1).weight_decay, 0.01f);
  EXPECT_EQ(make_step_coefficients(config, 3e-4, 1).decay_factor, 1.0f);
}

TEST(UpdateRule, ClipCoefficientFollowsTorch) {
  EXPECT_EQ(clip_coefficient(10.0f, 0.0), 1.0f);   // off
  EXPECT_EQ(clip_coefficient(10.0f, -1.0), 1.0f);  // off
  EXPECT_EQ(clip_coefficient(0.5f, 1.0), 1.0f);    // below the limit: untouched
  EXPECT_FLOAT_EQ(clip_coefficient(4.0f, 1.0), static_cast<float>(1.0 / (4.0 + 1e-6)));
  EXPECT_EQ(clip_coefficient(NAN, 1.0), 1.0f);
  EXPECT_EQ(clip_coefficient(INFINITY, 1.0), 0.0f);
}

TEST(UpdateRule, StepControlSkipsWithoutAdvancingTheStep) {
  const OptimizerConfig config;
  const StepControl bad = make_step_control(true, NAN, 1024.0f, config, 1e-3, 1.0, 41);
  EXPECT_EQ(bad.found_inf, 1);
  EXPECT_EQ(bad.step, 41);
  const StepControl good = make_step_control(false, 16.0f, 1024.0f, config, 1e-3, 1.0, 41);
  EXPECT_EQ(good.found_inf, 0);
  EXPECT_EQ(good.step, 42);
  EXPECT_EQ(good.inv_scale, 1.0f / 1024.0f);
  EXPECT_EQ(good.grad_norm, 4.0f);
  EXPECT_EQ(good.grad_multiplier, good.inv_scale * good.clip);
}

float bf16_value(float x) {
  return to_float(from_float<__nv_bfloat16>(x));
}

TEST(StochasticRounding, ReturnsANeighbourAndKeepsRepresentableValues) {
  std::mt19937_64 rng(3);
  for (int i = 0; i < 20000; ++i) {
    const float x =
        std::ldexp(static_cast<float>(rng() % 1000000) / 1e6f - 0.5f, static_cast<int>(rng() % 60) - 30);
    const float r = to_float(stochastic_round_bf16(x, static_cast<std::uint32_t>(rng())));
    // The two bf16 neighbours of x: truncation toward zero and one ulp further from zero.
    std::uint32_t bits;
    std::memcpy(&bits, &x, 4);
    const std::uint32_t trunc = bits & 0xffff0000u, up = trunc + 0x10000u;
    float lo, hi;
    std::memcpy(&lo, &trunc, 4);
    std::memcpy(&hi, &up, 4);
    ASSERT_TRUE(r == lo || r == hi) << x << " -> " << r;
    if ((bits & 0xffffu) == 0) {
      ASSERT_EQ(r, x) << "a representable value must not move";
    }
  }
  EXPECT_TRUE(std::isinf(to_float(stochastic_round_bf16(INFINITY, 0xffffffffu))));
  EXPECT_TRUE(std::isnan(to_float(stochastic_round_bf16(NAN, 0u))));
  EXPECT_EQ(to_float(stochastic_round_bf16(-0.0f, 0xffffu)), 0.0f);
}

TEST(StochasticRounding, IsUnbiased) {
  // x sits 3/8 of the way from one bf16 neighbour to the next: E[round(x)] = x, and the mean of
  // n Philox draws is within 5 standard errors (sigma <= ulp/2 per draw).
  for (const float base : {1.0f, -3.0f, 1e-20f, 7e30f}) {
    const float b = bf16_value(base);
    const float ulp = std::ldexp(1.0f, std::ilogb(b) - 7);  // bf16 keeps 8 significant bits
    const float x = b + 0.375f * ulp;                       // exact in float
    const int n = 200000;
    double sum = 0.0;
    for (int i = 0; i < n; ++i)
      sum += to_float(stochastic_round_bf16(x, philox_bits(11, 5, static_cast<std::uint64_t>(i))));
    const double mean = sum / n;
    EXPECT_NEAR(mean, x, 5.0 * 0.5 * std::abs(ulp) / std::sqrt(static_cast<double>(n))) << "x = " << x;
    // Round-to-nearest would be biased by 0.375 ulp: the test can tell the difference.
    EXPECT_GT(std::abs(bf16_value(x) - x), 50.0 * 0.5 * std::abs(ulp) / std::sqrt(static_cast<double>(n)));
  }
}

// --- host emulation vs the fp64 reference, step by step ---------------------------------------

struct Case {
  const char* name;
  OptimizerConfig config;
};

std::vector<Case> optimizer_cases() {
  std::vector<Case> cases;
  OptimizerConfig c;
  c.kind = OptimizerKind::adam;
  cases.push_back({"adam", c});
  c.weight_decay = 0.1;
  c.eps = 1e-3;  // large eps: its place in the formula (outside the sqrt, after bias correction) shows
  cases.push_back({"adam_l2_eps", c});
  c.kind = OptimizerKind::adamw;
  c.eps = 1e-8;
  c.beta1 = 0.8;
  c.beta2 = 0.95;
  cases.push_back({"adamw", c});
  OptimizerConfig s;
  s.kind = OptimizerKind::sgd;
  cases.push_back({"sgd", s});
  s.momentum = 0.9;
  s.weight_decay = 0.05;
  cases.push_back({"sgd_momentum", s});
  s.dampening = 0.3;
  cases.push_back({"sgd_dampening", s});
  s.dampening = 0.0;
  s.nesterov = true;
  cases.push_back({"sgd_nesterov", s});
  return cases;
}

template <class T>
std::vector<double> as_double(const std::vector<T>& v) {
  std::vector<double> out(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) out[i] = to_float<T>(v[i]);
  return out;
}
std::vector<double> as_double(const std::vector<float>& v) {
  return {v.begin(), v.end()};
}

template <class T>
void check_emulation_against_reference(PrecisionMode mode) {
  const DType dtype = DTypeTraits<T>::dtype;
  std::mt19937_64 rng(1234 + static_cast<int>(mode) * 7 + static_cast<int>(dtype));
  std::normal_distribution<float> normal;
  for (const Case& oc : optimizer_cases()) {
    for (const double max_norm : {0.0, 0.5}) {
      const std::size_t n = 1000 + rng() % 64;
      HostTrainingState<T> s(n, oc.config, mode);
      for (std::size_t i = 0; i < n; ++i)
        s.params[i] = from_float<T>(normal(rng) * (i % 3 == 0 ? 1e-3f : 1.0f));
      if (mode == PrecisionMode::master_fp32)
        for (std::size_t i = 0; i < n; ++i) s.master[i] = to_float<T>(s.params[i]) + normal(rng) * 1e-5f;
      const float loss_scale = dtype == DType::f16 ? 1024.0f : 1.0f;
      const double lr = 1e-2;
      for (int step = 0; step < 4; ++step) {
        for (std::size_t i = 0; i < n; ++i)
          s.grads[i] = from_float<T>(i % 17 == 0 ? 0.0f : normal(rng) * 0.05f * loss_scale);
        const std::vector<double> p_before =
            mode == PrecisionMode::master_fp32 ? as_double(s.master) : as_double(s.params);
        const std::vector<double> g = as_double(s.grads);
        const std::vector<double> s0 = s.state0.empty() ? std::vector<double>(n, 0.0) : as_double(s.state0);
        const std::vector<double> s1 = s.state1.empty() ? std::vector<double>(n, 0.0) : as_double(s.state1);
        const std::int64_t t_before = s.step;
        const StepControl control =
            emulate_step(s.buffers(), oc.config, mode, StepOptions{lr, max_norm}, loss_scale, 77, s.step);
        ASSERT_EQ(control.found_inf, 0);
        ASSERT_EQ(s.step, t_before + 1);
        const testing::ReferenceStep want = testing::reference_step(
            oc.config, mode, dtype, lr, t_before, p_before, g, control.grad_multiplier, s0, s1);
        std::ostringstream where_os;
        where_os << oc.name << "/" << DTypeTraits<T>::name << "/" << precision_mode_name(mode) << " clip "
                 << max_norm << " step " << step << ": ";
        const std::string where = where_os.str();
        EXPECT_EQ(testing::first_violation("params", as_double(s.params), want.p, want.tol_p), "") << where;
        if (mode == PrecisionMode::master_fp32) {
          const testing::ReferenceStep master_want = testing::reference_step(
              oc.config, mode, dtype, lr, t_before, p_before, g, control.grad_multiplier, s0, s1, false);
          EXPECT_EQ(testing::first_violation("master", as_double(s.master), master_want.p, master_want.tol_p),
                    "")
              << where;
        }
        if (!s.state0.empty()) {
          EXPECT_EQ(testing::first_violation("state0", as_double(s.state0), want.s0, want.tol_s0), "")
              << where;
        }
        if (!s.state1.empty()) {
          EXPECT_EQ(testing::first_violation("state1", as_double(s.state1), want.s1, want.tol_s1), "")
              << where;
        }
        // The clip coefficient itself, against the double norm of the unscaled gradients.
        double sum = 0;
        for (const double x : g) sum += (x / loss_scale) * (x / loss_scale);
        const double clip = max_norm > 0 ? std::min(1.0, max_norm / (std::sqrt(sum) + 1e-6)) : 1.0;
        EXPECT_NEAR(control.grad_multiplier, clip / loss_scale, 4 * std::ldexp(1.0, -24) * clip / loss_scale)
            << where;
      }
    }
  }
}

TEST(HostEmulation, MatchesReferenceF32) {
  check_emulation_against_reference<float>(PrecisionMode::no_master);
  check_emulation_against_reference<float>(PrecisionMode::master_fp32);
}
TEST(HostEmulation, MatchesReferenceF16) {
  check_emulation_against_reference<__half>(PrecisionMode::no_master);
  check_emulation_against_reference<__half>(PrecisionMode::master_fp32);
}
TEST(HostEmulation, MatchesReferenceBf16) {
  check_emulation_against_reference<__nv_bfloat16>(PrecisionMode::no_master);
  check_emulation_against_reference<__nv_bfloat16>(PrecisionMode::master_fp32);
  check_emulation_against_reference<__nv_bfloat16>(PrecisionMode::stochastic_rounding);
}

// The tolerance is not a rubber band: a rule with eps inside the square root, or without bias
// correction, or with a gradient not unscaled, is caught.
TEST(HostEmulation, ToleranceRejectsWrongFormulas) {
  OptimizerConfig config;
  config.eps = 1e-3;
  const std::size_t n = 256;
  std::mt19937_64 rng(5);
  std::normal_distribution<float> normal;
  std::vector<double> p(n), g(n), zero(n, 0.0);
  for (std::size_t i = 0; i < n; ++i) {
    p[i] = normal(rng);
    g[i] = normal(rng) * 0.01;
  }
  const auto want = testing::reference_step(config, PrecisionMode::master_fp32, DType::f32, 1e-2, 0, p, g,
                                            1.0, zero, zero, false);
  std::vector<double> eps_inside(n), no_bias_correction(n);
  for (std::size_t i = 0; i < n; ++i) {
    const double m = 0.1 * g[i], v = 0.001 * g[i] * g[i];
    eps_inside[i] = p[i] - 1e-2 / 0.1 * m / std::sqrt(v / 0.001 + 1e-3);
    no_bias_correction[i] = p[i] - 1e-2 * m / (std::sqrt(v) + 1e-3);
  }
  EXPECT_NE(testing::first_violation("p", eps_inside, want.p, want.tol_p), "");
  EXPECT_NE(testing::first_violation("p", no_bias_correction, want.p, want.tol_p), "");
}

TEST(HostEmulation, OverflowLeavesEverythingBitwiseUnchanged) {
  for (const float poison : {INFINITY, -INFINITY, NAN}) {
    OptimizerConfig config;
    HostTrainingState<__half> s(100, config, PrecisionMode::master_fp32);
    std::mt19937_64 rng(8);
    std::normal_distribution<float> normal;
    for (std::size_t i = 0; i < 100; ++i) {
      s.params[i] = from_float<__half>(normal(rng));
      s.master[i] = to_float(s.params[i]);
      s.grads[i] = from_float<__half>(normal(rng));
    }
    emulate_step(s.buffers(), config, PrecisionMode::master_fp32, {}, 1.0f, 0, s.step);
    const auto before = s;
    s.grads[99] = from_float<__half>(poison);
    const StepControl c = emulate_step(s.buffers(), config, PrecisionMode::master_fp32, {}, 1.0f, 0, s.step);
    EXPECT_EQ(c.found_inf, 1);
    EXPECT_EQ(s.step, 1);
    EXPECT_EQ(std::memcmp(s.params.data(), before.params.data(), 200), 0);
    EXPECT_EQ(s.master, before.master);
    EXPECT_EQ(s.state0, before.state0);
    EXPECT_EQ(s.state1, before.state1);
  }
  // A finite fp16 gradient whose unscaled value overflows float (scale < 1) also skips the step.
  const HostGradStats stats =
      emulate_grad_stats(std::vector<__half>{from_float<__half>(60000.0f)}.data(), 1, 1e-36f);
  EXPECT_TRUE(stats.nonfinite);
}

// The emulation dereferenced whatever it was given (a null state1 for Adam was a segfault): the
// buffers the kind and mode use are checked first, by the same rule as the device launchers.
TEST(HostEmulation, NullBuffersThatTheStepUsesAreNamed) {
  OptimizerConfig adam;
  HostTrainingState<float> s(8, adam, PrecisionMode::no_master);
  HostUpdateBuffers<float> b = s.buffers();
  b.state1 = nullptr;
  std::int64_t step = 0;
  const auto message = [&](const HostUpdateBuffers<float>& buffers, const OptimizerConfig& config,
                           PrecisionMode mode) {
    return seqbench::testing::error_of(
        [&] {
          emulate_step(buffers, config, mode, StepOptions{1e-3, 0.0}, 1.0f, 0, step);
        },
        "(no error)");
  };
  EXPECT_NE(message(b, adam, PrecisionMode::no_master)
                .find("emulate_step: state1 is null but adam in no_master mode needs it (8 elements)"),
            std::string::npos);
  EXPECT_NE(
      message(s.buffers(), adam, PrecisionMode::master_fp32).find("master is null but adam in master_fp32"),
      std::string::npos);
  b = s.buffers();
  b.grads = nullptr;
  EXPECT_NE(message(b, adam, PrecisionMode::no_master).find("emulate_step: grads is null"),
            std::string::npos);
  EXPECT_NE(seqbench::testing::error_of([&] {
              emulate_grad_stats<float>(nullptr, 8, 1.0f);
            }).find("emulate_grad_stats: grads is null for 8 elements"),
            std::string::npos);
  // emulate_update alone checks the same (a null state1, or state0 for SGD with momentum).
  StepControl control;
  control.step = 1;
  b = s.buffers();
  b.state1 = nullptr;
  EXPECT_NE(seqbench::testing::error_of([&] {
              emulate_update(b, OptimizerKind::adam, PrecisionMode::no_master, control, 0);
            }).find("emulate_update: state1 is null"),
            std::string::npos);
  // SGD without momentum uses neither state buffer.
  OptimizerConfig sgd;
  sgd.kind = OptimizerKind::sgd;
  HostTrainingState<float> plain(8, sgd, PrecisionMode::no_master);
  EXPECT_EQ(message(plain.buffers(), sgd, PrecisionMode::no_master), "(no error)");
  EXPECT_EQ(step, 1);
}

TEST(HostEmulation, NamesParseAndRejectUnknownSpellings) {
  for (const auto kind : {OptimizerKind::adam, OptimizerKind::adamw, OptimizerKind::sgd})
    EXPECT_EQ(parse_optimizer_kind(optimizer_kind_name(kind)), kind);
  for (const auto mode :
       {PrecisionMode::no_master, PrecisionMode::master_fp32, PrecisionMode::stochastic_rounding})
    EXPECT_EQ(parse_precision_mode(precision_mode_name(mode)), mode);
  EXPECT_THROW(parse_optimizer_kind("lamb"), Error);
  EXPECT_THROW(parse_precision_mode("fp8"), Error);
}

}  // namespace
}  // namespace seqbench::trainer
