// LayerNorm kernels on the GPU: every kernel against reference/ over >= 50 random shapes in all
// three dtypes (layernorm_gpu_checks, shared with `seqbench check`), bitwise determinism of the
// backward, the host emulation's fidelity (the accuracy study rests on it), and edge cases.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "core/cuda_check.h"
#include "core/device_buffer.h"
#include "core/dtype.h"
#include "kernels/layernorm.h"
#include "suites/operators/operators.h"
#include "tests/common/gpu_test.h"

namespace seqbench {
namespace {

using kernels::LayerNormStats;

TEST(LayerNormGpu, MatchesTheReferenceOnRandomShapesInEveryDtype) {
  SEQBENCH_REQUIRE_GPU();
  for (const std::uint64_t seed : {20261122ull, 7ull}) {
    const std::vector<CheckResult> checks = operators::layernorm_gpu_checks(seed);
    EXPECT_EQ(checks.size(), 15u);  // 5 kernels x 3 dtypes
    for (const CheckResult& c : checks) {
      EXPECT_TRUE(c.passed) << c.name << ": max |err|/s " << c.max_rel_err << " vs tolerance " << c.tolerance
                            << "\n"
                            << c.detail;
    }
  }
}

template <class T>
std::vector<T> random_values(std::size_t n, std::uint64_t seed, double mean = 0.0, double std = 1.0) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(mean, std);
  std::vector<T> out(n);
  for (T& v : out) v = from_float<T>(static_cast<float>(normal(rng)));
  return out;
}

template <class T>
bool bitwise_equal(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

// dgamma/dbeta (and dx) promise bitwise determinism: two runs, with the workspace and outputs
// poisoned differently in between, must agree to the bit, on every path.
template <class T>
void expect_deterministic_backward(std::int64_t rows, int hidden) {
  SCOPED_TRACE(std::string(DTypeTraits<T>::name) + " rows=" + std::to_string(rows) +
               " hidden=" + std::to_string(hidden));
  const auto n = static_cast<std::size_t>(rows) * hidden;
  DeviceBuffer<T> x(random_values<T>(n, 1, 0.5, 2.0)), dy(random_values<T>(n, 2)),
      gamma(random_values<T>(hidden, 3)), beta(random_values<T>(hidden, 4)), y(n), dx(n), dgamma(hidden),
      dbeta(hidden);
  DeviceBuffer<float> mean(rows), rstd(rows);
  DeviceBuffer<unsigned char> ws(kernels::layernorm_backward_workspace_bytes(rows, hidden));
  kernels::launch_layernorm_forward<T>(y.data(), mean.data(), rstd.data(), x.data(), gamma.data(),
                                       beta.data(), rows, hidden, 1e-5f, nullptr);
  std::vector<T> first[3];
  for (int run = 0; run < 2; ++run) {
    const unsigned char poison = run == 0 ? 0xFF : 0x00;
    ws.fill_bytes(poison);
    dx.fill_bytes(poison);
    dgamma.fill_bytes(poison);
    dbeta.fill_bytes(poison);
    kernels::launch_layernorm_backward<T>(dx.data(), dgamma.data(), dbeta.data(), dy.data(), x.data(),
                                          gamma.data(), mean.data(), rstd.data(), rows, hidden, ws.data(),
                                          ws.size(), nullptr);
    SEQBENCH_CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<T> now[3] = {dx.copy_to_host(), dgamma.copy_to_host(), dbeta.copy_to_host()};
    if (run == 0) {
      for (int i = 0; i < 3; ++i) first[i] = std::move(now[i]);
    } else {
      EXPECT_TRUE(bitwise_equal(first[0], now[0])) << "dx differs between runs";
      EXPECT_TRUE(bitwise_equal(first[1], now[1])) << "dgamma differs between runs";
      EXPECT_TRUE(bitwise_equal(first[2], now[2])) << "dbeta differs between runs";
    }
  }
  // And a different stream interleaving (work on a non-default stream) changes nothing either.
  Stream stream;
  kernels::launch_layernorm_backward<T>(dx.data(), dgamma.data(), dbeta.data(), dy.data(), x.data(),
                                        gamma.data(), mean.data(), rstd.data(), rows, hidden, ws.data(),
                                        ws.size(), stream.get());
  stream.synchronize();
  EXPECT_TRUE(bitwise_equal(first[1], dgamma.copy_to_host())) << "dgamma differs on another stream";
}

TEST(LayerNormGpu, BackwardIsBitwiseDeterministicOnEveryPath) {
  SEQBENCH_REQUIRE_GPU();
  expect_deterministic_backward<__nv_bfloat16>(5000, 200);  // warp path, 313 chunks
  expect_deterministic_backward<float>(20000, 96);          // warp path, 1000 chunks of 20 rows
  expect_deterministic_backward<__half>(3001, 1024);        // block path
  expect_deterministic_backward<__nv_bfloat16>(777, 1023);  // block path, scalar
  expect_deterministic_backward<float>(300, 9000);          // multipass path
  expect_deterministic_backward<__nv_bfloat16>(40, 70001);  // multipass path, scalar
}

// The accuracy study (tests/kernels/layernorm_validation_test.cpp) emulates the kernels on the host.
// Here the kernels must reproduce the emulated mean bit for bit and rstd within the rsqrtf error,
// on inputs (x = 1000 + N(0,1) in fp16) where any difference in the order of operations shows.
template <class T>
void expect_emulation_matches(int hidden, bool aligned, LayerNormStats stats) {
  SCOPED_TRACE(std::string(DTypeTraits<T>::name) + " hidden=" + std::to_string(hidden) +
               (aligned ? "" : " (scalar)") + " " + kernels::layernorm_stats_name(stats));
  const std::int64_t rows = 9;
  const auto n = static_cast<std::size_t>(rows) * hidden;
  const std::vector<T> xh = random_values<T>(n, 77 + hidden, 1000.0, 1.0);
  const std::size_t off = aligned ? 0 : 1;
  DeviceBuffer<T> x(n + 1), y(n + 1), gamma(hidden + 1), beta(hidden + 1);
  SEQBENCH_CUDA_CHECK(cudaMemcpy(x.data() + off, xh.data(), n * sizeof(T), cudaMemcpyHostToDevice));
  gamma.fill_bytes(0);
  beta.fill_bytes(0);
  DeviceBuffer<float> mean(rows), rstd(rows);
  const float eps = 1e-5f;
  kernels::launch_layernorm_forward<T>(y.data() + off, mean.data(), rstd.data(), x.data() + off,
                                       gamma.data() + off, beta.data() + off, rows, hidden, eps, nullptr,
                                       stats);
  SEQBENCH_CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<float> m = mean.copy_to_host(), r = rstd.copy_to_host();
  const kernels::LayerNormPlan plan = kernels::layernorm_plan(DTypeTraits<T>::dtype, hidden, aligned);
  for (std::int64_t row = 0; row < rows; ++row) {
    std::vector<float> xf(static_cast<std::size_t>(hidden));
    for (int c = 0; c < hidden; ++c) xf[c] = to_float(xh[static_cast<std::size_t>(row) * hidden + c]);
    const kernels::LayerNormRowStats st =
        kernels::layernorm_emulate_row_stats(xf.data(), hidden, stats, plan);
    EXPECT_EQ(m[row], st.mean) << "row " << row;
    const float want = static_cast<float>(1.0 / std::sqrt(static_cast<double>(st.var + eps)));
    // rsqrtf is within 2 ulp, the host's correctly rounded value within 0.5: 3 ulp apart at most.
    EXPECT_LE(std::abs(r[row] - want), 3.0f * std::ldexp(1.0f, std::ilogb(want) - 23)) << "row " << row;
  }
}

TEST(LayerNormGpu, KernelStatisticsMatchTheHostEmulation) {
  SEQBENCH_REQUIRE_GPU();
  for (const LayerNormStats stats : {LayerNormStats::welford, LayerNormStats::two_moment}) {
    for (const int hidden : {8, 200, 256, 768, 1024, 4096, 8192, 16384}) {
      expect_emulation_matches<__half>(hidden, true, stats);
      expect_emulation_matches<__half>(hidden, false, stats);
    }
    expect_emulation_matches<float>(1000, true, stats);
    expect_emulation_matches<__nv_bfloat16>(10001, false, stats);
  }
}

TEST(LayerNormGpu, StatisticsAreOptionalAndDoNotChangeTheOutput) {
  SEQBENCH_REQUIRE_GPU();
  const std::int64_t rows = 37;
  const int hidden = 1000;
  const auto n = static_cast<std::size_t>(rows) * hidden;
  DeviceBuffer<__nv_bfloat16> x(random_values<__nv_bfloat16>(n, 5)),
      g(random_values<__nv_bfloat16>(hidden, 6)), b(random_values<__nv_bfloat16>(hidden, 7)), y1(n), y2(n);
  DeviceBuffer<float> mean(rows), rstd(rows);
  kernels::launch_layernorm_forward<__nv_bfloat16>(y1.data(), mean.data(), rstd.data(), x.data(), g.data(),
                                                   b.data(), rows, hidden, 1e-5f, nullptr);
  y2.fill_bytes(0xFF);
  kernels::launch_layernorm_forward<__nv_bfloat16>(y2.data(), nullptr, nullptr, x.data(), g.data(), b.data(),
                                                   rows, hidden, 1e-5f, nullptr);
  SEQBENCH_CUDA_CHECK(cudaDeviceSynchronize());
  EXPECT_TRUE(bitwise_equal(y1.copy_to_host(), y2.copy_to_host()));
}

TEST(LayerNormGpu, NoRowsGivesZeroParameterGradients) {
  SEQBENCH_REQUIRE_GPU();
  DeviceBuffer<float> dgamma(300), dbeta(300);
  dgamma.fill_bytes(0xFF);
  dbeta.fill_bytes(0xFF);
  kernels::launch_layernorm_backward<float>(nullptr, dgamma.data(), dbeta.data(), nullptr, nullptr, nullptr,
                                            nullptr, nullptr, 0, 300, nullptr, 0, nullptr);
  SEQBENCH_CUDA_CHECK(cudaDeviceSynchronize());
  for (const float v : dgamma.copy_to_host()) ASSERT_EQ(v, 0.0f);
  for (const float v : dbeta.copy_to_host()) ASSERT_EQ(v, 0.0f);
}

}  // namespace
}  // namespace seqbench
