#include "trainer/per_tensor_baseline.h"

#include <cstdint>

#include "core/error.h"
#include "core/nvtx.h"
#include "trainer/convert.h"

namespace seqbench::trainer {

void launch_per_tensor_step(const WorkspaceLayout& layout, const PerTensorBuffers& b,
                            const OptimizerConfig& config, const StepOptions& options,
                            const float* loss_scale, const OptimizerScratch& scratch, cudaStream_t stream) {
  SEQBENCH_NVTX_RANGE("optimizer_per_tensor_step");
  const std::size_t count = layout.total_elements();
  const UpdateBuffers whole{b.dtype, b.params, b.grads, b.master, b.state0, b.state1, count, 0};
  validate_update_buffers(whole, config, PrecisionMode::master_fp32, "per_tensor_step");
  validate_step_values(config, options.lr, options.max_grad_norm);
  SEQBENCH_REQUIRE(scratch.stats != nullptr && scratch.control != nullptr && scratch.step != nullptr,
                   "per_tensor_step: null scratch pointer");
  if (count > 0) {
    SEQBENCH_REQUIRE(b.grads_fp32 != nullptr,
                     "per_tensor_step: grads_fp32 is null for " << count << " elements");
    const auto g32 = reinterpret_cast<std::uintptr_t>(b.grads_fp32);
    SEQBENCH_REQUIRE(g32 % sizeof(float) == 0, "per_tensor_step: grads_fp32 is not 4-byte aligned");
    const std::size_t element = dtype_size(b.dtype);
    const struct {
      const char* name;
      const void* ptr;
      std::size_t bytes;
    } others[] = {{"params", b.params, count * element},
                  {"grads", b.grads, count * element},
                  {"master", b.master, count * 4},
                  {"state0", uses_state0(config) ? b.state0 : nullptr, count * 4},
                  {"state1", uses_state1(config) ? b.state1 : nullptr, count * 4}};
    for (const auto& other : others) {
      if (other.ptr == nullptr) continue;
      const auto o = reinterpret_cast<std::uintptr_t>(other.ptr);
      SEQBENCH_REQUIRE(g32 + count * 4 <= o || o + other.bytes <= g32,
                       "per_tensor_step: grads_fp32 overlaps " << other.name);
    }
  }

  launch_grad_stats(b.dtype, b.grads, count, loss_scale, scratch.stats, stream);
  launch_prepare_step(scratch.stats, loss_scale, config, options, scratch.step, scratch.control, stream);
  const std::size_t element = dtype_size(b.dtype);
  for (const TensorSlot& slot : layout.tensors()) {
    if (slot.count == 0) continue;
    const std::size_t byte_offset = slot.offset * element;
    const void* grad = static_cast<const unsigned char*>(b.grads) + byte_offset;
    void* param = static_cast<unsigned char*>(b.params) + byte_offset;
    float* master = b.master + slot.offset;
    float* grad32 = b.grads_fp32 + slot.offset;
    launch_convert(grad32, DType::f32, grad, b.dtype, slot.count, scratch.control, ConvertScaling::unscale,
                   stream);
    UpdateBuffers fp32{DType::f32,
                       master,
                       grad32,
                       nullptr,
                       uses_state0(config) ? b.state0 + slot.offset : nullptr,
                       uses_state1(config) ? b.state1 + slot.offset : nullptr,
                       slot.count,
                       slot.offset};
    launch_fused_update(fp32, config, PrecisionMode::no_master, 0, scratch.control, /*grads_prescaled=*/true,
                        stream);
    launch_convert(param, b.dtype, master, DType::f32, slot.count, scratch.control,
                   ConvertScaling::skip_on_overflow, stream);
  }
}

}  // namespace seqbench::trainer
