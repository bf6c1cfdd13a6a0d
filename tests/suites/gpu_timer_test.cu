// GpuTimer on the device: a kernel of known duration is measured as such, and the stop rules hold.
#include <gtest/gtest.h>

#include "suites/gpu_timer.h"
#include "suites/sample_stats.h"
#include "tests/common/gpu_test.h"

namespace seqbench {
namespace {

// Spins for `ns` nanoseconds of the global timer: a kernel whose true duration is known.
__global__ void spin_kernel(unsigned long long ns) {
  unsigned long long start;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  for (;;) {
    unsigned long long now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    if (now - start >= ns) break;
  }
}

TEST(GpuTimerGpu, MeasuresAKernelOfKnownDuration) {
  SEQBENCH_REQUIRE_GPU();
  TimerPolicy policy;
  policy.min_samples = 5;
  policy.max_samples = 20;
  policy.budget_seconds = 10.0;  // the sample count must stop it
  GpuTimer timer(policy);
  const auto samples = timer.sample_ms([](cudaStream_t s) { spin_kernel<<<1, 1, 0, s>>>(2'000'000); });
  ASSERT_EQ(samples.size(), 20u);
  const SampleStats stats = summarize_samples(samples);
  // 2 ms spin: events add launch latency (microseconds), the globaltimer ticks at ~1 µs.
  EXPECT_GE(stats.median, 1.99);
  EXPECT_LE(stats.median, 2.2);
}

TEST(GpuTimerGpu, TimeBudgetStopsSamplingAfterMinSamples) {
  SEQBENCH_REQUIRE_GPU();
  TimerPolicy policy;
  policy.min_samples = 3;
  policy.max_samples = 1000;
  policy.budget_seconds = 0.05;
  GpuTimer timer(policy);
  const auto samples = timer.sample_ms([](cudaStream_t s) { spin_kernel<<<1, 1, 0, s>>>(10'000'000); });
  EXPECT_GE(samples.size(), 3u);
  EXPECT_LE(samples.size(), 6u);  // 10 ms each against a 50 ms budget
}

}  // namespace
}  // namespace seqbench
