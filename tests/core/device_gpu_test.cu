// GPU side of core/: device info, device buffers, and the Philox stream drawn on the device.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "core/device_buffer.h"
#include "core/device_info.h"
#include "core/philox.h"
#include "tests/common/gpu_test.h"

namespace seqbench {
namespace {

TEST(DeviceInfoGpu, FieldsArePlausible) {
  SEQBENCH_REQUIRE_GPU();
  const DeviceInfo info = *probe_device(0).info;
  EXPECT_FALSE(info.name.empty());
  EXPECT_GE(info.cc_major, 7);
  EXPECT_GT(info.sm_count, 0);
  EXPECT_GT(info.l2_bytes, 0);
  EXPECT_GT(info.memory_bytes, std::int64_t{1} << 30);
  EXPECT_GT(info.sm_clock_max_mhz, 0);
  EXPECT_FALSE(info.driver.empty());
  EXPECT_FALSE(info.cublas.empty());
}

TEST(DeviceBufferGpu, RoundTripAndPoison) {
  SEQBENCH_REQUIRE_GPU();
  std::vector<float> host(1001);
  for (std::size_t i = 0; i < host.size(); ++i) host[i] = static_cast<float>(i) * 0.5f - 7.0f;
  DeviceBuffer<float> buffer(host);
  EXPECT_EQ(buffer.copy_to_host(), host);
  buffer.fill_bytes(0xFF);
  for (const float v : buffer.copy_to_host()) ASSERT_TRUE(std::isnan(v));

  DeviceBuffer<float> moved = std::move(buffer);
  EXPECT_EQ(buffer.data(), nullptr);
  EXPECT_EQ(moved.size(), host.size());
  EXPECT_THROW(moved.copy_from_host(std::vector<float>(3)), Error);
}

__global__ void draw_kernel(std::uint32_t* bits, float* uniforms, std::uint32_t* dropout_draws,
                            std::uint64_t seed, std::uint64_t offset, std::uint64_t first, std::size_t n) {
  const std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  bits[i] = philox_bits(seed, offset, first + i);
  uniforms[i] = philox_uniform(seed, offset, first + i);
  dropout_draws[i] = philox_dropout_draw(seed, offset, first + i);
}

TEST(PhiloxGpu, DeviceDrawsEqualHostDrawsBitForBit) {
  SEQBENCH_REQUIRE_GPU();
  const std::size_t n = 100003;  // odd: the last block is partial
  const std::uint64_t seed = 0xDEADBEEFCAFEull, offset = (1ull << 33) + 5, first = (1ull << 34) + 3;
  DeviceBuffer<std::uint32_t> bits(n);
  DeviceBuffer<float> uniforms(n);
  DeviceBuffer<std::uint32_t> dropout_draws(n);
  bits.fill_bytes(0xAB);
  uniforms.fill_bytes(0xFF);
  dropout_draws.fill_bytes(0xCD);  // above any 16-bit draw: an unwritten one shows
  draw_kernel<<<(n + 255) / 256, 256>>>(bits.data(), uniforms.data(), dropout_draws.data(), seed, offset,
                                        first, n);
  SEQBENCH_CUDA_CHECK_LAUNCH();
  SEQBENCH_CUDA_CHECK(cudaDeviceSynchronize());
  const auto got_bits = bits.copy_to_host();
  const auto got_uniforms = uniforms.copy_to_host();
  const auto got_dropout_draws = dropout_draws.copy_to_host();
  for (std::size_t i = 0; i < n; ++i) {
    ASSERT_EQ(got_bits[i], philox_bits(seed, offset, first + i)) << "index " << i;
    ASSERT_EQ(got_dropout_draws[i], philox_dropout_draw(seed, offset, first + i)) << "index " << i;
    const float expected = philox_uniform(seed, offset, first + i);
    ASSERT_EQ(std::memcmp(&got_uniforms[i], &expected, sizeof(float)), 0) << "index " << i;
  }
}

}  // namespace
}  // namespace seqbench
