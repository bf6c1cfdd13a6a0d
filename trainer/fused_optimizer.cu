#include <cstdint>

#include "core/cuda_check.h"
#include "core/nvtx.h"
#include "kernels/packed.h"
#include "kernels/reduce.cuh"
#include "trainer/fused_optimizer.h"
#include "trainer/grid.h"
#include "trainer/update_kernel.cuh"

namespace seqbench::trainer {
namespace {

constexpr int kStatsThreads = 256;
constexpr int kStatsBlocksPerSm = 8;
constexpr int kPrepareThreads = 256;
constexpr int kUpdateThreads = 256;

// ---- pass 1: gradient statistics ----------------------------------------------------------

template <class T>
__global__ void __launch_bounds__(kStatsThreads)
    grad_stats_kernel(const T* __restrict__ grads, std::size_t count, bool vectorized,
                      const float* __restrict__ loss_scale, GradStatsScratch* __restrict__ stats) {
  const float inv_scale = loss_scale ? inverse_loss_scale(*loss_scale) : 1.0f;
  float sum = 0.0f;
  int nonfinite = 0;
  detail::grad_stats_thread(grads, count, vectorized, inv_scale,
                            static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x,
                            static_cast<std::size_t>(gridDim.x) * blockDim.x, sum, nonfinite);
  sum = kernels::block_reduce_sum(sum);
  nonfinite = __syncthreads_or(nonfinite);
  if (threadIdx.x == 0) {
    stats->sum_squares[blockIdx.x] = sum;
    stats->nonfinite[blockIdx.x] = nonfinite ? 1 : 0;
    if (blockIdx.x == 0) stats->blocks = static_cast<int>(gridDim.x);
  }
}

// ---- the decision ------------------------------------------------------------------------

__global__ void __launch_bounds__(kPrepareThreads)
    prepare_step_kernel(const GradStatsScratch* __restrict__ stats, const float* __restrict__ loss_scale,
                        OptimizerConfig config, double lr, double max_grad_norm,
                        std::int64_t* __restrict__ step, StepControl* __restrict__ control) {
  const int blocks = stats->blocks;
  float sum = 0.0f;
  int nonfinite = 0;
  for (int b = static_cast<int>(threadIdx.x); b < blocks; b += static_cast<int>(blockDim.x)) {
    sum += stats->sum_squares[b];
    nonfinite |= stats->nonfinite[b];
  }
  sum = kernels::block_reduce_sum(sum);
  nonfinite = __syncthreads_or(nonfinite);
  if (threadIdx.x == 0) {
    const float scale = loss_scale ? *loss_scale : 1.0f;
    const StepControl decided =
        make_step_control(nonfinite != 0, sum, scale, config, lr, max_grad_norm, *step);
    *control = decided;
    *step = decided.step;
  }
}

// ---- pass 2: the update ------------------------------------------------------------------

template <class T, OptimizerKind K, PrecisionMode M>
__global__ void __launch_bounds__(kUpdateThreads)
    fused_update_kernel(detail::UpdateArgs<T> args, std::size_t count, bool vectorized, std::uint64_t seed,
                        bool grads_prescaled, const StepControl* __restrict__ control) {
  // One word read by every thread: on overflow the whole grid leaves before its first store.
  if (control->found_inf) return;
  const detail::StepContext ctx = detail::load_step_context<K>(control, seed, grads_prescaled);
  detail::update_range_thread<T, K, M>(args, ctx, count, vectorized,
                                       static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x,
                                       static_cast<std::size_t>(gridDim.x) * blockDim.x);
}

using detail::aligned16;

template <class T>
void launch_update_typed(const UpdateBuffers& b, const OptimizerConfig& config, PrecisionMode mode,
                         std::uint64_t seed, const StepControl* control, bool grads_prescaled,
                         cudaStream_t stream) {
  const detail::UpdateArgs<T> args{static_cast<T*>(b.params),
                                   static_cast<const T*>(b.grads),
                                   mode == PrecisionMode::master_fp32 ? b.master : nullptr,
                                   uses_state0(config) ? b.state0 : nullptr,
                                   uses_state1(config) ? b.state1 : nullptr,
                                   b.index_base};
  // Unused pointers are null, and null is aligned: only the buffers the update touches decide.
  const bool vectorized = detail::can_vectorize(args, mode);
  constexpr int V = detail::kUpdateVector<T>;
  const std::size_t items = vectorized ? b.count / V + b.count % V : b.count;
  detail::dispatch_kind_mode<T>(config.kind, mode, [&](auto kind_tag, auto mode_tag) {
    const auto kernel = fused_update_kernel<T, decltype(kind_tag)::value, decltype(mode_tag)::value>;
    const int blocks = resident_grid_blocks(kernel, items, kUpdateThreads);
    kernel<<<blocks, kUpdateThreads, 0, stream>>>(args, b.count, vectorized, seed, grads_prescaled, control);
  });
  SEQBENCH_CUDA_CHECK_LAUNCH();
}

void validate_stats(DType dtype, const void* grads, std::size_t count, const GradStatsScratch* stats) {
  dtype_name(dtype);
  SEQBENCH_REQUIRE(stats != nullptr, "grad_stats: the GradStatsScratch pointer is null");
  SEQBENCH_REQUIRE(count == 0 || grads != nullptr, "grad_stats: grads is null for " << count << " elements");
  SEQBENCH_REQUIRE(
      reinterpret_cast<std::uintptr_t>(grads) % dtype_size(dtype) == 0,
      "grad_stats: grads " << grads << " is not aligned to its " << dtype_size(dtype) << "-byte elements");
}

void validate_prepare(const GradStatsScratch* stats, const OptimizerConfig& config,
                      const StepOptions& options, const std::int64_t* step, const StepControl* control) {
  validate_optimizer_config(config);
  validate_step_values(config, options.lr, options.max_grad_norm);
  SEQBENCH_REQUIRE(stats != nullptr && step != nullptr && control != nullptr,
                   "prepare_step: null device pointer (stats " << stats << ", step " << step << ", control "
                                                               << control << ")");
}

}  // namespace

void launch_grad_stats(DType dtype, const void* grads, std::size_t count, const float* loss_scale,
                       GradStatsScratch* stats, cudaStream_t stream) {
  SEQBENCH_NVTX_RANGE("optimizer_grad_stats");
  validate_stats(dtype, grads, count, stats);
  dispatch_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    const T* typed = static_cast<const T*>(grads);
    const bool vectorized = aligned16(typed);
    constexpr int V = detail::kUpdateVector<T>;
    const std::size_t items = vectorized ? count / V + count % V : count;
    const int blocks = grid_stride_blocks(items, kStatsThreads, kStatsBlocksPerSm, kMaxGradStatsBlocks);
    grad_stats_kernel<T><<<blocks, kStatsThreads, 0, stream>>>(typed, count, vectorized, loss_scale, stats);
  });
  SEQBENCH_CUDA_CHECK_LAUNCH();
}

void launch_prepare_step(const GradStatsScratch* stats, const float* loss_scale,
                         const OptimizerConfig& config, const StepOptions& options, std::int64_t* step,
                         StepControl* control, cudaStream_t stream) {
  SEQBENCH_NVTX_RANGE("optimizer_prepare_step");
  validate_prepare(stats, config, options, step, control);
  prepare_step_kernel<<<1, kPrepareThreads, 0, stream>>>(stats, loss_scale, config, options.lr,
                                                         options.max_grad_norm, step, control);
  SEQBENCH_CUDA_CHECK_LAUNCH();
}

void launch_fused_update(const UpdateBuffers& buffers, const OptimizerConfig& config, PrecisionMode mode,
                         std::uint64_t seed, const StepControl* control, bool grads_prescaled,
                         cudaStream_t stream) {
  SEQBENCH_NVTX_RANGE("optimizer_fused_update");
  validate_update_buffers(buffers, config, mode, "fused_update");
  SEQBENCH_REQUIRE(control != nullptr, "fused_update: the StepControl pointer is null");
  if (buffers.count == 0) return;
  dispatch_dtype(buffers.dtype, [&](auto tag) {
    launch_update_typed<decltype(tag)>(buffers, config, mode, seed, control, grads_prescaled, stream);
  });
}

void launch_fused_optimizer_step(const UpdateBuffers& buffers, const OptimizerConfig& config,
                                 PrecisionMode mode, const StepOptions& options, std::uint64_t seed,
                                 const float* loss_scale, const OptimizerScratch& scratch,
                                 cudaStream_t stream) {
  SEQBENCH_NVTX_RANGE("optimizer_step");
  // Everything is checked before the first launch, so a bad argument leaves the stream untouched.
  validate_update_buffers(buffers, config, mode, "fused_optimizer_step");
  validate_stats(buffers.dtype, buffers.grads, buffers.count, scratch.stats);
  validate_prepare(scratch.stats, config, options, scratch.step, scratch.control);
  launch_grad_stats(buffers.dtype, buffers.grads, buffers.count, loss_scale, scratch.stats, stream);
  launch_prepare_step(scratch.stats, loss_scale, config, options, scratch.step, scratch.control, stream);
  launch_fused_update(buffers, config, mode, seed, scratch.control, false, stream);
}

}  // namespace seqbench::trainer
