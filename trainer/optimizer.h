// FusedOptimizer: the state of one optimizer over one workspace (fp32 state buffers, the step
// count, the per-step scratch), allocated once, and the per-step entry point.
//
//   Workspace ws(layout, DType::bf16, /*with_master=*/false);
//   FusedOptimizer opt(ws, config, PrecisionMode::no_master, seed);
//   LossScaler scaler;                   // optional: dynamic loss scaling on the device
//   ... backward writes ws.grads() scaled by *scaler.scale() ...
//   opt.step(ws, {lr, max_norm}, scaler, stream);   // 4 launches, no host synchronization
//
// In master_fp32 mode the workspace must have a master buffer, and the master must hold the
// initial parameters (Workspace::copy_params_to_master, load_state, or mark_master_filled after
// writing it) before the first step: step() refuses one from the zeroed master.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "core/device_buffer.h"
#include "trainer/fused_optimizer.h"
#include "trainer/loss_scaler.h"
#include "trainer/optimizer_state.h"
#include "trainer/workspace.h"

namespace seqbench::trainer {

// Device bytes of each part of a training state with `count` elements per buffer.
struct MemoryFootprint {
  std::size_t params = 0;
  std::size_t grads = 0;
  std::size_t master = 0;  // master_fp32 only
  std::size_t state = 0;   // m and v, or the momentum buffer
  std::size_t total() const { return params + grads + master + state; }
};
MemoryFootprint memory_footprint(std::size_t count, DType dtype, const OptimizerConfig& config,
                                 PrecisionMode mode);

// The minimal traffic of one update over `count` elements: each input read once, each output
// written once (params read unless master_fp32, grads, master, state read; params, master, state
// written). Adam/AdamW with 2-byte params: 22 bytes per element without a master, 28 with one.
// The statistics pass's extra gradient read is not counted: it is overhead, not the update's need.
std::size_t minimal_update_bytes(std::size_t count, DType dtype, const OptimizerConfig& config,
                                 PrecisionMode mode);

class FusedOptimizer {
 public:
  // Validates the configuration against the workspace (dtype for stochastic rounding, a master
  // buffer for master_fp32) and allocates zeroed state.
  FusedOptimizer(const Workspace& workspace, const OptimizerConfig& config, PrecisionMode mode,
                 std::uint64_t seed = 0);

  const OptimizerConfig& config() const { return config_; }
  PrecisionMode mode() const { return mode_; }
  std::uint64_t seed() const { return seed_; }
  std::size_t count() const { return count_; }

  // The buffers of one step over `workspace` (which must be the one this optimizer was built for:
  // same count and dtype, checked).
  UpdateBuffers buffers(Workspace& workspace);
  OptimizerScratch scratch();

  // Enqueues one step (statistics, decision, update) on `stream`. `loss_scale` is a device
  // pointer (null: unscaled gradients).
  void step(Workspace& workspace, const StepOptions& options, const float* loss_scale, cudaStream_t stream);
  // The same with the scaler's device scale, followed by the scaler's device-side transition.
  void step(Workspace& workspace, const StepOptions& options, LossScaler& scaler, cudaStream_t stream);

  // Device pointers: the last step's overflow flag and decision.
  const int* found_inf() const { return &control_.data()->found_inf; }
  const StepControl* control() const { return control_.data(); }
  float* state0() { return state0_.data(); }
  float* state1() { return state1_.data(); }

  // Synchronizing reads, for tests, logs and checkpoints (never on the per-step path).
  StepControl read_control() const;
  std::int64_t read_step() const;
  OptimizerStateSnapshot save_state(const Workspace& workspace) const;
  // Restores the step count, the state buffers and (master_fp32) the workspace's master. The
  // snapshot's kind, mode and count must match this optimizer (checked, naming the mismatch).
  void load_state(Workspace& workspace, const OptimizerStateSnapshot& snapshot);

 private:
  void check_workspace(const Workspace& workspace, const char* what) const;

  OptimizerConfig config_;
  PrecisionMode mode_;
  std::uint64_t seed_;
  std::size_t count_;
  DType dtype_;
  DeviceBuffer<float> state0_;
  DeviceBuffer<float> state1_;
  DeviceBuffer<GradStatsScratch> stats_;
  DeviceBuffer<StepControl> control_;
  DeviceBuffer<std::int64_t> step_;
};

}  // namespace seqbench::trainer
