// Baseline (ii): apex's multi_tensor_apply, the way NVIDIA Apex's FusedAdam/FusedSGD update a
// list of separate tensors: each launch carries a table of tensor pointers and sizes in its
// kernel arguments, and each block updates one fixed-size chunk of one tensor; as many launches
// as the table limits require.
//
// plan_multi_tensor_apply(counts, chunk_elements, max_tensors, max_blocks)   (host, no GPU)
//   What: the launches apex's multi_tensor_apply makes for tensors of `counts` elements: tensors
//     are added in order (empty ones skipped), each contributes ceil(count / chunk) blocks; a
//     launch is emitted when the block table is full, when the tensor table is full and the
//     current tensor's last chunk is placed, or at the end. A tensor split across launches
//     reappears as slot 0 of the next launch. Every chunk of every tensor appears exactly once.
//
// launch_multi_tensor_update(tensors, config, mode, seed, control, stream)
//   What: for each entry of `tensors` (each an UpdateBuffers with its own pointers, count and
//     index_base), the same update as launch_fused_update: bitwise the same results, including
//     stochastic rounding, whose key is the global index index_base + i.
//   Thread mapping: one block of 512 threads per (tensor, chunk of 65536 elements) from the
//     table; each thread updates one 16-byte vector of the chunk per iteration (block-stride) when
//     the tensor's pointers are 16-byte aligned, else one element; the chunk's tail one element
//     per thread. Reads control->found_inf first and returns when set.
//   Limits: every entry as validate_update_buffers; the table (MtaTable) fits the 4 KiB kernel
//     parameter space (static_assert).
//
// launch_multi_tensor_step(layout, whole, config, mode, options, seed, loss_scale, scratch, stream)
//   The whole step: launch_grad_stats + launch_prepare_step over the flat gradients, then
//   launch_multi_tensor_update over the tensors of `layout` sliced out of `whole` (padding is not
//   a tensor and stays untouched).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <vector>

#include "trainer/fused_optimizer.h"
#include "trainer/workspace.h"

namespace seqbench::trainer {

// apex's limits for depth-5 tensor lists (p, g, master, m, v) and its default chunk size.
inline constexpr int kMtaMaxTensors = 30;
inline constexpr int kMtaMaxBlocks = 320;
inline constexpr std::size_t kMtaChunkElements = 65536;

struct MtaBlock {
  int slot = 0;           // index into MtaLaunch::tensors
  std::size_t chunk = 0;  // chunk index within that tensor
};

struct MtaLaunch {
  std::vector<std::size_t> tensors;  // indices into the caller's list
  std::vector<MtaBlock> blocks;
};

std::vector<MtaLaunch> plan_multi_tensor_apply(const std::vector<std::size_t>& counts,
                                               std::size_t chunk_elements = kMtaChunkElements,
                                               int max_tensors = kMtaMaxTensors,
                                               int max_blocks = kMtaMaxBlocks);

void launch_multi_tensor_update(const std::vector<UpdateBuffers>& tensors, const OptimizerConfig& config,
                                PrecisionMode mode, std::uint64_t seed, const StepControl* control,
                                cudaStream_t stream);

void launch_multi_tensor_step(const WorkspaceLayout& layout, const UpdateBuffers& whole,
                              const OptimizerConfig& config, PrecisionMode mode, const StepOptions& options,
                              std::uint64_t seed, const float* loss_scale, const OptimizerScratch& scratch,
                              cudaStream_t stream);

// The tensors of `layout` (count > 0) as slices of `whole`, index_base = the slice's offset.
std::vector<UpdateBuffers> slice_update_buffers(const WorkspaceLayout& layout, const UpdateBuffers& whole);

}  // namespace seqbench::trainer
