// Dynamic loss scaling with torch.cuda.amp.GradScaler's semantics, kept on the device.
//
// The state machine (torch's _amp_update_scale_), one transition per optimizer step:
//   overflow (some gradient inf/NaN):  scale *= backoff_factor; growth_tracker = 0   (the step is skipped)
//   otherwise:                          growth_tracker += 1;
//                                       if growth_tracker == growth_interval:
//                                         scale *= growth_factor (only if the product is finite);
//                                         growth_tracker = 0
// Defaults as torch: init scale 2^16, growth 2, backoff 0.5, interval 2000.
//
// next_loss_scaler_state() is that transition as a pure __host__ __device__ function: the device
// kernel and the host mirror (CPU tests, drift study) run the same code. The device copy of the
// state is updated by launch_loss_scaler_update() from the optimizer's device overflow flag, so
// a training step never waits for the host; the host reads the state only when it asks to
// (state(), a synchronizing read for logging and checkpoints).
#pragma once

#include <cuda_runtime_api.h>

#include "core/device_buffer.h"
#include "core/dtype.h"  // SEQBENCH_HD

namespace seqbench::trainer {

// The factors are doubles, as torch's (Python floats passed to _amp_update_scale_ as C++ double):
// the float scale times the double factor is multiplied in double, then rounded to float, as
// torch's kernels do. With float factors, a factor that is not a power of two (backoff 0.9, say)
// was itself rounded to float first, and the scale landed an ulp away from torch's
// (tests/trainer/update_rules_torch_test.py found that).
struct LossScalerConfig {
  float init_scale = 65536.0f;
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int growth_interval = 2000;
};

// Throws seqbench::Error naming the value and its limit: init_scale finite > 0, growth_factor > 1,
// backoff_factor in (0, 1), growth_interval >= 1 (torch's own checks), and, since the scale is a
// float, init_scale with a finite float reciprocal and both factors at least 2^-23 away from 1
// (nearer, scale × factor rounds back to the scale).
void validate_loss_scaler_config(const LossScalerConfig& config);

struct LossScalerState {
  float scale = 65536.0f;
  int growth_tracker = 0;  // consecutive good steps since the last change of scale
};

SEQBENCH_HD inline LossScalerState initial_loss_scaler_state(const LossScalerConfig& config) {
  return LossScalerState{config.init_scale, 0};
}

SEQBENCH_HD inline LossScalerState next_loss_scaler_state(LossScalerState state, bool overflow,
                                                          const LossScalerConfig& config) {
  if (overflow) return LossScalerState{static_cast<float>(state.scale * config.backoff_factor), 0};
  const int successful = state.growth_tracker + 1;
  if (successful < config.growth_interval) return LossScalerState{state.scale, successful};
  const double grown = static_cast<double>(state.scale) * config.growth_factor;
  // torch rounds the product to float and keeps the old scale when that is not finite, resetting
  // the tracker either way; tested before the cast, which would be undefined out of float's range.
  const bool finite = rounds_to_finite_float(grown);
  return LossScalerState{finite ? static_cast<float>(grown) : state.scale, 0};
}

// launch_loss_scaler_update(state, found_inf, config, stream)
//   What: *state = next_loss_scaler_state(*state, *found_inf != 0, config), both in device memory.
//   Thread mapping: one thread of one block (a dependent scalar update; it exists so that the
//   transition happens on the device, in stream order after the optimizer wrote *found_inf).
//   Limits: state and found_inf non-null (checked), config valid (checked).
void launch_loss_scaler_update(LossScalerState* state, const int* found_inf, const LossScalerConfig& config,
                               cudaStream_t stream);

// Owns the device state. scale() is the device pointer the backward pass multiplies the loss by
// and the optimizer divides the gradients by.
class LossScaler {
 public:
  explicit LossScaler(const LossScalerConfig& config = {});

  const LossScalerConfig& config() const { return config_; }
  float* scale() { return &state_.data()->scale; }
  const float* scale() const { return &state_.data()->scale; }
  LossScalerState* device_state() { return state_.data(); }

  // Enqueues the transition for the step whose overflow flag is at `found_inf` (device).
  void update(const int* found_inf, cudaStream_t stream);

  // Synchronizing host access, for logging and checkpoints (never on the per-step path).
  LossScalerState state() const;
  void set_state(const LossScalerState& state);

 private:
  LossScalerConfig config_;
  DeviceBuffer<LossScalerState> state_;
};

}  // namespace seqbench::trainer
