// Grid sizing shared by the trainer's grid-stride kernels: enough blocks to fill every SM
// (blocks_per_sm per SM), never more than the work needs, at least one.
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstddef>
#include <vector>

#include "core/cuda_check.h"

namespace seqbench::trainer {

// The current device's SM count, asked once per (thread, device): the per-tensor baseline sizes
// a grid per tensor, and a driver query at each of those launches is host time the GPU waits on
// (see resident_grid_blocks below).
inline int multiprocessor_count() {
  thread_local std::vector<int> known;  // by device ordinal; 0 = not asked yet
  int device = 0;
  SEQBENCH_CUDA_CHECK(cudaGetDevice(&device));
  if (static_cast<std::size_t>(device) >= known.size()) known.resize(static_cast<std::size_t>(device) + 1, 0);
  int& sms = known[static_cast<std::size_t>(device)];
  if (sms == 0) SEQBENCH_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  return sms;
}

// `items` units of work of which each thread takes one per grid-stride iteration.
inline int grid_stride_blocks(std::size_t items, int threads, int blocks_per_sm, int max_blocks = 1 << 30) {
  const std::size_t needed =
      (items + static_cast<std::size_t>(threads) - 1) / static_cast<std::size_t>(threads);
  const std::size_t full =
      static_cast<std::size_t>(multiprocessor_count()) * static_cast<std::size_t>(blocks_per_sm);
  const std::size_t blocks = std::min({needed, full, static_cast<std::size_t>(max_blocks)});
  return static_cast<int>(std::max<std::size_t>(blocks, 1));
}

// A grid of exactly one resident wave of `kernel` (at most `items` / threads blocks, at least 1):
// a grid-stride loop then has no second, partial wave. The occupancy query is a host call of a few
// microseconds; the per-tensor baseline launches per tensor, and paying it at every launch would
// make that baseline slower than the eager code it stands for (the GPU waits on the host between
// small kernels). So each (device, kernel, block size) is asked once per thread and remembered: an
// occupancy depends on nothing else that can change while a program runs.
template <class Kernel>
int resident_grid_blocks(Kernel kernel, std::size_t items, int threads) {
  struct Known {
    int device;
    const void* kernel;
    int threads;
    int per_sm;
  };
  thread_local std::vector<Known> known;
  int device = 0;
  SEQBENCH_CUDA_CHECK(cudaGetDevice(&device));
  const void* key = reinterpret_cast<const void*>(kernel);
  int per_sm = -1;
  for (const Known& k : known)
    if (k.device == device && k.kernel == key && k.threads == threads) per_sm = k.per_sm;
  if (per_sm < 0) {
    SEQBENCH_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, 0));
    known.push_back({device, key, threads, per_sm});
  }
  return grid_stride_blocks(items, threads, std::max(per_sm, 1));
}

}  // namespace seqbench::trainer
