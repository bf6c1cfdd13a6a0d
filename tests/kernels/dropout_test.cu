// The dropout kernels on the GPU: every launcher against reference/dropout.h (through the suite's
// checks, which `seqbench check` also runs), plus the family's own properties: the backward uses
// exactly the forward's mask, the mask depends on (seed, offset, index) only, p = 0 and p = 1,
// and a negative control showing that a wrong mask is caught.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "core/device_buffer.h"
#include "kernels/dropout.h"
#include "kernels/dropout_mask.h"
#include "reference/dropout.h"
#include "suites/operators/check_util.h"
#include "suites/operators/operators.h"
#include "tests/common/gpu_test.h"

namespace seqbench {
namespace {

using kernels::DropoutConfig;
using operators::check_util::random_values;

constexpr std::uint64_t kSeed = 20240917;

TEST(DropoutGpu, EveryLauncherMatchesTheReference) {
  SEQBENCH_REQUIRE_GPU();
  const std::vector<CheckResult> results = operators::dropout_gpu_checks(kSeed);
  std::set<std::string> names;
  for (const CheckResult& r : results) {
    names.insert(r.name);
    EXPECT_TRUE(r.passed) << r.name << ": " << r.detail;
  }
  EXPECT_EQ(results.size(), 3u * 7u + 3u);
  for (const std::string dtype : {"f32", "f16", "bf16"}) {
    for (const std::string kernel : {"fwd", "fwd_mask_bits", "bwd_bitmask", "bwd_regenerate",
                                     "unfused_mask_u8", "unfused_apply_u8", "determinism"}) {
      EXPECT_EQ(names.count("operators/dropout/" + kernel + "/" + dtype), 1u) << kernel << "/" << dtype;
    }
  }
  for (const std::string p : {"0.1", "0.5", "0.9"})
    EXPECT_EQ(names.count("operators/dropout/keep_rate/p=" + p), 1u);
}

// The zero pattern of y (x has no zeros) is the forward's mask; both backwards must zero exactly
// the same elements of a dy without zeros, and keep the others.
template <class T>
void expect_backward_uses_forward_mask(std::size_t n, std::size_t misalign) {
  const DropoutConfig config{0.37f, 77, 12};
  std::vector<T> x = random_values<T>(n, 1, 0.5f, 1.5f), dy = random_values<T>(n, 2, 0.5f, 1.5f);
  DeviceBuffer<T> x_d(n + misalign), dy_d(n + misalign), y(n + misalign), dx(n + misalign),
      dx_regen(n + misalign);
  SEQBENCH_CUDA_CHECK(cudaMemcpy(x_d.data() + misalign, x.data(), n * sizeof(T), cudaMemcpyHostToDevice));
  SEQBENCH_CUDA_CHECK(cudaMemcpy(dy_d.data() + misalign, dy.data(), n * sizeof(T), cudaMemcpyHostToDevice));
  DeviceBuffer<std::uint32_t> mask(kernels::dropout_mask_bytes(n) / 4);
  for (auto* b : {&y, &dx, &dx_regen}) b->fill_bytes(0xFF);
  mask.fill_bytes(0xFF);
  kernels::launch_dropout_fwd<T>(y.data() + misalign, x_d.data() + misalign, n, config, mask.data(),
                                 mask.bytes(), nullptr);
  kernels::launch_dropout_bwd<T>(dx.data() + misalign, dy_d.data() + misalign, n, config.p, mask.data(),
                                 mask.bytes(), nullptr);
  kernels::launch_dropout_bwd_regenerate<T>(dx_regen.data() + misalign, dy_d.data() + misalign, n, config,
                                            nullptr);
  SEQBENCH_CUDA_CHECK(cudaDeviceSynchronize());
  const auto hy = y.copy_to_host(), hdx = dx.copy_to_host(), hdr = dx_regen.copy_to_host();
  const auto words = mask.copy_to_host();
  const auto* bits = reinterpret_cast<const std::uint8_t*>(words.data());
  std::size_t kept = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const bool fwd_kept = to_float(hy[misalign + i]) != 0.0f;
    ASSERT_EQ(fwd_kept, kernels::dropout_detail::dropout_mask_bit(bits, i)) << "element " << i;
    ASSERT_EQ(to_float(hdx[misalign + i]) != 0.0f, fwd_kept) << "bit-packed backward, element " << i;
    ASSERT_EQ(to_float(hdr[misalign + i]) != 0.0f, fwd_kept) << "regenerating backward, element " << i;
    ASSERT_EQ(fwd_kept, philox_keep(config.seed, config.offset, i, config.p)) << "element " << i;
    kept += fwd_kept;
  }
  EXPECT_GT(kept, 0u);
  EXPECT_LT(kept, n);
}

TEST(DropoutGpu, BackwardUsesExactlyTheForwardsMask) {
  SEQBENCH_REQUIRE_GPU();
  expect_backward_uses_forward_mask<float>(1000003, 0);
  expect_backward_uses_forward_mask<float>(4097, 3);
  expect_backward_uses_forward_mask<__half>(1000003, 5);
  expect_backward_uses_forward_mask<__nv_bfloat16>(65536, 0);
  expect_backward_uses_forward_mask<__nv_bfloat16>(127, 1);
}

// The mask is a function of (seed, offset, element index): not of the dtype, nor of where the
// tensors sit in memory (vector path or scalar path).
TEST(DropoutGpu, MaskDependsOnlyOnSeedOffsetAndIndex) {
  SEQBENCH_REQUIRE_GPU();
  const std::size_t n = 100003;
  const DropoutConfig config{0.2f, 5, 6};
  const std::size_t bytes = kernels::dropout_mask_bytes(n);
  std::vector<std::vector<std::uint32_t>> masks;
  const auto run = [&](auto tag, std::size_t misalign) {
    using T = decltype(tag);
    DeviceBuffer<T> x(random_values<T>(n + misalign, 3, -1.0f, 1.0f)), y(n + misalign);
    DeviceBuffer<std::uint32_t> mask(bytes / 4);
    mask.fill_bytes(0xFF);
    kernels::launch_dropout_fwd<T>(y.data() + misalign, x.data() + misalign, n, config, mask.data(), bytes,
                                   nullptr);
    SEQBENCH_CUDA_CHECK(cudaDeviceSynchronize());
    masks.push_back(mask.copy_to_host());
  };
  run(float{}, 0);
  run(float{}, 1);
  run(__half{}, 0);
  run(__half{}, 3);
  run(__nv_bfloat16{}, 7);
  for (std::size_t i = 1; i < masks.size(); ++i) EXPECT_EQ(masks[i], masks[0]) << "run " << i;
}

TEST(DropoutGpu, POneGivesZerosAndPZeroCopies) {
  SEQBENCH_REQUIRE_GPU();
  const std::size_t n = 12345;
  std::vector<float> x =
      random_values<float>(n, 9, -1e30f, 1e30f);  // large values: 0·scale must not overflow
  DeviceBuffer<float> x_d(x), y(n);
  DeviceBuffer<std::uint32_t> mask(kernels::dropout_mask_bytes(n) / 4);
  y.fill_bytes(0xFF);
  kernels::launch_dropout_fwd<float>(y.data(), x_d.data(), n, {1.0f, 1, 2}, mask.data(), mask.bytes(),
                                     nullptr);
  SEQBENCH_CUDA_CHECK(cudaDeviceSynchronize());
  for (float v : y.copy_to_host()) ASSERT_EQ(v, 0.0f);
  for (std::uint32_t w : mask.copy_to_host()) ASSERT_EQ(w, 0u);

  y.fill_bytes(0xFF);
  kernels::launch_dropout_fwd<float>(y.data(), x_d.data(), n, {0.0f, 1, 2}, mask.data(), mask.bytes(),
                                     nullptr);
  SEQBENCH_CUDA_CHECK(cudaDeviceSynchronize());
  const auto got = y.copy_to_host();
  EXPECT_EQ(std::memcmp(got.data(), x.data(), n * sizeof(float)), 0);
  const auto words = mask.copy_to_host();
  for (std::size_t w = 0; w < words.size(); ++w) {
    const std::size_t valid = std::min<std::size_t>(32, n - 32 * w);
    EXPECT_EQ(words[w], valid == 32 ? ~0u : (1u << valid) - 1u)
        << "word " << w << " (padding bits must be 0)";
  }
}

// Negative control: a backward that redraws from the wrong stream (offset + 1) disagrees with
// the reference in about 2p(1-p) of the elements, so the reference comparison can fail.
TEST(DropoutGpu, AMaskFromTheWrongStreamIsCaught) {
  SEQBENCH_REQUIRE_GPU();
  const std::size_t n = 100000;
  const float p = 0.5f;
  const std::vector<float> dy = random_values<float>(n, 4, 0.5f, 1.5f);
  DeviceBuffer<float> dy_d(dy), dx(n);
  kernels::launch_dropout_bwd_regenerate<float>(dx.data(), dy_d.data(), n, {p, 8, 2}, nullptr);
  SEQBENCH_CUDA_CHECK(cudaDeviceSynchronize());
  const auto got = dx.copy_to_host();
  const ref::KeepMask keep = ref::make_dropout_mask(1, static_cast<ref::Index>(n), p, 8, 1);  // the forward's
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < n; ++i) wrong += (got[i] != 0.0f) != (keep(0, static_cast<ref::Index>(i)) != 0);
  EXPECT_GT(wrong, n / 4);  // ~n/2 expected
  EXPECT_LT(wrong, 3 * n / 4);
}

}  // namespace
}  // namespace seqbench
