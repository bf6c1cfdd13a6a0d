// The apex-style multi-tensor table and what one block of the multi-tensor update does with it,
// host/device so that tests/trainer/kernel_simulation_test.cu can replay every block on the host.
// Include from .cu files (nvcc) only.
#pragma once

#include <cstdint>
#include <vector>

#include "trainer/multi_tensor_apply.h"
#include "trainer/update_kernel.cuh"

namespace seqbench::trainer::detail {

// The kernel-argument table of one launch, as apex's TensorListMetadata: per tensor slot its
// pointers (null where the kind/mode does not use the buffer), count and stochastic-rounding index
// base; per block its slot and chunk.
struct MtaTable {
  void* params[kMtaMaxTensors];
  const void* grads[kMtaMaxTensors];
  float* master[kMtaMaxTensors];
  float* state0[kMtaMaxTensors];
  float* state1[kMtaMaxTensors];
  std::uint64_t count[kMtaMaxTensors];
  std::uint64_t index_base[kMtaMaxTensors];
  std::uint32_t block_chunk[kMtaMaxBlocks];
  unsigned char block_slot[kMtaMaxBlocks];
};
static_assert(kMtaMaxTensors <= 256, "block_slot is a byte");
// 4 KiB of kernel parameters is the limit every CUDA version accepts; the other arguments need < 64 B.
static_assert(sizeof(MtaTable) + 64 <= 4096, "the multi-tensor table must fit the kernel parameter space");

inline void fill_mta_table(MtaTable& table, const MtaLaunch& launch,
                           const std::vector<UpdateBuffers>& tensors, const OptimizerConfig& config,
                           PrecisionMode mode) {
  table = MtaTable{};
  for (std::size_t s = 0; s < launch.tensors.size(); ++s) {
    const UpdateBuffers& t = tensors[launch.tensors[s]];
    table.params[s] = t.params;
    table.grads[s] = t.grads;
    table.master[s] = mode == PrecisionMode::master_fp32 ? t.master : nullptr;
    table.state0[s] = uses_state0(config) ? t.state0 : nullptr;
    table.state1[s] = uses_state1(config) ? t.state1 : nullptr;
    table.count[s] = t.count;
    table.index_base[s] = t.index_base;
  }
  for (std::size_t b = 0; b < launch.blocks.size(); ++b) {
    table.block_slot[b] = static_cast<unsigned char>(launch.blocks[b].slot);
    table.block_chunk[b] = static_cast<std::uint32_t>(launch.blocks[b].chunk);
  }
}

// Block `block`'s chunk: the typed pointers at the chunk's start and its length (<= kMtaChunkElements).
template <class T>
struct MtaChunk {
  UpdateArgs<T> args;
  std::size_t count;
};

template <class T>
SEQBENCH_HD inline MtaChunk<T> mta_chunk(const MtaTable& table, unsigned block) {
  const int slot = table.block_slot[block];
  const std::size_t begin = static_cast<std::size_t>(table.block_chunk[block]) * kMtaChunkElements;
  const std::size_t left = table.count[slot] - begin;
  auto at = [begin](float* p) { return p ? p + begin : nullptr; };
  // kMtaChunkElements is a multiple of every vector width, so a tensor aligned at its start is
  // aligned at every chunk.
  return MtaChunk<T>{
      UpdateArgs<T>{static_cast<T*>(table.params[slot]) + begin,
                    static_cast<const T*>(table.grads[slot]) + begin, at(table.master[slot]),
                    at(table.state0[slot]), at(table.state1[slot]), table.index_base[slot] + begin},
      left < kMtaChunkElements ? left : kMtaChunkElements};
}

}  // namespace seqbench::trainer::detail
