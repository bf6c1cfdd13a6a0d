#include "trainer/update_rule.h"

#include <cmath>
#include <iomanip>
#include <limits>
#include <utility>

#include "core/dtype.h"  // rounds_to_finite_float
#include "core/error.h"

namespace seqbench::trainer {

std::string_view optimizer_kind_name(OptimizerKind kind) {
  switch (kind) {
    case OptimizerKind::adam:
      return "adam";
    case OptimizerKind::adamw:
      return "adamw";
    case OptimizerKind::sgd:
      return "sgd";
  }
  SEQBENCH_FAIL("optimizer kind " << static_cast<int>(kind) << " is not one of adam, adamw, sgd");
}

std::string_view precision_mode_name(PrecisionMode mode) {
  switch (mode) {
    case PrecisionMode::no_master:
      return "no_master";
    case PrecisionMode::master_fp32:
      return "master_fp32";
    case PrecisionMode::stochastic_rounding:
      return "stochastic_rounding";
  }
  SEQBENCH_FAIL("precision mode " << static_cast<int>(mode)
                                  << " is not one of no_master, master_fp32, stochastic_rounding");
}

OptimizerKind parse_optimizer_kind(std::string_view text) {
  for (const auto kind : {OptimizerKind::adam, OptimizerKind::adamw, OptimizerKind::sgd})
    if (text == optimizer_kind_name(kind)) return kind;
  SEQBENCH_FAIL("unknown optimizer '" << text << "': expected one of adam, adamw, sgd");
}

PrecisionMode parse_precision_mode(std::string_view text) {
  for (const auto mode :
       {PrecisionMode::no_master, PrecisionMode::master_fp32, PrecisionMode::stochastic_rounding})
    if (text == precision_mode_name(mode)) return mode;
  SEQBENCH_FAIL("unknown precision mode '"
                << text << "': expected one of no_master, master_fp32, stochastic_rounding");
}

namespace {

// The rule runs in float (make_step_coefficients rounds each hyper-parameter once): a double that
// passes a check here but is 0, 1 or inf as a float would change the rule silently (an eps of
// 1e-46 is 0.0f, and 0 / (0 + 0) turns every parameter whose gradient is 0 into NaN). Doubles
// beyond FLT_MAX are refused before any cast, which is undefined for them.
constexpr double kFloatMax = std::numeric_limits<float>::max();
// A value that must be a float's too: finite as a float (<= FLT_MAX).
void require_float_range(double value, std::string_view name, const char* label) {
  SEQBENCH_REQUIRE(std::fabs(value) <= kFloatMax,
                   name << ": " << label << " " << value << " is beyond float (> " << kFloatMax << ")");
}

}  // namespace

void validate_optimizer_config(const OptimizerConfig& config) {
  const std::string_view name = optimizer_kind_name(config.kind);  // also rejects an out-of-range kind
  SEQBENCH_REQUIRE(std::isfinite(config.weight_decay) && config.weight_decay >= 0.0,
                   name << ": weight_decay " << config.weight_decay << " must be finite and >= 0");
  require_float_range(config.weight_decay, name, "weight_decay");
  if (config.kind == OptimizerKind::sgd) {
    SEQBENCH_REQUIRE(std::isfinite(config.momentum) && config.momentum >= 0.0,
                     "sgd: momentum " << config.momentum << " must be finite and >= 0");
    require_float_range(config.momentum, name, "momentum");
    SEQBENCH_REQUIRE(std::isfinite(config.dampening) && config.dampening >= 0.0 && config.dampening <= 1.0,
                     "sgd: dampening " << config.dampening << " outside [0, 1]");
    SEQBENCH_REQUIRE(!config.nesterov || (config.momentum > 0.0 && config.dampening == 0.0),
                     "sgd: nesterov needs momentum > 0 and dampening 0, got momentum "
                         << config.momentum << ", dampening " << config.dampening);
    SEQBENCH_REQUIRE(
        !config.nesterov || static_cast<float>(config.momentum) > 0.0f,
        "sgd: nesterov needs momentum > 0, and momentum " << config.momentum << " is 0 as a float");
    return;
  }
  SEQBENCH_REQUIRE(config.beta1 >= 0.0 && config.beta1 < 1.0,
                   name << ": beta1 " << config.beta1 << " outside [0, 1)");
  SEQBENCH_REQUIRE(config.beta2 >= 0.0 && config.beta2 < 1.0,
                   name << ": beta2 " << config.beta2 << " outside [0, 1)");
  // m and v are decayed by the float beta: one that rounds to 1 would never decay them.
  for (const auto& [beta, label] : {std::pair{config.beta1, "beta1"}, std::pair{config.beta2, "beta2"}}) {
    SEQBENCH_REQUIRE(static_cast<float>(beta) < 1.0f,
                     name << ": " << label << " " << std::setprecision(10) << beta
                          << " rounds to 1 as a float (the largest float below 1 is " << std::setprecision(17)
                          << std::nextafter(1.0f, 0.0f) << ")");
  }
  // eps > 0 keeps the denominator away from 0 where v underflows; PyTorch allows 0 but then
  // divides 0 by 0 on parameters whose gradient has always been 0 (padding, unused rows).
  SEQBENCH_REQUIRE(std::isfinite(config.eps) && config.eps > 0.0,
                   name << ": eps " << config.eps << " must be finite and > 0");
  require_float_range(config.eps, name, "eps");
  SEQBENCH_REQUIRE(static_cast<float>(config.eps) > 0.0f,
                   name << ": eps " << config.eps << " is 0 as a float (the smallest float above 0 is "
                        << std::numeric_limits<float>::denorm_min() << ")");
}

void validate_step_values(const OptimizerConfig& config, double lr, double max_grad_norm) {
  SEQBENCH_REQUIRE(std::isfinite(lr) && lr >= 0.0, "lr " << lr << " must be finite and >= 0");
  SEQBENCH_REQUIRE(lr <= kFloatMax, "lr " << lr << " is beyond float (> " << kFloatMax << ")");
  SEQBENCH_REQUIRE(!std::isnan(max_grad_norm) && std::isfinite(max_grad_norm),
                   "max_grad_norm " << max_grad_norm << " must be finite (<= 0 disables clipping)");
  // The per-step coefficients are rounded to float (make_step_coefficients). Step 1 bounds every
  // later step: lr / (1 - beta1^t) falls with t, sqrt(1 - beta2^t) stays in (0, 1], and AdamW's
  // 1 - lr*wd does not depend on t. Checked in double here, before any cast.
  if (config.kind != OptimizerKind::sgd) {
    const double step_size = lr / (1.0 - config.beta1);
    SEQBENCH_REQUIRE(rounds_to_finite_float(step_size),
                     optimizer_kind_name(config.kind) << ": lr " << lr << " / (1 - beta1 " << config.beta1
                                                      << ") = " << step_size << ", the first step's size, "
                                                      << "is beyond float");
  }
  if (config.kind == OptimizerKind::adamw) {
    const double decay = 1.0 - lr * config.weight_decay;
    SEQBENCH_REQUIRE(rounds_to_finite_float(decay), "adamw: 1 - lr " << lr << " * weight_decay "
                                                                     << config.weight_decay << " = " << decay
                                                                     << " is beyond float");
  }
}

}  // namespace seqbench::trainer
