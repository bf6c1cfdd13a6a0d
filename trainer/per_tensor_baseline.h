// Baseline (i): the Fairseq FP16Optimizer way of taking a mixed-precision step, one tensor at a
// time, for comparison with the fused whole-workspace update.
//
// launch_per_tensor_step(layout, buffers, config, options, loss_scale, scratch, stream)
//   What: the same step as launch_fused_optimizer_step in master_fp32 mode (bitwise the same
//     parameters, master and state), organized as Fairseq does it:
//       launch_grad_stats + launch_prepare_step over the flat gradients (overflow flag, norm),
//       then for every tensor of `layout` with count > 0, three launches:
//         1. grads_fp32[slice] = float(grads[slice]) * multiplier        (launch_convert, unscale)
//         2. the fp32 update of master[slice] with grads_fp32[slice]      (launch_fused_update on
//            the slice: T = float, no_master mode with master as the parameters, prescaled)
//         3. params[slice] = T(master[slice])                            (launch_convert)
//     so 2 + 3 x tensors launches per step, each reading the device overflow flag and returning at
//     once when it is set. The padding between tensors is never touched (it stays zero).
//   Memory: an fp32 master and an fp32 gradient copy of every parameter, as Fairseq keeps.
//   Thread mapping: that of the kernels named above, one grid per tensor.
//   Limits: buffers as validate_update_buffers with master_fp32 mode, plus grads_fp32 non-null and
//     disjoint from the others; every buffer has layout.total_elements() elements.
#pragma once

#include <cuda_runtime_api.h>

#include "trainer/fused_optimizer.h"
#include "trainer/workspace.h"

namespace seqbench::trainer {

struct PerTensorBuffers {
  DType dtype = DType::f32;
  void* params = nullptr;
  const void* grads = nullptr;
  float* master = nullptr;
  float* grads_fp32 = nullptr;
  float* state0 = nullptr;
  float* state1 = nullptr;
};

void launch_per_tensor_step(const WorkspaceLayout& layout, const PerTensorBuffers& buffers,
                            const OptimizerConfig& config, const StepOptions& options,
                            const float* loss_scale, const OptimizerScratch& scratch, cudaStream_t stream);

}  // namespace seqbench::trainer
