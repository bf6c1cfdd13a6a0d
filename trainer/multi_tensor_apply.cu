#include <cstdint>

#include "core/cuda_check.h"
#include "core/nvtx.h"
#include "trainer/multi_tensor_apply.h"
#include "trainer/multi_tensor_kernel.cuh"

namespace seqbench::trainer {
namespace {

constexpr int kMtaThreads = 512;  // apex's block size

template <class T, OptimizerKind K, PrecisionMode M>
__global__ void __launch_bounds__(kMtaThreads)
    multi_tensor_update_kernel(detail::MtaTable table, std::uint64_t seed,
                               const StepControl* __restrict__ control) {
  if (control->found_inf) return;
  const detail::StepContext ctx = detail::load_step_context<K>(control, seed, false);
  const detail::MtaChunk<T> chunk = detail::mta_chunk<T>(table, blockIdx.x);
  detail::update_range_thread<T, K, M>(chunk.args, ctx, chunk.count, detail::can_vectorize(chunk.args, M),
                                       threadIdx.x, blockDim.x);
}

template <class T>
void launch_typed(const std::vector<UpdateBuffers>& tensors, const std::vector<MtaLaunch>& plan,
                  const OptimizerConfig& config, PrecisionMode mode, std::uint64_t seed,
                  const StepControl* control, cudaStream_t stream) {
  detail::dispatch_kind_mode<T>(config.kind, mode, [&](auto kind_tag, auto mode_tag) {
    for (const MtaLaunch& launch : plan) {
      detail::MtaTable table;
      detail::fill_mta_table(table, launch, tensors, config, mode);
      multi_tensor_update_kernel<T, decltype(kind_tag)::value, decltype(mode_tag)::value>
          <<<static_cast<unsigned>(launch.blocks.size()), kMtaThreads, 0, stream>>>(table, seed, control);
      SEQBENCH_CUDA_CHECK_LAUNCH();
    }
  });
}

}  // namespace

void launch_multi_tensor_update(const std::vector<UpdateBuffers>& tensors, const OptimizerConfig& config,
                                PrecisionMode mode, std::uint64_t seed, const StepControl* control,
                                cudaStream_t stream) {
  SEQBENCH_NVTX_RANGE("optimizer_multi_tensor_update");
  SEQBENCH_REQUIRE(control != nullptr, "multi_tensor_update: the StepControl pointer is null");
  std::vector<std::size_t> counts;
  counts.reserve(tensors.size());
  for (const UpdateBuffers& t : tensors) {
    validate_update_buffers(t, config, mode, "multi_tensor_update");
    SEQBENCH_REQUIRE(t.dtype == tensors.front().dtype, "multi_tensor_update: tensor dtypes differ ("
                                                           << dtype_name(t.dtype) << " and "
                                                           << dtype_name(tensors.front().dtype) << ")");
    SEQBENCH_REQUIRE(t.count / kMtaChunkElements < (std::size_t{1} << 32),
                     "multi_tensor_update: a tensor of "
                         << t.count << " elements has more than 2^32 chunks of " << kMtaChunkElements);
    counts.push_back(t.count);
  }
  if (tensors.empty()) return;
  const std::vector<MtaLaunch> plan = plan_multi_tensor_apply(counts);
  dispatch_dtype(tensors.front().dtype, [&](auto tag) {
    launch_typed<decltype(tag)>(tensors, plan, config, mode, seed, control, stream);
  });
}

void launch_multi_tensor_step(const WorkspaceLayout& layout, const UpdateBuffers& whole,
                              const OptimizerConfig& config, PrecisionMode mode, const StepOptions& options,
                              std::uint64_t seed, const float* loss_scale, const OptimizerScratch& scratch,
                              cudaStream_t stream) {
  SEQBENCH_NVTX_RANGE("optimizer_multi_tensor_step");
  validate_update_buffers(whole, config, mode, "multi_tensor_step");
  validate_step_values(options.lr, options.max_grad_norm);
  SEQBENCH_REQUIRE(scratch.stats != nullptr && scratch.control != nullptr && scratch.step != nullptr,
                   "multi_tensor_step: null scratch pointer");
  const std::vector<UpdateBuffers> slices = slice_update_buffers(layout, whole);
  launch_grad_stats(whole.dtype, whole.grads, whole.count, loss_scale, scratch.stats, stream);
  launch_prepare_step(scratch.stats, loss_scale, config, options, scratch.step, scratch.control, stream);
  launch_multi_tensor_update(slices, config, mode, seed, scratch.control, stream);
}

}  // namespace seqbench::trainer
