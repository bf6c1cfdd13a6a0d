#include <algorithm>
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

// validate_update_buffers checks the buffers of one entry against each other; the entries of one
// launch are updated by different blocks at once, so any byte two of them share (the same entry
// twice, one entry's grads on another's params) is a race. Sorted by start, ranges overlap iff one
// starts before the furthest end so far.
void require_disjoint_entries(const std::vector<UpdateBuffers>& tensors, const OptimizerConfig& config,
                              PrecisionMode mode) {
  struct Range {
    std::uintptr_t begin, end;
    std::size_t entry;
    const char* name;
  };
  std::vector<Range> ranges;
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const UpdateBuffers& t = tensors[i];
    if (t.count == 0) continue;
    const std::size_t element = dtype_size(t.dtype);
    const auto add = [&](const void* ptr, std::size_t bytes, const char* name) {
      const auto begin = reinterpret_cast<std::uintptr_t>(ptr);
      ranges.push_back(Range{begin, begin + t.count * bytes, i, name});
    };
    add(t.params, element, "params");
    add(t.grads, element, "grads");
    if (mode == PrecisionMode::master_fp32) add(t.master, sizeof(float), "master");
    if (uses_state0(config)) add(t.state0, sizeof(float), "state0");
    if (uses_state1(config)) add(t.state1, sizeof(float), "state1");
  }
  std::stable_sort(ranges.begin(), ranges.end(),
                   [](const Range& a, const Range& b) { return a.begin < b.begin; });
  const Range* furthest = nullptr;
  for (const Range& r : ranges) {
    if (furthest != nullptr && r.begin < furthest->end) {
      SEQBENCH_FAIL("multi_tensor_update: tensor "
                    << r.entry << "'s " << r.name << " [" << reinterpret_cast<const void*>(r.begin) << ", +"
                    << r.end - r.begin << ") overlaps tensor " << furthest->entry << "'s " << furthest->name
                    << " [" << reinterpret_cast<const void*>(furthest->begin) << ", +"
                    << furthest->end - furthest->begin << ")");
    }
    if (furthest == nullptr || r.end > furthest->end) furthest = &r;
  }
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
  require_disjoint_entries(tensors, config, mode);
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
  validate_step_values(config, options.lr, options.max_grad_norm);
  SEQBENCH_REQUIRE(scratch.stats != nullptr && scratch.control != nullptr && scratch.step != nullptr,
                   "multi_tensor_step: null scratch pointer");
  const std::vector<UpdateBuffers> slices = slice_update_buffers(layout, whole);
  launch_grad_stats(whole.dtype, whole.grads, whole.count, loss_scale, scratch.stats, stream);
  launch_prepare_step(scratch.stats, loss_scale, config, options, scratch.step, scratch.control, stream);
  launch_multi_tensor_update(slices, config, mode, seed, scratch.control, stream);
}

}  // namespace seqbench::trainer
