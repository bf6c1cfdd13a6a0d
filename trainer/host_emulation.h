// The optimizer step on the host, element for element the code the kernels run
// (update_element, make_step_control and make_step_coefficients from update_rule.h), for the CPU
// tests and the drift study. Compiled with -ffp-contract=off (trainer/CMakeLists.txt) so that the
// host performs exactly the roundings the device performs: the GPU tests require the device
// results to equal these bit for bit.
//
// The one place where host and device legitimately differ is the order in which the squared
// gradients are summed for the norm (the device sums per thread, then per block, then across
// blocks); emulate_grad_stats sums in double and rounds once. A GPU test that wants bitwise
// agreement under clipping therefore runs emulate_update with the device's own StepControl.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "trainer/fused_optimizer.h"

namespace seqbench::trainer {

// Host pointers of one update; the same roles as UpdateBuffers.
template <class T>
struct HostUpdateBuffers {
  T* params = nullptr;
  const T* grads = nullptr;
  float* master = nullptr;
  float* state0 = nullptr;
  float* state1 = nullptr;
  std::size_t count = 0;
  std::uint64_t index_base = 0;
};

struct HostGradStats {
  float sum_squares = 0.0f;  // of the unscaled gradients, summed in double, rounded once
  bool nonfinite = false;
};

template <class T>
HostGradStats emulate_grad_stats(const T* grads, std::size_t count, float loss_scale);

// The update pass with a given decision: nothing when control.found_inf; otherwise
// update_element on every element, with the kernels' Philox bits in stochastic_rounding mode.
// Buffers the kind/mode does not use may be null; a null one it uses is refused, by name.
template <class T>
void emulate_update(const HostUpdateBuffers<T>& buffers, OptimizerKind kind, PrecisionMode mode,
                    const StepControl& control, std::uint64_t seed, bool grads_prescaled = false);

// A whole step: statistics, decision (advancing `step` unless skipped), update. Returns the decision.
template <class T>
StepControl emulate_step(const HostUpdateBuffers<T>& buffers, const OptimizerConfig& config,
                         PrecisionMode mode, const StepOptions& options, float loss_scale, std::uint64_t seed,
                         std::int64_t& step);

// Host vectors sized for one configuration (unused buffers empty), zero-initialized.
template <class T>
struct HostTrainingState {
  std::vector<T> params, grads;
  std::vector<float> master, state0, state1;
  std::int64_t step = 0;

  HostTrainingState(std::size_t count, const OptimizerConfig& config, PrecisionMode mode);
  HostUpdateBuffers<T> buffers();
};

}  // namespace seqbench::trainer
