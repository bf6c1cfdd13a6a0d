#include "trainer/update_rule.h"

#include <cmath>

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

void validate_optimizer_config(const OptimizerConfig& config) {
  const std::string_view name = optimizer_kind_name(config.kind);  // also rejects an out-of-range kind
  SEQBENCH_REQUIRE(std::isfinite(config.weight_decay) && config.weight_decay >= 0.0,
                   name << ": weight_decay " << config.weight_decay << " must be finite and >= 0");
  if (config.kind == OptimizerKind::sgd) {
    SEQBENCH_REQUIRE(std::isfinite(config.momentum) && config.momentum >= 0.0,
                     "sgd: momentum " << config.momentum << " must be finite and >= 0");
    SEQBENCH_REQUIRE(std::isfinite(config.dampening) && config.dampening >= 0.0 && config.dampening <= 1.0,
                     "sgd: dampening " << config.dampening << " outside [0, 1]");
    SEQBENCH_REQUIRE(!config.nesterov || (config.momentum > 0.0 && config.dampening == 0.0),
                     "sgd: nesterov needs momentum > 0 and dampening 0, got momentum "
                         << config.momentum << ", dampening " << config.dampening);
    return;
  }
  SEQBENCH_REQUIRE(config.beta1 >= 0.0 && config.beta1 < 1.0,
                   name << ": beta1 " << config.beta1 << " outside [0, 1)");
  SEQBENCH_REQUIRE(config.beta2 >= 0.0 && config.beta2 < 1.0,
                   name << ": beta2 " << config.beta2 << " outside [0, 1)");
  // eps > 0 keeps the denominator away from 0 where v underflows; PyTorch allows 0 but then
  // divides 0 by 0 on parameters whose gradient has always been 0 (padding, unused rows).
  SEQBENCH_REQUIRE(std::isfinite(config.eps) && config.eps > 0.0,
                   name << ": eps " << config.eps << " must be finite and > 0");
}

void validate_step_values(double lr, double max_grad_norm) {
  SEQBENCH_REQUIRE(std::isfinite(lr) && lr >= 0.0, "lr " << lr << " must be finite and >= 0");
  SEQBENCH_REQUIRE(!std::isnan(max_grad_norm) && std::isfinite(max_grad_norm),
                   "max_grad_norm " << max_grad_norm << " must be finite (<= 0 disables clipping)");
}

}  // namespace seqbench::trainer
