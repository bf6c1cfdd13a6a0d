#include "core/cuda_check.h"
#include "core/nvtx.h"
#include "trainer/loss_scaler.h"

namespace seqbench::trainer {
namespace {

__global__ void loss_scaler_update_kernel(LossScalerState* state, const int* found_inf,
                                          LossScalerConfig config) {
  if (threadIdx.x == 0 && blockIdx.x == 0) *state = next_loss_scaler_state(*state, *found_inf != 0, config);
}

}  // namespace

void launch_loss_scaler_update(LossScalerState* state, const int* found_inf, const LossScalerConfig& config,
                               cudaStream_t stream) {
  SEQBENCH_NVTX_RANGE("loss_scaler_update");
  SEQBENCH_REQUIRE(state != nullptr && found_inf != nullptr,
                   "loss_scaler_update: null pointer (state " << state << ", found_inf " << found_inf << ")");
  validate_loss_scaler_config(config);
  loss_scaler_update_kernel<<<1, 32, 0, stream>>>(state, found_inf, config);
  SEQBENCH_CUDA_CHECK_LAUNCH();
}

}  // namespace seqbench::trainer
