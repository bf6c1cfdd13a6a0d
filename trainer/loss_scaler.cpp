#include "trainer/loss_scaler.h"

#include <cmath>
#include <iomanip>
#include <limits>

#include "core/cuda_check.h"

namespace seqbench::trainer {

namespace {

// A scale whose reciprocal (the gradients' multiplier, rounded to float) is inf would turn every
// gradient into inf or NaN, and so skip every step.
void require_invertible_scale(float scale, const char* name) {
  SEQBENCH_REQUIRE(std::isfinite(scale) && scale > 0.0f,
                   "loss scaler: " << name << " " << scale << " must be finite and > 0");
  // inverse_loss_scale's double, tested before its cast to float (undefined beyond float's range).
  SEQBENCH_REQUIRE(rounds_to_finite_float(1.0 / static_cast<double>(scale)),
                   "loss scaler: " << name << " " << scale
                                   << " has no finite reciprocal in float (it must be >= "
                                   << 1.0 / std::numeric_limits<float>::max() << ")");
}

}  // namespace

void validate_loss_scaler_config(const LossScalerConfig& config) {
  require_invertible_scale(config.init_scale, "init_scale");
  // The new scale is the product rounded to float: a factor within a float's resolution of 1 gives
  // the old scale back (0.99999999 froze a scale of 65536 through any number of overflows, so
  // that every later step was skipped). 1 ± 2^-23 moves every normal float scale.
  constexpr double kResolution = std::numeric_limits<float>::epsilon();  // 2^-23
  SEQBENCH_REQUIRE(std::isfinite(config.growth_factor) && config.growth_factor >= 1.0 + kResolution,
                   "loss scaler: growth_factor "
                       << std::setprecision(10) << config.growth_factor
                       << " must be finite and >= 1 + 2^-23 (closer to 1, the grown "
                          "scale rounds back to the scale in float)");
  SEQBENCH_REQUIRE(config.backoff_factor > 0.0 && config.backoff_factor <= 1.0 - kResolution,
                   "loss scaler: backoff_factor " << std::setprecision(10) << config.backoff_factor
                                                  << " outside (0, 1 - 2^-23] (closer to 1, the backed-off "
                                                     "scale rounds back to the scale in float)");
  SEQBENCH_REQUIRE(config.growth_interval >= 1,
                   "loss scaler: growth_interval " << config.growth_interval << " must be >= 1");
}

LossScaler::LossScaler(const LossScalerConfig& config) : config_(config) {
  validate_loss_scaler_config(config_);
  state_ = DeviceBuffer<LossScalerState>(1);
  set_state(initial_loss_scaler_state(config_));
}

void LossScaler::update(const int* found_inf, cudaStream_t stream) {
  launch_loss_scaler_update(state_.data(), found_inf, config_, stream);
}

LossScalerState LossScaler::state() const {
  SEQBENCH_CUDA_CHECK(cudaDeviceSynchronize());  // updates may be queued on any stream
  return state_.copy_to_host().at(0);
}

void LossScaler::set_state(const LossScalerState& state) {
  require_invertible_scale(state.scale, "scale");
  SEQBENCH_REQUIRE(state.growth_tracker >= 0 && state.growth_tracker < config_.growth_interval,
                   "loss scaler: growth_tracker " << state.growth_tracker << " outside [0, growth_interval "
                                                  << config_.growth_interval << ")");
  SEQBENCH_CUDA_CHECK(cudaDeviceSynchronize());  // no queued update may overwrite what we set
  state_.copy_from_host({state});
  // A pageable host-to-device copy may return before the data lands; later work on a
  // non-blocking stream would not wait for it.
  SEQBENCH_CUDA_CHECK(cudaDeviceSynchronize());
}

}  // namespace seqbench::trainer
