// The simt executor itself (tests/simt/simt.h): barriers, warp collectives and atomics compute what
// the device computes, and every misuse it promises to report is reported. Compiled like the other
// simt sources (rewrite.py, prelude.h), so the kernels below are launched with <<<...>>>.
#include <gtest/gtest.h>

#include <cstdint>
#include <cub/block/block_scan.cuh>
#include <cub/device/device_radix_sort.cuh>
#include <functional>
#include <memory>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "core/device_buffer.h"
#include "kernels/packed.h"
#include "tests/simt/runtime_state.h"

namespace {

using seqbench::DeviceBuffer;

// Clears the error state between tests: a sticky error would otherwise fail every later call, as
// after a real device fault.
class Simt : public ::testing::Test {
 protected:
  void SetUp() override { simt::detail::runtime_clear_errors(); }
  void TearDown() override { simt::detail::runtime_clear_errors(); }
};

__global__ void block_sum_kernel(const int* in, int* out) {
  __shared__ int partial[1024];
  const unsigned t = threadIdx.x;
  partial[t] = in[blockIdx.x * blockDim.x + t];
  __syncthreads();
  for (unsigned stride = 1; stride < blockDim.x; stride *= 2) {
    const int mine = t % (2 * stride) == 0 && t + stride < blockDim.x ? partial[t + stride] : 0;
    __syncthreads();
    partial[t] += mine;
    __syncthreads();
  }
  if (t == 0) out[blockIdx.x] = partial[0];
}

TEST_F(Simt, SharedMemoryReductionWithBarriersIsExactForEveryBlockSize) {
  for (const unsigned threads : {1u, 2u, 31u, 32u, 33u, 255u, 1024u}) {
    const unsigned blocks = 3;
    std::vector<int> host(threads * blocks);
    std::iota(host.begin(), host.end(), 1);
    DeviceBuffer<int> in(host), out(blocks);
    block_sum_kernel<<<blocks, threads>>>(in.data(), out.data());
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    const std::vector<int> got = out.copy_to_host();
    for (unsigned b = 0; b < blocks; ++b) {
      const int first = static_cast<int>(b * threads) + 1, last = first + static_cast<int>(threads) - 1;
      EXPECT_EQ(got[b], (first + last) * static_cast<int>(threads) / 2) << threads << " threads, block " << b;
    }
  }
}

__global__ void shuffle_kernel(int* xor_sum, int* down_sum, int* idx_of_3, int* up_by_1, int width) {
  const int lane = static_cast<int>(threadIdx.x % 32);
  int x = lane, d = lane;
  for (int m = width / 2; m > 0; m /= 2) x += __shfl_xor_sync(0xffffffffu, x, m, width);
  for (int m = width / 2; m > 0; m /= 2) d += __shfl_down_sync(0xffffffffu, d, m, width);
  xor_sum[threadIdx.x] = x;
  down_sum[threadIdx.x] = d;
  idx_of_3[threadIdx.x] = __shfl_sync(0xffffffffu, lane * 10, 3, width);
  up_by_1[threadIdx.x] = __shfl_up_sync(0xffffffffu, lane, 1, width);
}

TEST_F(Simt, ShufflesFollowTheSegmentRulesOfEveryWidth) {
  for (const int width : {32, 16, 8, 1}) {
    DeviceBuffer<int> x(64), d(64), i(64), u(64);
    shuffle_kernel<<<1, 64>>>(x.data(), d.data(), i.data(), u.data(), width);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    const auto xs = x.copy_to_host(), ds = d.copy_to_host(), is = i.copy_to_host(), us = u.copy_to_host();
    for (int t = 0; t < 64; ++t) {
      const int lane = t % 32, segment = lane / width * width;
      const int segment_sum = width * segment + width * (width - 1) / 2;
      EXPECT_EQ(xs[t], segment_sum) << "xor, width " << width << ", thread " << t;
      if (lane % width == 0) {
        EXPECT_EQ(ds[t], segment_sum) << "down, width " << width << ", thread " << t;
      }
      EXPECT_EQ(is[t], (segment + 3 % width) * 10) << "idx, width " << width << ", thread " << t;
      EXPECT_EQ(us[t], lane % width >= 1 ? lane - 1 : lane) << "up, width " << width << ", thread " << t;
    }
  }
}

__global__ void ballot_kernel(unsigned* out) {
  out[threadIdx.x] = __ballot_sync(0xffffffffu, threadIdx.x % 3 == 0);
}

TEST_F(Simt, BallotCollectsTheWarpsPredicates) {
  DeviceBuffer<unsigned> out(32);
  ballot_kernel<<<1, 32>>>(out.data());
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  unsigned want = 0;
  for (unsigned lane = 0; lane < 32; lane += 3) want |= 1u << lane;
  for (const unsigned v : out.copy_to_host()) EXPECT_EQ(v, want);
}

// Thread t publishes t and reads its neighbour's slot without a barrier between: the neighbour
// has written it already in one thread order and not yet in the other.
__global__ void missing_barrier_kernel(int* out) {
  __shared__ int slot[64];
  slot[threadIdx.x] = static_cast<int>(threadIdx.x) + 1;
  out[blockIdx.x * blockDim.x + threadIdx.x] = slot[(threadIdx.x + 1) % blockDim.x];
}

TEST_F(Simt, AMissingBarrierChangesTheResultOfOneOfTwoBlocks) {
  DeviceBuffer<int> out(128);
  cudaMemset(out.data(), 0, 128 * sizeof(int));
  missing_barrier_kernel<<<2, 64>>>(out.data());
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const auto got = out.copy_to_host();
  bool differ = false;
  for (int t = 0; t < 64; ++t) differ = differ || got[t] != got[64 + t];
  EXPECT_TRUE(differ) << "forward and reverse thread orders gave the same result: the race went unseen";
}

__global__ void early_return_kernel(int* out) {
  if (threadIdx.x >= 40) return;
  __syncthreads();
  out[threadIdx.x] = 1;
}

__global__ void exited_lane_shuffle_kernel(int* out) {
  if (threadIdx.x == 5) return;
  out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, static_cast<int>(threadIdx.x), 1);
}

// Half of each warp waits at a full-mask shuffle, the other half at __syncthreads: neither completes.
__global__ void divergent_barriers_kernel(int* out) {
  if (threadIdx.x % 32 < 16) {
    out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, 1, 1);
  } else {
    __syncthreads();
  }
}

__global__ void partial_warp_full_mask_kernel(int* out) {
  out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, 1, 1);
}

__global__ void misaligned_vector_kernel(const float* in, float* out) {
  using P = seqbench::kernels::Packed<float>;
  P::load(in + 1).store(out);
}

template <class Launch>
std::string expect_launch_failure(Launch launch) {
  ::testing::internal::CaptureStderr();
  launch();
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(cudaDeviceSynchronize(), cudaErrorLaunchFailure);
  EXPECT_EQ(cudaGetLastError(), cudaErrorLaunchFailure) << "a fault inside a kernel is sticky";
  simt::detail::runtime_clear_errors();
  return err;
}

TEST_F(Simt, UndefinedBehaviourInsideAKernelIsAStickyFaultThatNamesIt) {
  DeviceBuffer<int> out(64);
  DeviceBuffer<float> f(16);
  EXPECT_NE(expect_launch_failure([&] { early_return_kernel<<<1, 64>>>(out.data()); }).find("have returned"),
            std::string::npos);
  EXPECT_NE(expect_launch_failure([&] {
              exited_lane_shuffle_kernel<<<1, 32>>>(out.data());
            }).find("lane 5, which has returned"),
            std::string::npos);
  EXPECT_NE(expect_launch_failure([&] { divergent_barriers_kernel<<<1, 64>>>(out.data()); }).find("deadlock"),
            std::string::npos);
  EXPECT_NE(expect_launch_failure([&] {
              partial_warp_full_mask_kernel<<<1, 48>>>(out.data());
            }).find("which its warp does not have (16 threads)"),
            std::string::npos);
  EXPECT_NE(expect_launch_failure([&] {
              misaligned_vector_kernel<<<1, 1>>>(f.data(), f.data() + 8);
            }).find("misaligned 16-byte vector access"),
            std::string::npos);
  // And the kernels' own error message names the kernel.
  EXPECT_NE(
      expect_launch_failure([&] { early_return_kernel<<<1, 64>>>(out.data()); }).find("early_return_kernel"),
      std::string::npos);
}

__global__ void dynamic_shared_kernel(int* out) {
  extern __shared__ int dyn[];
  dyn[threadIdx.x] = static_cast<int>(threadIdx.x);
  __syncthreads();
  out[threadIdx.x] = dyn[blockDim.x - 1 - threadIdx.x];
}

TEST_F(Simt, LaunchConfigurationsTheDeviceRefusesAreRefused) {
  DeviceBuffer<int> out(1024);
  const auto refused = [&](auto launch) {
    ::testing::internal::CaptureStderr();
    launch();
    ::testing::internal::GetCapturedStderr();
    EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration);
    EXPECT_EQ(cudaGetLastError(), cudaSuccess) << "a configuration error is not sticky";
  };
  refused([&] { dynamic_shared_kernel<<<0, 32, 128>>>(out.data()); });
  refused([&] { dynamic_shared_kernel<<<1, 1025, 4100>>>(out.data()); });
  refused([&] { dynamic_shared_kernel<<<dim3(1, 65536), 32, 128>>>(out.data()); });
  refused([&] { dynamic_shared_kernel<<<1, 32, 48 * 1024 + 4>>>(out.data()); });
  // Above 48 KiB once the kernel has asked for it, as on the device.
  ASSERT_EQ(cudaFuncSetAttribute(reinterpret_cast<const void*>(&dynamic_shared_kernel),
                                 cudaFuncAttributeMaxDynamicSharedMemorySize, 64 * 1024),
            cudaSuccess);
  dynamic_shared_kernel<<<1, 1024, 64 * 1024>>>(out.data());
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const auto got = out.copy_to_host();
  for (int t = 0; t < 1024; ++t) EXPECT_EQ(got[t], 1023 - t);
}

TEST_F(Simt, CopiesOutsideAnAllocationAreRefused) {
  DeviceBuffer<int> buf(16);
  std::vector<int> host(32, 0);
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(cudaMemcpy(buf.data(), host.data(), 17 * sizeof(int), cudaMemcpyHostToDevice),
            cudaErrorInvalidValue);
  EXPECT_EQ(cudaMemcpy(host.data(), buf.data() + 1, 16 * sizeof(int), cudaMemcpyDeviceToHost),
            cudaErrorInvalidValue);
  EXPECT_EQ(cudaMemset(host.data(), 0, 4), cudaErrorInvalidValue) << "a host pointer is not device memory";
  ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(cudaMemcpy(buf.data(), host.data(), 16 * sizeof(int), cudaMemcpyHostToDevice), cudaSuccess);
}

TEST_F(Simt, FreshAllocationsAreNaNNotZero) {
  DeviceBuffer<float> buf(8);
  std::vector<float> host(8, 0.0f);
  ASSERT_EQ(cudaMemcpy(host.data(), buf.data(), sizeof(float) * 8, cudaMemcpyDeviceToHost), cudaSuccess);
  for (const float v : host) EXPECT_TRUE(std::isnan(v));
}

__global__ void block_scan_kernel(const int* in, int* prefix, int* total) {
  using Scan = cub::BlockScan<int, 96>;
  __shared__ typename Scan::TempStorage storage;
  int p = 0, t = 0;
  Scan(storage).ExclusiveSum(in[threadIdx.x], p, t);
  prefix[threadIdx.x] = p;
  if (threadIdx.x == 0) *total = t;
}

TEST_F(Simt, CubStandInsComputeWhatCubComputes) {
  std::vector<int> host(96);
  for (int i = 0; i < 96; ++i) host[i] = (i * 7) % 5;
  DeviceBuffer<int> in(host), prefix(96), total(1);
  block_scan_kernel<<<1, 96>>>(in.data(), prefix.data(), total.data());
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const auto got = prefix.copy_to_host();
  int run = 0;
  for (int i = 0; i < 96; ++i) {
    EXPECT_EQ(got[i], run);
    run += host[i];
  }
  EXPECT_EQ(total.copy_to_host()[0], run);

  // Radix sort on bits [0, 4) only: keys that agree there keep their input order.
  const std::vector<std::uint32_t> keys = {0x13, 0x02, 0x21, 0x03, 0x11, 0x12};
  const std::vector<std::int32_t> values = {0, 1, 2, 3, 4, 5};
  DeviceBuffer<std::uint32_t> kin(keys), kout(6);
  DeviceBuffer<std::int32_t> vin(values), vout(6);
  std::size_t bytes = 0;
  ASSERT_EQ(cub::DeviceRadixSort::SortPairs(nullptr, bytes, kin.data(), kout.data(), vin.data(), vout.data(),
                                            6, 0, 4),
            cudaSuccess);
  DeviceBuffer<unsigned char> temp(bytes);
  ASSERT_EQ(cub::DeviceRadixSort::SortPairs(temp.data(), bytes, kin.data(), kout.data(), vin.data(),
                                            vout.data(), 6, 0, 4),
            cudaSuccess);
  EXPECT_EQ(vout.copy_to_host(), (std::vector<std::int32_t>{2, 4, 1, 5, 0, 3}));
}

__global__ void add_kernel(int* x, int amount) {
  *x += amount;
}

// Stream capture (tests/simt/streams.cpp): captured work runs only when the graph replays, with the
// arguments it was issued with, in issue order.
TEST_F(Simt, CapturedWorkRunsAtEachReplayInIssueOrderWithItsIssuedArguments) {
  DeviceBuffer<int> x(1);
  x.fill_bytes(0);
  seqbench::Stream stream;
  ASSERT_EQ(cudaStreamBeginCapture(stream.get(), cudaStreamCaptureModeGlobal), cudaSuccess);
  cudaStreamCaptureStatus status{};
  ASSERT_EQ(cudaStreamIsCapturing(stream.get(), &status), cudaSuccess);
  EXPECT_EQ(status, cudaStreamCaptureStatusActive);
  int amount = 5;
  add_kernel<<<1, 1, 0, stream.get()>>>(x.data(), amount);
  amount = 1000;  // the launch copied 5
  ASSERT_EQ(cudaMemsetAsync(x.data(), 0, sizeof(int), stream.get()), cudaSuccess);
  add_kernel<<<1, 1, 0, stream.get()>>>(x.data(), 7);
  cudaGraph_t graph = nullptr;
  ASSERT_EQ(cudaStreamEndCapture(stream.get(), &graph), cudaSuccess);
  std::size_t nodes = 0;
  ASSERT_EQ(cudaGraphGetNodes(graph, nullptr, &nodes), cudaSuccess);
  EXPECT_EQ(nodes, 3u);
  EXPECT_EQ(x.copy_to_host()[0], 0) << "captured work ran while capturing";
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  ASSERT_EQ(cudaGraphDestroy(graph), cudaSuccess);  // the executable graph keeps its own copy
  x.fill_bytes(0x11);
  ASSERT_EQ(cudaGraphLaunch(exec, stream.get()), cudaSuccess);
  EXPECT_EQ(x.copy_to_host()[0], 7) << "the memset replays between the two kernels";
  add_kernel<<<1, 1, 0, stream.get()>>>(x.data(), 100);
  ASSERT_EQ(cudaGraphLaunch(exec, stream.get()), cudaSuccess);
  EXPECT_EQ(x.copy_to_host()[0], 7);
  ASSERT_EQ(cudaGraphExecDestroy(exec), cudaSuccess);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

// The potentially unsafe calls are refused during a global or thread-local capture and invalidate
// it; a relaxed capture permits them.
TEST_F(Simt, UnsafeCallsAreRefusedDuringACaptureAndInvalidateIt) {
  DeviceBuffer<int> x(1);
  seqbench::Stream stream;
  int host = 0;
  const std::vector<std::pair<const char*, std::function<cudaError_t()>>> unsafe = {
      {"cudaMalloc",
       [] {
         void* p = nullptr;
         return cudaMalloc(&p, 64);
       }},
      {"cudaFree", [] { return cudaFree(nullptr); }},
      {"cudaDeviceSynchronize", [] { return cudaDeviceSynchronize(); }},
      {"cudaMemcpy", [&] { return cudaMemcpy(&host, x.data(), sizeof(int), cudaMemcpyDeviceToHost); }},
      {"cudaMemset", [&] { return cudaMemset(x.data(), 0, sizeof(int)); }}};
  for (const auto& [name, call] : unsafe) {
    SCOPED_TRACE(name);
    ASSERT_EQ(cudaStreamBeginCapture(stream.get(), cudaStreamCaptureModeThreadLocal), cudaSuccess);
    add_kernel<<<1, 1, 0, stream.get()>>>(x.data(), 1);
    ::testing::internal::CaptureStderr();
    EXPECT_EQ(call(), cudaErrorStreamCaptureUnsupported);
    EXPECT_EQ(cudaMemsetAsync(x.data(), 0, sizeof(int), stream.get()), cudaErrorStreamCaptureInvalidated);
    cudaGraph_t graph = nullptr;
    EXPECT_EQ(cudaStreamEndCapture(stream.get(), &graph), cudaErrorStreamCaptureInvalidated);
    const std::string err = ::testing::internal::GetCapturedStderr();
    EXPECT_NE(err.find(name), std::string::npos) << err;
    EXPECT_EQ(graph, nullptr);
    cudaGetLastError();
  }
  ASSERT_EQ(cudaStreamBeginCapture(stream.get(), cudaStreamCaptureModeRelaxed), cudaSuccess);
  add_kernel<<<1, 1, 0, stream.get()>>>(x.data(), 1);
  void* p = nullptr;
  EXPECT_EQ(cudaMalloc(&p, 64), cudaSuccess);
  EXPECT_EQ(cudaFree(p), cudaSuccess);
  cudaGraph_t graph = nullptr;
  ASSERT_EQ(cudaStreamEndCapture(stream.get(), &graph), cudaSuccess);
  EXPECT_NE(graph, nullptr);
  cudaGraphDestroy(graph);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

// Fork and join (tests/simt/streams.cpp): a stream that waits on an event recorded in a capture
// joins it, its work becomes nodes of the same graph, and the capture ends only once every forked
// stream's last work has been waited on.
TEST_F(Simt, AForkedCaptureHoldsBothBranchesAndEndsOnlyWhenJoined) {
  DeviceBuffer<int> x(1), y(1);
  x.fill_bytes(0);
  y.fill_bytes(0);
  seqbench::Stream origin, side;
  seqbench::Event forked, joined;
  ASSERT_EQ(cudaStreamBeginCapture(origin.get(), cudaStreamCaptureModeThreadLocal), cudaSuccess);
  add_kernel<<<1, 1, 0, origin.get()>>>(x.data(), 1);
  ASSERT_EQ(cudaEventRecord(forked.get(), origin.get()), cudaSuccess);
  ASSERT_EQ(cudaStreamWaitEvent(side.get(), forked.get(), 0), cudaSuccess);
  cudaStreamCaptureStatus status{};
  ASSERT_EQ(cudaStreamIsCapturing(side.get(), &status), cudaSuccess);
  EXPECT_EQ(status, cudaStreamCaptureStatusActive) << "the waiting stream joined the capture";
  add_kernel<<<1, 1, 0, side.get()>>>(y.data(), 2);
  ASSERT_EQ(cudaEventRecord(joined.get(), side.get()), cudaSuccess);
  cudaGraph_t graph = nullptr;
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(cudaStreamEndCapture(side.get(), &graph), cudaErrorStreamCaptureUnmatched);
  ::testing::internal::GetCapturedStderr();
  cudaGetLastError();
  ASSERT_EQ(cudaStreamWaitEvent(origin.get(), joined.get(), 0), cudaSuccess);
  add_kernel<<<1, 1, 0, origin.get()>>>(x.data(), 10);
  ASSERT_EQ(cudaStreamEndCapture(origin.get(), &graph), cudaSuccess);
  ASSERT_EQ(cudaStreamIsCapturing(side.get(), &status), cudaSuccess);
  EXPECT_EQ(status, cudaStreamCaptureStatusNone) << "the end of the capture releases the forked stream";
  std::size_t nodes = 0;
  ASSERT_EQ(cudaGraphGetNodes(graph, nullptr, &nodes), cudaSuccess);
  EXPECT_EQ(nodes, 3u) << "records and waits are edges, not nodes";
  EXPECT_EQ(x.copy_to_host()[0], 0) << "captured work ran while capturing";
  EXPECT_EQ(y.copy_to_host()[0], 0) << "the forked branch ran while capturing";
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  ASSERT_EQ(cudaGraphLaunch(exec, origin.get()), cudaSuccess);
  EXPECT_EQ(x.copy_to_host()[0], 11);
  EXPECT_EQ(y.copy_to_host()[0], 2);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);

  // Joined through another stream: origin -> side -> third and back the same way.
  seqbench::Stream third;
  seqbench::Event forked_again, joined_again;
  ASSERT_EQ(cudaStreamBeginCapture(origin.get(), cudaStreamCaptureModeThreadLocal), cudaSuccess);
  ASSERT_EQ(cudaEventRecord(forked.get(), origin.get()), cudaSuccess);
  ASSERT_EQ(cudaStreamWaitEvent(side.get(), forked.get(), 0), cudaSuccess);
  ASSERT_EQ(cudaEventRecord(forked_again.get(), side.get()), cudaSuccess);
  ASSERT_EQ(cudaStreamWaitEvent(third.get(), forked_again.get(), 0), cudaSuccess);
  add_kernel<<<1, 1, 0, third.get()>>>(y.data(), 3);
  ASSERT_EQ(cudaEventRecord(joined_again.get(), third.get()), cudaSuccess);
  ASSERT_EQ(cudaStreamWaitEvent(side.get(), joined_again.get(), 0), cudaSuccess);
  ASSERT_EQ(cudaEventRecord(joined.get(), side.get()), cudaSuccess);
  ASSERT_EQ(cudaStreamWaitEvent(origin.get(), joined.get(), 0), cudaSuccess);
  ASSERT_EQ(cudaStreamEndCapture(origin.get(), &graph), cudaSuccess)
      << "the third stream joined through side";
  cudaGraphDestroy(graph);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);

  // Unjoined: the forked stream's kernel is never waited on, comes after the joining record, or
  // is waited on only by another forked stream that never joins back.
  for (const int variant : {0, 1, 2}) {
    SCOPED_TRACE(variant == 0   ? "no joining record"
                 : variant == 1 ? "work after the joining record"
                                : "joined only to a stream that never joins back");
    ASSERT_EQ(cudaStreamBeginCapture(origin.get(), cudaStreamCaptureModeThreadLocal), cudaSuccess);
    ASSERT_EQ(cudaEventRecord(forked.get(), origin.get()), cudaSuccess);
    ASSERT_EQ(cudaStreamWaitEvent(side.get(), forked.get(), 0), cudaSuccess);
    if (variant == 1) {
      ASSERT_EQ(cudaEventRecord(joined.get(), side.get()), cudaSuccess);
      ASSERT_EQ(cudaStreamWaitEvent(origin.get(), joined.get(), 0), cudaSuccess);
    }
    if (variant == 2) {
      ASSERT_EQ(cudaStreamWaitEvent(third.get(), forked.get(), 0), cudaSuccess);
    }
    add_kernel<<<1, 1, 0, side.get()>>>(y.data(), 2);
    if (variant == 2) {
      ASSERT_EQ(cudaEventRecord(joined.get(), side.get()), cudaSuccess);
      ASSERT_EQ(cudaStreamWaitEvent(third.get(), joined.get(), 0), cudaSuccess);
    }
    ::testing::internal::CaptureStderr();
    EXPECT_EQ(cudaStreamEndCapture(origin.get(), &graph), cudaErrorStreamCaptureUnjoined);
    const std::string err = ::testing::internal::GetCapturedStderr();
    EXPECT_NE(err.find("has work the capture's origin does not wait on"), std::string::npos) << err;
    EXPECT_EQ(graph, nullptr);
    for (const seqbench::Stream* s : {&side, &third}) {
      ASSERT_EQ(cudaStreamIsCapturing(s->get(), &status), cudaSuccess);
      EXPECT_EQ(status, cudaStreamCaptureStatusNone);
    }
    cudaGetLastError();
  }

  // A capturing stream may not wait on an event recorded outside its capture: the capture is
  // invalidated.
  ASSERT_EQ(cudaEventRecord(forked.get(), side.get()), cudaSuccess);
  ASSERT_EQ(cudaStreamBeginCapture(origin.get(), cudaStreamCaptureModeThreadLocal), cudaSuccess);
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(cudaStreamWaitEvent(origin.get(), forked.get(), 0), cudaErrorStreamCaptureIsolation);
  EXPECT_EQ(cudaStreamEndCapture(origin.get(), &graph), cudaErrorStreamCaptureInvalidated);
  ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(graph, nullptr);
  cudaGetLastError();

  // Nor on one recorded in another capture (a merge): both are invalidated.
  ASSERT_EQ(cudaStreamBeginCapture(origin.get(), cudaStreamCaptureModeThreadLocal), cudaSuccess);
  ASSERT_EQ(cudaStreamBeginCapture(third.get(), cudaStreamCaptureModeThreadLocal), cudaSuccess);
  ASSERT_EQ(cudaEventRecord(forked.get(), third.get()), cudaSuccess);
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(cudaStreamWaitEvent(origin.get(), forked.get(), 0), cudaErrorStreamCaptureMerge);
  EXPECT_EQ(cudaStreamEndCapture(origin.get(), &graph), cudaErrorStreamCaptureInvalidated);
  EXPECT_EQ(cudaStreamEndCapture(third.get(), &graph), cudaErrorStreamCaptureInvalidated);
  ::testing::internal::GetCapturedStderr();
  cudaGetLastError();
  EXPECT_EQ(y.copy_to_host()[0], 2) << "no unjoined capture ever ran";
}

TEST_F(Simt, AReplayedCopyIntoFreedMemoryIsRefused) {
  seqbench::Stream stream;
  auto buffer = std::make_unique<DeviceBuffer<int>>(4);
  ASSERT_EQ(cudaStreamBeginCapture(stream.get(), cudaStreamCaptureModeThreadLocal), cudaSuccess);
  ASSERT_EQ(cudaMemsetAsync(buffer->data(), 0, 4 * sizeof(int), stream.get()), cudaSuccess);
  cudaGraph_t graph = nullptr;
  ASSERT_EQ(cudaStreamEndCapture(stream.get(), &graph), cudaSuccess);
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  buffer.reset();
  ::testing::internal::CaptureStderr();
  ASSERT_EQ(cudaGraphLaunch(exec, stream.get()), cudaSuccess);
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidValue);
  EXPECT_NE(err.find("cudaMemsetAsync (replayed)"), std::string::npos) << err;
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
}

}  // namespace
