// GpuTimer on the device: a kernel of known duration is measured as such, directly and as graph
// replays; the stop rules hold; a graph replays exactly the captured work, and work that cannot be
// captured is timed directly with the reason; the L2 flush's read covers every vector, tail
// included, and stores nothing from a zeroed buffer.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/cuda_check.h"
#include "core/device_buffer.h"
#include "kernels/spin_wait.cuh"
#include "suites/gpu_timer.h"
#include "suites/l2_flush.h"
#include "suites/sample_stats.h"
#include "tests/common/gpu_test.h"

namespace seqbench {
namespace {

// Spins for `ns` nanoseconds of the global timer: a kernel whose true duration is known.
__global__ void spin_kernel(unsigned long long ns) {
  kernels::spin_for_ns(ns);
}

// A policy that takes between min_samples and max_samples samples within budget_seconds.
TimerPolicy sampling(int min_samples, int max_samples, double budget_seconds = 1.0) {
  TimerPolicy policy;
  policy.min_samples = min_samples;
  policy.max_samples = max_samples;
  policy.budget_seconds = budget_seconds;
  return policy;
}

TEST(GpuTimerGpu, MeasuresAKernelOfKnownDuration) {
  SEQBENCH_REQUIRE_GPU();
  GpuTimer timer(sampling(5, 20, 10.0));  // the sample count must stop it
  for (const bool graph : {false, true}) {
    for (const int calls : {1, 4}) {
      SCOPED_TRACE(std::string(graph ? "CUDA graph replays" : "direct launches") + ", " +
                   std::to_string(calls) + " call(s) a sample");
      // 2 ms a sample, in `calls` spins: the timer reports the time per call.
      const unsigned long long ns = 2'000'000ull / static_cast<unsigned>(calls);
      const TimedSamples t =
          timer.sample([ns](cudaStream_t s) { spin_kernel<<<1, 1, 0, s>>>(ns); }, graph, calls);
      EXPECT_EQ(t.cuda_graph, graph) << t.note;
      EXPECT_TRUE(t.note.empty()) << t.note;
      ASSERT_EQ(t.ms.size(), 20u);
      const SampleStats stats = summarize_samples(t.ms);
      // Events add launch latency (microseconds), the globaltimer ticks at ~1 µs.
      EXPECT_GE(stats.median, 1.99 / calls);
      EXPECT_LE(stats.median, 2.2 / calls);
    }
  }
}

TEST(GpuTimerGpu, TimeBudgetStopsSamplingAfterMinSamples) {
  SEQBENCH_REQUIRE_GPU();
  GpuTimer timer(sampling(3, 1000, 0.05));
  const auto samples = timer.sample_ms([](cudaStream_t s) { spin_kernel<<<1, 1, 0, s>>>(10'000'000); });
  EXPECT_GE(samples.size(), 3u);
  EXPECT_LE(samples.size(), 6u);  // 10 ms each against a 50 ms budget
}

__global__ void increment_kernel(unsigned* counter) {
  ++*counter;
}

TEST(GpuTimerGpu, GraphReplaysExactlyTheCapturedCalls) {
  SEQBENCH_REQUIRE_GPU();
  TimerPolicy policy = sampling(5, 5);
  policy.warmup_runs = 2;
  GpuTimer timer(policy);
  DeviceBuffer<unsigned> counter(1);
  counter.fill_bytes(0);
  SEQBENCH_CUDA_CHECK(cudaDeviceSynchronize());
  unsigned* c = counter.data();
  const TimedSamples t = timer.sample(
      [c](cudaStream_t s) {
        increment_kernel<<<1, 1, 0, s>>>(c);
        SEQBENCH_CUDA_CHECK_LAUNCH();
      },
      true, 3);
  ASSERT_TRUE(t.cuda_graph) << t.note;
  ASSERT_EQ(t.ms.size(), 5u);
  // 2 rounds of 3 direct warm-up calls; the capture itself runs nothing; a graph of 3 calls
  // replayed max(1, warmup_runs) = 2 times warm, then once per sample.
  SEQBENCH_CUDA_CHECK(cudaDeviceSynchronize());
  EXPECT_EQ(counter.copy_to_host().at(0), 2u * 3u + 3u * 2u + 3u * 5u);
  // Direct timing of the same work: warm-up plus calls_per_sample calls per sample.
  counter.fill_bytes(0);
  SEQBENCH_CUDA_CHECK(cudaDeviceSynchronize());
  const TimedSamples d = timer.sample([c](cudaStream_t s) { increment_kernel<<<1, 1, 0, s>>>(c); }, false, 3);
  EXPECT_FALSE(d.cuda_graph);
  SEQBENCH_CUDA_CHECK(cudaDeviceSynchronize());
  EXPECT_EQ(counter.copy_to_host().at(0), 2u * 3u + 3u * 5u);
  EXPECT_THROW((void)timer.sample([c](cudaStream_t s) { increment_kernel<<<1, 1, 0, s>>>(c); }, true, 0),
               Error);
}

// The runner's rotating work (suites/runner.cpp): each call runs the next copy of an experiment.
// The warm-up must reach every copy, and a graph of N calls must hold each copy once, whichever
// copy the rotation stands at, and so must every directly timed sample.
TEST(GpuTimerGpu, EverySampleCallsEachRotatingCopyOnce) {
  SEQBENCH_REQUIRE_GPU();
  TimerPolicy policy = sampling(5, 5);
  policy.warmup_runs = 2;
  GpuTimer timer(policy);
  constexpr int kCopies = 3;
  DeviceBuffer<unsigned> counters(kCopies);
  for (const bool graph : {true, false}) {
    counters.fill_bytes(0);
    SEQBENCH_CUDA_CHECK(cudaDeviceSynchronize());
    unsigned* c = counters.data();
    int next = 1;  // not at a round's start, as after an earlier variant's calls
    const TimedSamples t = timer.sample(
        [c, &next](cudaStream_t s) {
          increment_kernel<<<1, 1, 0, s>>>(c + next++ % kCopies);
          SEQBENCH_CUDA_CHECK_LAUNCH();
        },
        graph, kCopies);
    ASSERT_EQ(t.cuda_graph, graph) << t.note;
    SEQBENCH_CUDA_CHECK(cudaDeviceSynchronize());
    // Warm-up: 2 rounds of 3 calls, each copy twice. Graph: captured from copy 1 on (1, 2, 0),
    // replayed 2 warm + 5 sampled times. Direct: 5 samples of 3 consecutive calls.
    const unsigned each = 2u + (graph ? 2u + 5u : 5u);
    EXPECT_EQ(counters.copy_to_host(), (std::vector<unsigned>{each, each, each})) << graph;
  }
}

TEST(GpuTimerGpu, WorkThatCannotBeCapturedIsTimedDirectlyWithTheReason) {
  SEQBENCH_REQUIRE_GPU();
  GpuTimer timer(sampling(3, 3));
  // A synchronization inside the work: refused while capturing.
  const TimedSamples sync = timer.sample(
      [](cudaStream_t s) {
        spin_kernel<<<1, 1, 0, s>>>(1000);
        SEQBENCH_CUDA_CHECK(cudaStreamSynchronize(s));
      },
      true);
  EXPECT_FALSE(sync.cuda_graph);
  EXPECT_NE(sync.note.find("CUDA graph capture failed ("), std::string::npos) << sync.note;
  EXPECT_NE(sync.note.find("cudaStreamSynchronize"), std::string::npos) << sync.note;
  EXPECT_EQ(sync.ms.size(), 3u);
  // Work on the legacy default stream while the (blocking) timer stream captures.
  const TimedSamples legacy = timer.sample(
      [](cudaStream_t) {
        spin_kernel<<<1, 1, 0, nullptr>>>(1000);
        SEQBENCH_CUDA_CHECK_LAUNCH();
      },
      true);
  EXPECT_FALSE(legacy.cuda_graph);
  EXPECT_NE(legacy.note.find("CUDA graph capture failed ("), std::string::npos) << legacy.note;
  // The timer's stream captures again afterwards, and no error was left behind.
  const TimedSamples ok = timer.sample([](cudaStream_t s) { spin_kernel<<<1, 1, 0, s>>>(1000); }, true);
  EXPECT_TRUE(ok.cuda_graph) << ok.note;
  SEQBENCH_CUDA_CHECK(cudaDeviceSynchronize());
}

TEST(GpuTimerGpu, WorkSentToAnotherStreamIsNotTimedAsAnEmptyGraph) {
  SEQBENCH_REQUIRE_GPU();
  GpuTimer timer(sampling(3, 3));
  Stream other;  // not capturing: a kernel sent there runs at once and the graph stays empty
  const TimedSamples elsewhere = timer.sample(
      [&](cudaStream_t) {
        spin_kernel<<<1, 1, 0, other.get()>>>(1000);
        SEQBENCH_CUDA_CHECK_LAUNCH();
      },
      true);
  EXPECT_FALSE(elsewhere.cuda_graph);
  EXPECT_NE(elsewhere.note.find("the capture recorded 0 kernel"), std::string::npos) << elsewhere.note;
  EXPECT_EQ(elsewhere.ms.size(), 3u);
  // Two calls a sample, every other one sent elsewhere: one node for two calls is refused too.
  int calls = 0;
  const TimedSamples half = timer.sample(
      [&](cudaStream_t s) {
        spin_kernel<<<1, 1, 0, calls++ % 2 == 0 ? s : other.get()>>>(1000);
        SEQBENCH_CUDA_CHECK_LAUNCH();
      },
      true, 2);
  EXPECT_FALSE(half.cuda_graph);
  EXPECT_NE(half.note.find("the capture recorded 1 kernel"), std::string::npos) << half.note;
  other.synchronize();
  // A copy and a memset count as work: such a graph is kept.
  DeviceBuffer<int> a(256), b(256);
  const TimedSamples copies = timer.sample(
      [&](cudaStream_t s) {
        a.fill_bytes(7, s);
        SEQBENCH_CUDA_CHECK(cudaMemcpyAsync(b.data(), a.data(), a.bytes(), cudaMemcpyDeviceToDevice, s));
      },
      true);
  EXPECT_TRUE(copies.cuda_graph) << copies.note;
  SEQBENCH_CUDA_CHECK(cudaDeviceSynchronize());
}

// 2048 threads a block: more than any GPU allows, so the launch fails with
// cudaErrorInvalidConfiguration, which this work does not check.
void unchecked_bad_launch(cudaStream_t s) {
  spin_kernel<<<1, 2048, 0, s>>>(1000);
}

TEST(GpuTimerGpu, AnUncheckedLaunchErrorFailsTheSamplingInBothModes) {
  SEQBENCH_REQUIRE_GPU();
  GpuTimer timer(sampling(3, 3));
  for (const bool graph : {false, true}) {
    SCOPED_TRACE(graph ? "CUDA graph requested" : "direct launches");
    try {
      (void)timer.sample(unchecked_bad_launch, graph);
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("cudaErrorInvalidConfiguration"), std::string::npos) << e.what();
    }
    // Nothing is left pending for the next work.
    const TimedSamples ok = timer.sample([](cudaStream_t s) { spin_kernel<<<1, 1, 0, s>>>(1000); }, graph);
    EXPECT_EQ(ok.cuda_graph, graph) << ok.note;
  }
}

TEST(GpuTimerGpu, AnErrorOfTheWorkItselfStillThrows) {
  SEQBENCH_REQUIRE_GPU();
  TimerPolicy policy = sampling(1, 1);
  GpuTimer timer(policy);
  // Thrown in the direct warm-up, before any capture: not mistaken for a capture failure.
  EXPECT_THROW(timer.sample([](cudaStream_t) { SEQBENCH_FAIL("the work's own error"); }, true), Error);
  policy.warmup_runs = 0;  // the graph path still makes one direct call first
  GpuTimer cold(policy);
  EXPECT_THROW(cold.sample([](cudaStream_t) { SEQBENCH_FAIL("the work's own error"); }, true), Error);
  const TimedSamples ok = cold.sample([](cudaStream_t s) { spin_kernel<<<1, 1, 0, s>>>(1000); }, true);
  EXPECT_TRUE(ok.cuda_graph) << ok.note;
}

// The flush read's only store happens when a thread's XOR of its vectors is kNeverXor: one such
// vector in an otherwise zeroed buffer must reach the sink wherever it lies (first, in the middle,
// the last of an odd count that no block size divides), and a zeroed buffer must store nothing.
TEST(GpuTimerGpu, FlushReadCoversEveryVectorAndStoresNothingFromZeros) {
  SEQBENCH_REQUIRE_GPU();
  constexpr unsigned int kNeverXor = 0x9E3779B9u;    // suites/l2_flush.cu's constant
  const std::size_t vectors = 3 * 1024 * 1024 + 77;  // 48 MiB + a tail
  DeviceBuffer<unsigned int> buffer(4 * vectors);
  DeviceBuffer<unsigned int> sink(1);
  for (const std::size_t at : {std::size_t{0}, vectors / 2 + 3, vectors - 1}) {
    buffer.fill_bytes(0);
    sink.fill_bytes(0);
    const unsigned int marker[4] = {kNeverXor, 0, 0, 0};
    SEQBENCH_CUDA_CHECK(cudaMemcpy(buffer.data() + 4 * at, marker, sizeof(marker), cudaMemcpyHostToDevice));
    launch_l2_flush_read(buffer.data(), 16 * vectors, sink.data(), nullptr);
    SEQBENCH_CUDA_CHECK(cudaDeviceSynchronize());
    EXPECT_EQ(sink.copy_to_host()[0], kNeverXor) << "the vector at " << at << " was not read";
  }
  buffer.fill_bytes(0);
  sink.fill_bytes(0x5A);
  launch_l2_flush_read(buffer.data(), 16 * vectors, sink.data(), nullptr);
  SEQBENCH_CUDA_CHECK(cudaDeviceSynchronize());
  EXPECT_EQ(sink.copy_to_host()[0], 0x5A5A5A5Au) << "a zeroed buffer's flush stored";
}

}  // namespace
}  // namespace seqbench
