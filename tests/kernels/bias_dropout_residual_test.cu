// The bias + dropout + residual kernels on the GPU: every launcher (fused and unfused) against
// reference/bias_dropout_residual.h through the suite's checks (which `seqbench check` also
// runs), plus: the backward uses exactly the forward's mask, and an empty batch gives a zero
// bias gradient.

#include <gtest/gtest.h>

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "core/device_buffer.h"
#include "core/philox.h"
#include "kernels/bias_dropout_residual.h"
#include "suites/operators/check_util.h"
#include "suites/operators/operators.h"
#include "tests/common/gpu_test.h"

namespace seqbench {
namespace {

using kernels::DropoutConfig;
using operators::check_util::random_values;

constexpr std::uint64_t kSeed = 20240919;

TEST(BiasDropoutResidualGpu, EveryLauncherMatchesTheReference) {
  SEQBENCH_REQUIRE_GPU();
  const std::vector<CheckResult> results = operators::bias_dropout_residual_gpu_checks(kSeed);
  std::set<std::string> names;
  for (const CheckResult& r : results) {
    names.insert(r.name);
    EXPECT_TRUE(r.passed) << r.name << ": " << r.detail;
  }
  EXPECT_EQ(results.size(), 3u * 7u);
  for (const std::string dtype : {"f32", "f16", "bf16"}) {
    for (const std::string kernel : {"fwd", "bwd_dx", "bwd_dbias", "determinism", "unfused_fwd",
                                     "unfused_bwd_dx", "unfused_bwd_dbias"}) {
      EXPECT_EQ(names.count("operators/bias_dropout_residual/" + kernel + "/" + dtype), 1u)
          << kernel << "/" << dtype;
    }
  }
}

// With residual = 0 and x + bias > 0, y = 0 exactly where the forward dropped; with dy != 0,
// dx = 0 exactly where the backward dropped: the same elements, and philox_keep's.
template <class T>
void expect_backward_uses_forward_mask(std::int64_t rows, std::int64_t cols, std::size_t misalign) {
  const std::size_t n = static_cast<std::size_t>(rows * cols), m = misalign;
  const auto x = random_values<T>(n, 1, 0.5f, 1.5f), dy = random_values<T>(n, 3, 0.5f, 1.5f);
  const auto bias = random_values<T>(static_cast<std::size_t>(cols), 2, 0.1f, 0.5f);
  DeviceBuffer<T> x_d(n + m), dy_d(n + m), bias_d(bias.size() + m), residual(n + m), y(n + m), dx(n + m),
      dbias(bias.size() + m);
  SEQBENCH_CUDA_CHECK(cudaMemcpy(x_d.data() + m, x.data(), n * sizeof(T), cudaMemcpyHostToDevice));
  SEQBENCH_CUDA_CHECK(cudaMemcpy(dy_d.data() + m, dy.data(), n * sizeof(T), cudaMemcpyHostToDevice));
  SEQBENCH_CUDA_CHECK(
      cudaMemcpy(bias_d.data() + m, bias.data(), bias.size() * sizeof(T), cudaMemcpyHostToDevice));
  residual.fill_bytes(0);
  for (auto* b : {&y, &dx, &dbias}) b->fill_bytes(0xFF);
  DeviceBuffer<unsigned char> workspace(kernels::bias_dropout_residual_bwd_workspace_bytes(rows, cols));
  const DropoutConfig config{0.4f, 41, 8};
  kernels::launch_bias_dropout_residual_fwd<T>(y.data() + m, x_d.data() + m, bias_d.data() + m,
                                               residual.data() + m, rows, cols, config, nullptr);
  kernels::launch_bias_dropout_residual_bwd<T>(dx.data() + m, dbias.data() + m, dy_d.data() + m, rows, cols,
                                               config, workspace.data(), workspace.size(), nullptr);
  SEQBENCH_CUDA_CHECK(cudaDeviceSynchronize());
  const auto hy = y.copy_to_host(), hdx = dx.copy_to_host();
  std::size_t kept = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const bool fwd_kept = to_float(hy[m + i]) != 0.0f;
    ASSERT_EQ(to_float(hdx[m + i]) != 0.0f, fwd_kept) << rows << "x" << cols << " element " << i;
    ASSERT_EQ(fwd_kept, philox_keep(config.seed, config.offset, i, config.p))
        << rows << "x" << cols << " element " << i;
    kept += fwd_kept;
  }
  EXPECT_GT(kept, 0u);
  EXPECT_LT(kept, n);
}

TEST(BiasDropoutResidualGpu, BackwardUsesExactlyTheForwardsMask) {
  SEQBENCH_REQUIRE_GPU();
  expect_backward_uses_forward_mask<float>(300, 1024, 0);
  expect_backward_uses_forward_mask<float>(301, 1023, 0);
  expect_backward_uses_forward_mask<__half>(64, 4096, 3);
  expect_backward_uses_forward_mask<__nv_bfloat16>(1000, 72, 0);
  expect_backward_uses_forward_mask<__nv_bfloat16>(7, 4097, 1);
}

TEST(BiasDropoutResidualGpu, ZeroRowsGiveAZeroBiasGradient) {
  SEQBENCH_REQUIRE_GPU();
  for (const std::int64_t cols : {1, 1000, 4097}) {
    DeviceBuffer<__half> dbias(static_cast<std::size_t>(cols));
    dbias.fill_bytes(0xFF);
    kernels::launch_bias_dropout_residual_bwd<__half>(nullptr, dbias.data(), nullptr, 0, cols, {0.1f, 1, 2},
                                                      nullptr, 0, nullptr);
    SEQBENCH_CUDA_CHECK(cudaDeviceSynchronize());
    for (const auto v : dbias.copy_to_host()) ASSERT_EQ(to_float(v), 0.0f) << "cols=" << cols;
  }
}

}  // namespace
}  // namespace seqbench
