#include "trainer/loss_scaler.h"

#include <cmath>

#include "core/cuda_check.h"

namespace seqbench::trainer {

void validate_loss_scaler_config(const LossScalerConfig& config) {
  SEQBENCH_REQUIRE(std::isfinite(config.init_scale) && config.init_scale > 0.0f,
                   "loss scaler: init_scale " << config.init_scale << " must be finite and > 0");
  SEQBENCH_REQUIRE(std::isfinite(config.growth_factor) && config.growth_factor > 1.0,
                   "loss scaler: growth_factor " << config.growth_factor << " must be finite and > 1");
  SEQBENCH_REQUIRE(config.backoff_factor > 0.0 && config.backoff_factor < 1.0,
                   "loss scaler: backoff_factor " << config.backoff_factor << " outside (0, 1)");
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
  SEQBENCH_REQUIRE(std::isfinite(state.scale) && state.scale > 0.0f,
                   "loss scaler: scale " << state.scale << " must be finite and > 0");
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
