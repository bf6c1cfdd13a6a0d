// spin_for_ns: a thread that waits `ns` nanoseconds of the GPU's global timer (%globaltimer, which
// ticks about every microsecond). Used where a kernel of known length is wanted: the softmax tuner's
// hold, which keeps a stream busy while the host queues the launches it times, and the timer test's
// kernel of known duration.
#pragma once

namespace seqbench::kernels {

__device__ inline void spin_for_ns(unsigned long long ns) {
  unsigned long long start;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  for (;;) {
    unsigned long long now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    if (now - start >= ns) break;
  }
}

}  // namespace seqbench::kernels
