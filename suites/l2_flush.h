// The timer's L2 flush, as a read: every line of L2 replaced by a clean line of a buffer twice
// its size.
//
// Why a read and not cudaMemset (nvbench's flush, and this timer's before): a memset of L2's size
// leaves up to L2's size of DIRTY lines (about 50 MB on an H100), and the timed work's first
// misses evict them, so their write-back to DRAM lands inside the timed window. A graphed sample
// of 64 MiB (about 20 us at 3 TB/s) could pay for up to ~50 MB of extra writes: up to ~16 us,
// deflating a small operator's GB/s by as much as ~40 % and compressing its speedups. (The mirror
// effect, a sample's own last outputs still dirty in L2 at its stop event, is why a graphed
// sample moves kGraphSampleBytes = 1 GiB: suites/gpu_timer.h.) Reading a buffer of 2 x L2 leaves only clean
// lines (evicted for free); the dirty lines of the previous sample's outputs are written back during the
// flush, before the start event.
//
// launch_l2_flush_read(buffer, bytes, sink, stream)
//   What: reads every 16-byte vector of `buffer` (bytes a multiple of 16, 16-byte aligned), XORs
//   them per thread, and writes the XOR to *sink only if it equals a constant the zeroed buffer
//   never gives (so the loads cannot be dropped and nothing is written). Minimal traffic: `bytes`
//   read.
//   Thread mapping: a grid-stride loop over 16-byte vectors, 256 threads a block, enough blocks to
//   fill every SM.
//   Limits: buffer and sink non-null, bytes % 16 == 0 and the buffer 16-byte aligned (checked).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

namespace seqbench {

void launch_l2_flush_read(const void* buffer, std::size_t bytes, unsigned int* sink, cudaStream_t stream);

}  // namespace seqbench
