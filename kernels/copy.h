// Device-to-device copy: the bandwidth ceiling every memory-bound kernel is measured against.
//
// launch_copy(dst, src, bytes, stream)
//   What: dst[i] = src[i] for i < bytes. Minimal traffic: `bytes` read + `bytes` written.
//   Thread mapping: a grid-stride loop; each thread moves one 16-byte vector per iteration, so a
//   warp moves 512 contiguous bytes per instruction pair; the grid is sized to fill every SM
//   (blocks_per_sm x sm_count). The head before the first 16-byte boundary of both pointers and
//   the tail after the last whole vector are copied byte by byte, so any size and alignment works.
//   Limits: dst and src must not overlap (checked); bytes may be 0.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

namespace seqbench::kernels {

void launch_copy(void* dst, const void* src, std::size_t bytes, cudaStream_t stream);

}  // namespace seqbench::kernels
