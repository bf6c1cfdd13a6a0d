// The label-smoothed cross-entropy kernels on the GPU: every launcher (fused and unfused) against
// reference/cross_entropy.h through the suite's checks (which `seqbench check` also runs; they
// include rows with -inf logits, masked_logits), plus:
// an empty batch and an all-ignored batch give zero totals, and a misaligned logits pointer
// (which moves the scalar head of every row) gives the same losses within the derived bound.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "core/cuda_check.h"
#include "core/device_buffer.h"
#include "kernels/cross_entropy.h"
#include "suites/operators/check_util.h"
#include "suites/operators/operators.h"
#include "tests/common/gpu_test.h"

namespace seqbench {
namespace {

using kernels::CrossEntropyConfig;
using kernels::CrossEntropyTotals;
using operators::check_util::random_values;

TEST(CrossEntropyGpu, EveryLauncherMatchesTheReference) {
  SEQBENCH_REQUIRE_GPU();
  for (const std::uint64_t seed : {20240923ull, 3ull}) {
    const std::vector<CheckResult> results = operators::cross_entropy_gpu_checks(seed);
    std::set<std::string> names;
    for (const CheckResult& r : results) {
      names.insert(r.name);
      EXPECT_TRUE(r.passed) << r.name << ": " << r.detail;
    }
    EXPECT_EQ(results.size(), 3u * 9u);
    for (const std::string dtype : {"f32", "f16", "bf16"}) {
      for (const std::string kernel : {"fwd", "totals", "bwd", "bwd_scalar", "determinism", "invalid_target",
                                       "masked_logits", "unfused_fwd", "unfused_bwd"}) {
        EXPECT_EQ(names.count("operators/cross_entropy/" + kernel + "/" + dtype), 1u)
            << kernel << "/" << dtype;
      }
    }
  }
}

TEST(CrossEntropyGpu, EmptyAndAllIgnoredBatchesGiveZeroTotals) {
  SEQBENCH_REQUIRE_GPU();
  CrossEntropyConfig c;
  c.smoothing = 0.1f;
  c.ignore_index = 1;
  DeviceBuffer<CrossEntropyTotals> totals(1);
  // N = 0: only the totals kernel runs, and writes zeros. totals needs nll at every N (the
  // launcher's rule, checked before it looks at N), so an unread one-element nll goes with it.
  DeviceBuffer<float> unread_nll(1);
  totals.fill_bytes(0xFF);
  kernels::launch_cross_entropy_forward<float>(nullptr, unread_nll.data(), nullptr, totals.data(), nullptr,
                                               nullptr, 0, 100, c, nullptr);
  SEQBENCH_CUDA_CHECK(cudaDeviceSynchronize());
  CrossEntropyTotals t = totals.copy_to_host()[0];
  EXPECT_EQ(t.loss_sum, 0.0f);
  EXPECT_EQ(t.nll_sum, 0.0f);
  EXPECT_EQ(t.tokens, 0);
  EXPECT_EQ(t.invalid_targets, 0);
  // Every row ignored: zeros everywhere, including the gradient.
  const std::int64_t rows = 7, vocab = 50257;
  const auto n = static_cast<std::size_t>(rows * vocab);
  DeviceBuffer<__nv_bfloat16> x(random_values<__nv_bfloat16>(n, 1, -5.0f, 5.0f)), d(n);
  DeviceBuffer<std::int32_t> targets(std::vector<std::int32_t>(rows, 1));
  DeviceBuffer<float> loss(rows), nll(rows), lse(rows), grad(std::vector<float>(rows, 1.0f));
  for (auto* b : {&loss, &nll, &lse}) b->fill_bytes(0xFF);
  d.fill_bytes(0xFF);
  totals.fill_bytes(0xFF);
  kernels::launch_cross_entropy_forward<__nv_bfloat16>(loss.data(), nll.data(), lse.data(), totals.data(),
                                                       x.data(), targets.data(), rows, vocab, c, nullptr);
  kernels::launch_cross_entropy_backward<__nv_bfloat16>(d.data(), x.data(), targets.data(), lse.data(),
                                                        grad.data(), rows, vocab, c, nullptr);
  SEQBENCH_CUDA_CHECK(cudaDeviceSynchronize());
  t = totals.copy_to_host()[0];
  EXPECT_EQ(t.loss_sum, 0.0f);
  EXPECT_EQ(t.tokens, 0);
  for (const float v : loss.copy_to_host()) EXPECT_EQ(v, 0.0f);
  for (const float v : lse.copy_to_host()) EXPECT_EQ(v, 0.0f);
  for (const __nv_bfloat16 v : d.copy_to_host()) ASSERT_EQ(to_float(v), 0.0f);
}

// The same logits at every element offset 0..7 (a different scalar head per row, so a different
// summation order): every row is finite and the losses agree within twice the forward bound, which
// for these rows (Z <= 16, R <= 15, n <= 106, |lse| <= 20, V = 50257, α = 0.1) is below
// 512·u·(1 + |loss|) (suites/operators/cross_entropy.cu).
TEST(CrossEntropyGpu, AnyLogitsAlignmentGivesTheSameLoss) {
  SEQBENCH_REQUIRE_GPU();
  using T = __nv_bfloat16;
  const std::int64_t rows = 9, vocab = 50257;
  const auto n = static_cast<std::size_t>(rows * vocab);
  const std::vector<T> xh = random_values<T>(n, 7, -8.0f, 8.0f);
  std::vector<std::int32_t> th(rows);
  for (std::int64_t r = 0; r < rows; ++r)
    th[static_cast<std::size_t>(r)] = static_cast<std::int32_t>(r * 5557 % vocab);
  DeviceBuffer<std::int32_t> targets(th);
  CrossEntropyConfig c;
  c.smoothing = 0.1f;
  std::vector<float> first;
  for (std::size_t offset = 0; offset < 8; ++offset) {
    DeviceBuffer<T> x(n + 8);
    SEQBENCH_CUDA_CHECK(cudaMemcpy(x.data() + offset, xh.data(), n * sizeof(T), cudaMemcpyHostToDevice));
    DeviceBuffer<float> loss(rows);
    kernels::launch_cross_entropy_forward<T>(loss.data(), nullptr, nullptr, nullptr, x.data() + offset,
                                             targets.data(), rows, vocab, c, nullptr);
    SEQBENCH_CUDA_CHECK(cudaDeviceSynchronize());
    const std::vector<float> l = loss.copy_to_host();
    if (offset == 0) first = l;
    for (std::size_t r = 0; r < l.size(); ++r) {
      ASSERT_TRUE(std::isfinite(l[r])) << "offset " << offset << " row " << r;
      EXPECT_NEAR(l[r], first[r], 2.0 * 512.0 * operators::check_util::kU32 * (1.0 + std::fabs(first[r])))
          << "offset " << offset << " row " << r;
    }
  }
}

}  // namespace
}  // namespace seqbench
