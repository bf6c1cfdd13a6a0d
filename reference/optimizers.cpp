#include "reference/optimizers.h"

#include <cmath>

#include "core/error.h"

namespace seqbench::ref {

namespace {
void require_same_size(const Vector& param, const Vector& grad, const char* what) {
  SEQBENCH_REQUIRE(grad.size() == param.size(),
                   what << ": gradient has " << grad.size() << " elements, parameter " << param.size());
}

void require_adam(const AdamConfig& config, const char* what) {
  SEQBENCH_REQUIRE(config.lr >= 0.0, what << ": lr " << config.lr << " must be >= 0");
  SEQBENCH_REQUIRE(config.beta1 >= 0.0 && config.beta1 < 1.0,
                   what << ": beta1 " << config.beta1 << " outside [0, 1)");
  SEQBENCH_REQUIRE(config.beta2 >= 0.0 && config.beta2 < 1.0,
                   what << ": beta2 " << config.beta2 << " outside [0, 1)");
  SEQBENCH_REQUIRE(config.eps >= 0.0, what << ": eps " << config.eps << " must be >= 0");
  SEQBENCH_REQUIRE(config.weight_decay >= 0.0,
                   what << ": weight_decay " << config.weight_decay << " must be >= 0");
}

// The Adam moment update and step shared by Adam and AdamW; `g` is the effective gradient.
void adam_update(Vector& param, const Vector& g, AdamState& state, const AdamConfig& config) {
  if (state.step == 0) {
    state.m = Vector::Zero(param.size());
    state.v = Vector::Zero(param.size());
  }
  SEQBENCH_REQUIRE(state.m.size() == param.size() && state.v.size() == param.size(),
                   "adam state has " << state.m.size() << "/" << state.v.size() << " moments for "
                                     << param.size() << " parameters");
  state.step += 1;
  const auto t = static_cast<double>(state.step);
  state.m = config.beta1 * state.m + (1.0 - config.beta1) * g;
  state.v = config.beta2 * state.v + (1.0 - config.beta2) * g.cwiseProduct(g);
  const double bias_correction1 = 1.0 - std::pow(config.beta1, t);
  const double bias_correction2 = 1.0 - std::pow(config.beta2, t);
  const Vector denom = (state.v / bias_correction2).cwiseSqrt().array() + config.eps;
  param -= (config.lr / bias_correction1) * state.m.cwiseQuotient(denom);
}
}  // namespace

void adam_step(Vector& param, const Vector& grad, AdamState& state, const AdamConfig& config) {
  require_same_size(param, grad, "adam_step");
  require_adam(config, "adam_step");
  adam_update(param, grad + config.weight_decay * param, state, config);
}

void adamw_step(Vector& param, const Vector& grad, AdamState& state, const AdamConfig& config) {
  require_same_size(param, grad, "adamw_step");
  require_adam(config, "adamw_step");
  param *= 1.0 - config.lr * config.weight_decay;
  adam_update(param, grad, state, config);
}

void sgd_step(Vector& param, const Vector& grad, SgdState& state, const SgdConfig& config) {
  require_same_size(param, grad, "sgd_step");
  SEQBENCH_REQUIRE(config.lr >= 0.0, "sgd_step: lr " << config.lr << " must be >= 0");
  SEQBENCH_REQUIRE(config.momentum >= 0.0, "sgd_step: momentum " << config.momentum << " must be >= 0");
  SEQBENCH_REQUIRE(config.weight_decay >= 0.0,
                   "sgd_step: weight_decay " << config.weight_decay << " must be >= 0");
  SEQBENCH_REQUIRE(!config.nesterov || (config.momentum > 0.0 && config.dampening == 0.0),
                   "sgd_step: nesterov needs momentum > 0 and dampening 0, got momentum "
                       << config.momentum << ", dampening " << config.dampening);
  Vector g = grad + config.weight_decay * param;
  if (config.momentum != 0.0) {
    if (state.momentum_buffer.size() == 0) {
      state.momentum_buffer = g;
    } else {
      SEQBENCH_REQUIRE(state.momentum_buffer.size() == param.size(),
                       "sgd_step: momentum buffer has " << state.momentum_buffer.size() << " elements for "
                                                        << param.size() << " parameters");
      state.momentum_buffer = config.momentum * state.momentum_buffer + (1.0 - config.dampening) * g;
    }
    g = config.nesterov ? Vector(g + config.momentum * state.momentum_buffer) : state.momentum_buffer;
  }
  param -= config.lr * g;
  state.step += 1;
}

}  // namespace seqbench::ref
