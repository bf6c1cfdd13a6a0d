// The fused optimizer: Adam, AdamW and SGD (momentum, Nesterov) over a whole workspace in one
// update launch, with on-the-fly dtype conversion, unscaling, inf/NaN skipping and optional
// global-norm clipping, and no host synchronization anywhere in a step.
//
// A step is three launches on one stream (launch_fused_optimizer_step does all three):
//   1. launch_grad_stats    reads every gradient once: per-block partial sums of the squared
//                           unscaled gradients and per-block "saw an inf/NaN" flags.
//   2. launch_prepare_step  one block reduces the partials in a fixed order (deterministic, no
//                           float atomics), decides the step (make_step_control in
//                           update_rule.h: overflow flag, norm, clip coefficient, gradient
//                           multiplier, step count t, the per-step coefficients) and writes it to
//                           a StepControl in device memory; t advances only on a good step.
//   3. launch_fused_update  every element once: reads the StepControl; when found_inf is set the
//                           whole grid returns before touching anything, so a skipped step leaves
//                           parameters, master and state bitwise unchanged; otherwise
//                           update_element() (update_rule.h) on each element.
// The overflow flag (StepControl::found_inf) stays on the device: LossScaler::update() reads it
// there. Pass 1 costs one extra read of the gradients (2 bytes per parameter in fp16/bf16);
// overflow skipping needs the global verdict before the first write, so it cannot be folded into
// the update pass without a grid-wide barrier.
//
// All buffers share one index space (see workspace.h): element i of params, grads, master,
// state0 and state1 belong to the same parameter. Minimal traffic per parameter, fp16/bf16
// params and grads, fp32 state (update pass; the statistics pass adds one gradient read):
//   Adam/AdamW no_master or stochastic_rounding: read p, g, m, v (12 B), write p, m, v (10 B) = 22 B
//   Adam/AdamW master_fp32: read g, master, m, v (14 B), write p, master, m, v (14 B) = 28 B
//   SGD momentum: 14 B (no_master) or 20 B (master_fp32); plain SGD: 6 B or 12 B
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "core/dtype.h"
#include "trainer/update_rule.h"

namespace seqbench::trainer {

// Device pointers of one update. Every array has `count` elements in one index space.
struct UpdateBuffers {
  DType dtype = DType::f32;     // of params and grads
  void* params = nullptr;       // T[count]; written in every mode, read except in master_fp32
  const void* grads = nullptr;  // T[count], scaled by the loss scale
  float* master = nullptr;      // fp32[count]: master_fp32 mode only
  float* state0 = nullptr;      // fp32[count]: Adam/AdamW m, SGD momentum buffer (momentum > 0)
  float* state1 = nullptr;      // fp32[count]: Adam/AdamW v
  std::size_t count = 0;
  // Global index of element 0, the stochastic-rounding key (seed, t, index_base + i): a slice
  // updated on its own draws the same bits as when the whole workspace is updated at once.
  std::uint64_t index_base = 0;
};

struct StepOptions {
  double lr = 1e-3;
  double max_grad_norm = 0.0;  // > 0: clip the unscaled gradients' global L2 norm to it
};

// Partials of pass 1, in device memory (caller-owned, one per optimizer).
inline constexpr int kMaxGradStatsBlocks = 1024;
struct GradStatsScratch {
  int blocks = 0;  // how many partials the last launch_grad_stats wrote
  int nonfinite[kMaxGradStatsBlocks];
  float sum_squares[kMaxGradStatsBlocks];
};

// The device memory a step needs besides the buffers (caller-owned; FusedOptimizer owns one).
struct OptimizerScratch {
  GradStatsScratch* stats = nullptr;
  StepControl* control = nullptr;
  std::int64_t* step = nullptr;  // the step count t: optimizer state, starts at 0
};

// Throws seqbench::Error naming the value and the limit: null pointers the kind/mode needs
// (params and grads when count > 0, state0 when uses_state0, state1 when uses_state1, master in
// master_fp32 mode), stochastic rounding with a dtype other than bf16, pointers not aligned to
// their element size, overlapping buffers, a byte size that overflows. `what` prefixes messages.
void validate_update_buffers(const UpdateBuffers& buffers, const OptimizerConfig& config, PrecisionMode mode,
                             const char* what);

// launch_grad_stats(dtype, grads, count, loss_scale, stats, stream)
//   What: with x_i = float(grads[i]) / loss_scale (1 when loss_scale is null), block b writes
//     stats->sum_squares[b] = sum of x_i^2 over its elements and stats->nonfinite[b] = 1 when any
//     x_i is inf/NaN; block 0 writes stats->blocks = gridDim.x.
//   Thread mapping: grid-stride over 16-byte vectors of gradients (8 fp16/bf16 or 4 fp32), one per
//   thread per iteration, when grads is 16-byte aligned; the tail (or all, when unaligned) one
//   element per thread. Float accumulation per thread, then a block tree reduction: for a given
//   device (SM count) and count the result is bitwise reproducible.
//   Grid: min(kMaxGradStatsBlocks, 8 per SM, what the count needs), at least 1.
//   Limits: any count (0 gives a zero sum and no overflow); grads non-null when count > 0;
//   stats non-null; loss_scale (device) may be null.
void launch_grad_stats(DType dtype, const void* grads, std::size_t count, const float* loss_scale,
                       GradStatsScratch* stats, cudaStream_t stream);

// launch_prepare_step(stats, loss_scale, config, options, step, control, stream)
//   What: *control = make_step_control(any nonfinite, sum of partials, *loss_scale (1 if null),
//     config, options.lr, options.max_grad_norm, *step); then *step = control->step.
//   Thread mapping: one block of 256 threads; thread j sums partials j, j+256, ... and the block
//   tree-reduces them (fixed order: deterministic); thread 0 computes and writes the decision.
//   Limits: stats, step, control non-null; config and options valid (all checked).
void launch_prepare_step(const GradStatsScratch* stats, const float* loss_scale,
                         const OptimizerConfig& config, const StepOptions& options, std::int64_t* step,
                         StepControl* control, cudaStream_t stream);

// launch_fused_update(buffers, config, mode, seed, control, grads_prescaled, stream)
//   What: unless control->found_inf, update_element<T, kind, mode>() (update_rule.h) on every
//     i < count with the coefficients and gradient multiplier of *control (multiplier 1 when
//     grads_prescaled: the baseline's fp32 gradients are already unscaled) and, in
//     stochastic_rounding mode, the bits philox_bits(seed, control->step, index_base + i).
//   Thread mapping: grid-stride; each thread updates one 16-byte vector of parameters (8 fp16/bf16
//     or 4 fp32: Packed<T> loads of p and g, Packed<float> loads of master/m/v) per iteration when
//     every pointer is 16-byte aligned (and index_base % 4 == 0 in stochastic_rounding mode, so a
//     vector's Philox words come from whole groups); the tail after the last vector, or
//     everything when unaligned, one element per thread. Conversion happens in registers.
//   Grid: one resident wave (blocks of 256 threads x the occupancy the kernel's registers allow x
//   SMs), fewer when the count needs fewer.
//   Limits: any count (0 returns at once); see validate_update_buffers; control non-null.
//   Deterministic: each element's result depends only on its own inputs and *control.
void launch_fused_update(const UpdateBuffers& buffers, const OptimizerConfig& config, PrecisionMode mode,
                         std::uint64_t seed, const StepControl* control, bool grads_prescaled,
                         cudaStream_t stream);

// The whole step: launch_grad_stats + launch_prepare_step + launch_fused_update on `stream`.
// Validates everything before the first launch.
void launch_fused_optimizer_step(const UpdateBuffers& buffers, const OptimizerConfig& config,
                                 PrecisionMode mode, const StepOptions& options, std::uint64_t seed,
                                 const float* loss_scale, const OptimizerScratch& scratch,
                                 cudaStream_t stream);

}  // namespace seqbench::trainer
