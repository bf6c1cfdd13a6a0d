// kernels/copy against the host: random sizes and misaligned pointers, poisoned destination.
#include <gtest/gtest.h>

#include <random>

#include "core/device_buffer.h"
#include "kernels/copy.h"
#include "tests/common/gpu_test.h"

namespace seqbench {
namespace {

TEST(CopyGpu, RandomSizesAndOffsetsCopyExactlyAndTouchNothingElse) {
  SEQBENCH_REQUIRE_GPU();
  std::mt19937_64 rng(20261122);
  const std::size_t capacity = (1 << 20) + 64;
  std::vector<unsigned char> source(capacity);
  for (auto& b : source) b = static_cast<unsigned char>(rng());
  DeviceBuffer<unsigned char> src(source);
  DeviceBuffer<unsigned char> dst(capacity);

  std::vector<std::size_t> sizes = {0, 1, 3, 15, 16, 17, 127, 1000, 1023, 4097, (1 << 20)};
  for (int i = 0; i < 50; ++i) sizes.push_back(rng() % (1 << 20));
  for (const std::size_t bytes : sizes) {
    const std::size_t src_off = rng() % 32, dst_off = rng() % 32;
    if (bytes + std::max(src_off, dst_off) > capacity) continue;
    dst.fill_bytes(0xFF);
    kernels::launch_copy(dst.data() + dst_off, src.data() + src_off, bytes, nullptr);
    SEQBENCH_CUDA_CHECK(cudaDeviceSynchronize());
    const auto got = dst.copy_to_host();
    for (std::size_t j = 0; j < capacity; ++j) {
      const bool inside = j >= dst_off && j < dst_off + bytes;
      const unsigned char want = inside ? source[j - dst_off + src_off] : 0xFF;
      ASSERT_EQ(got[j], want) << "bytes=" << bytes << " src_off=" << src_off << " dst_off=" << dst_off
                              << " at " << j;
    }
  }
}

TEST(CopyGpu, OverlapIsRejected) {
  SEQBENCH_REQUIRE_GPU();
  DeviceBuffer<unsigned char> buffer(64);
  EXPECT_THROW(kernels::launch_copy(buffer.data() + 8, buffer.data(), 32, nullptr), Error);
}

}  // namespace
}  // namespace seqbench
