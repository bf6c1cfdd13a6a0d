// Softmax kernels on the GPU: every kernel and every tuner candidate against reference/ over >= 50
// random shapes and masks in all three dtypes (softmax_gpu_checks, shared with `seqbench check`),
// the tuner's caching, in-place use, fully-masked rows, NaN scores and very long rows.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/cuda_check.h"
#include "core/device_buffer.h"
#include "core/dtype.h"
#include "kernels/softmax.h"
#include "suites/operators/operators.h"
#include "tests/common/gpu_test.h"

namespace seqbench {
namespace {

using kernels::SoftmaxConfig;
using kernels::SoftmaxMask;
using kernels::SoftmaxShape;

TEST(SoftmaxGpu, MatchesTheReferenceOnRandomShapesAndMasksInEveryDtype) {
  SEQBENCH_REQUIRE_GPU();
  for (const std::uint64_t seed : {20261122ull, 11ull}) {
    const std::vector<CheckResult> checks = operators::softmax_gpu_checks(seed);
    EXPECT_EQ(checks.size(), 15u);  // (forward, backward, 2 unfused, tuner candidates) x 3 dtypes
    for (const CheckResult& c : checks) {
      EXPECT_TRUE(c.passed) << c.name << ": max |err|/s " << c.max_rel_err << " vs tolerance " << c.tolerance
                            << "\n"
                            << c.detail;
    }
  }
}

template <class T>
std::vector<T> random_values(std::size_t n, std::uint64_t seed, double amp = 4.0) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> uni(-amp, amp);
  std::vector<T> out(n);
  for (T& v : out) v = from_float<T>(static_cast<float>(uni(rng)));
  return out;
}

template <class T>
bool bitwise_equal(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

TEST(SoftmaxGpu, TunerTimesOncePerBucketAndLaunchesItsChoice) {
  SEQBENCH_REQUIRE_GPU();
  using T = __nv_bfloat16;
  const SoftmaxShape shape{4, 8, 32, 1000};
  const auto n = static_cast<std::size_t>(shape.rows() * shape.k_len);
  DeviceBuffer<T> x(random_values<T>(n, 1)), y(n), y2(n);
  kernels::SoftmaxTuner tuner(2);
  const SoftmaxMask none{};
  Stream stream;
  tuner.forward<T>(y.data(), x.data(), shape, 0.125f, none, stream.get());
  ASSERT_EQ(tuner.size(), 1u);
  const kernels::SoftmaxTuner::Key key{DType::bf16, false, true, 1024};
  const kernels::SoftmaxTuner::Entry* entry = tuner.find(key);
  ASSERT_NE(entry, nullptr);
  const auto candidates = kernels::softmax_candidate_configs(DType::bf16, 1000, true);
  ASSERT_EQ(entry->timings.size(), candidates.size());
  for (std::size_t i = 0; i < candidates.size(); ++i) {
    EXPECT_EQ(entry->timings[i].config, candidates[i]);
    EXPECT_GT(entry->timings[i].ms, 0.0);
  }
  EXPECT_NE(std::find(candidates.begin(), candidates.end(), entry->choice), candidates.end());
  EXPECT_EQ(entry->heuristic, kernels::softmax_default_config(DType::bf16, 1000, true));
  const std::vector<kernels::SoftmaxTuner::Timing> timings = entry->timings;

  // Same bucket (a different length and row count): no new timing, the cached choice runs.
  const SoftmaxShape other{2, 8, 16, 1000};
  y.fill_bytes(0xFF, stream.get());
  tuner.forward<T>(y.data(), x.data(), other, 0.125f, none, stream.get());
  EXPECT_EQ(tuner.size(), 1u);
  EXPECT_EQ(tuner.find(key)->timings.size(), timings.size());
  EXPECT_EQ(tuner.find(key)->timings[0].ms, timings[0].ms);
  // Its output is that of its choice, launched directly.
  y2.fill_bytes(0xFF, stream.get());
  kernels::launch_softmax_forward<T>(y2.data(), x.data(), other, 0.125f, none, stream.get(), &entry->choice);
  stream.synchronize();
  const std::size_t m = static_cast<std::size_t>(other.rows() * other.k_len);
  const auto a = y.copy_to_host(), b = y2.copy_to_host();
  EXPECT_EQ(std::memcmp(a.data(), b.data(), m * sizeof(T)), 0);

  // The backward is a key of its own; the dump names both.
  DeviceBuffer<T> dy(random_values<T>(n, 2, 1.0)), dx(n);
  tuner.backward<T>(dx.data(), dy.data(), y.data(), shape, 0.125f, stream.get());
  stream.synchronize();
  EXPECT_EQ(tuner.size(), 2u);
  const std::string json = tuner.to_json();
  EXPECT_NE(json.find("\"direction\": \"forward\""), std::string::npos) << json;
  EXPECT_NE(json.find("\"direction\": \"backward\""), std::string::npos) << json;
  EXPECT_NE(json.find("\"k_len_bucket\": 1024"), std::string::npos) << json;
  EXPECT_NE(json.find("\"choice\": {\"path\": "), std::string::npos) << json;
}

// y == x and dx == dy / dx == y give the same bits as separate buffers, on every path.
template <class T>
void expect_in_place_equals_out_of_place(std::int64_t k_len, const SoftmaxConfig& config) {
  SCOPED_TRACE(std::string(DTypeTraits<T>::name) + " k_len=" + std::to_string(k_len) + " " +
               config.to_string());
  const SoftmaxShape shape{2, 3, 5, k_len};
  const auto n = static_cast<std::size_t>(shape.rows() * k_len);
  const std::vector<T> xh = random_values<T>(n, 3), dyh = random_values<T>(n, 4, 1.0);
  std::vector<std::int32_t> lengths = {static_cast<std::int32_t>(k_len / 2),
                                       static_cast<std::int32_t>(k_len)};
  DeviceBuffer<std::int32_t> len(lengths);
  SoftmaxMask mask;
  mask.causal = true;
  mask.causal_offset = k_len - 3;
  mask.key_lengths = len.data();
  DeviceBuffer<T> x(xh), y(n), inplace(xh);
  kernels::launch_softmax_forward<T>(y.data(), x.data(), shape, 0.3f, mask, nullptr, &config);
  kernels::launch_softmax_forward<T>(inplace.data(), inplace.data(), shape, 0.3f, mask, nullptr, &config);
  SEQBENCH_CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<T> yh = y.copy_to_host();
  EXPECT_TRUE(bitwise_equal(yh, inplace.copy_to_host())) << "forward in place";

  DeviceBuffer<T> dy(dyh), dx(n), dx_in_dy(dyh), dx_in_y(yh);
  kernels::launch_softmax_backward<T>(dx.data(), dy.data(), y.data(), shape, 0.3f, nullptr, &config);
  kernels::launch_softmax_backward<T>(dx_in_dy.data(), dx_in_dy.data(), y.data(), shape, 0.3f, nullptr,
                                      &config);
  kernels::launch_softmax_backward<T>(dx_in_y.data(), dy.data(), dx_in_y.data(), shape, 0.3f, nullptr,
                                      &config);
  SEQBENCH_CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<T> want = dx.copy_to_host();
  EXPECT_TRUE(bitwise_equal(want, dx_in_dy.copy_to_host())) << "backward with dx == dy";
  EXPECT_TRUE(bitwise_equal(want, dx_in_y.copy_to_host())) << "backward with dx == y";
}

TEST(SoftmaxGpu, InPlaceMatchesOutOfPlaceOnEveryPath) {
  SEQBENCH_REQUIRE_GPU();
  for (const std::int64_t k : {7, 1000, 4096, 20000}) {
    for (const SoftmaxConfig& c : kernels::softmax_candidate_configs(DType::f16, k, k % 8 == 0))
      expect_in_place_equals_out_of_place<__half>(k, c);
  }
}

TEST(SoftmaxGpu, FullyMaskedRowsAreZerosWithZeroGradient) {
  SEQBENCH_REQUIRE_GPU();
  using T = float;
  for (const std::int64_t k : {5, 700, 3000, 30000}) {
    SCOPED_TRACE("k_len=" + std::to_string(k));
    // Batch 0 has no valid key; with causal offset -1 the first query of batch 1 has none either.
    const SoftmaxShape shape{2, 2, 3, k};
    const auto n = static_cast<std::size_t>(shape.rows() * k);
    DeviceBuffer<std::int32_t> len(std::vector<std::int32_t>{0, static_cast<std::int32_t>(k)});
    SoftmaxMask mask;
    mask.causal = true;
    mask.causal_offset = -1;
    mask.key_lengths = len.data();
    DeviceBuffer<T> x(random_values<T>(n, 5)), y(n), dy(random_values<T>(n, 6, 1.0)), dx(n);
    y.fill_bytes(0xFF);
    dx.fill_bytes(0xFF);
    kernels::launch_softmax_forward<T>(y.data(), x.data(), shape, 1.0f, mask, nullptr);
    kernels::launch_softmax_backward<T>(dx.data(), dy.data(), y.data(), shape, 1.0f, nullptr);
    SEQBENCH_CUDA_CHECK(cudaDeviceSynchronize());
    const std::vector<T> yh = y.copy_to_host(), dxh = dx.copy_to_host();
    for (std::int64_t r = 0; r < shape.rows(); ++r) {
      const std::int64_t b = r / (shape.heads * shape.q_len), i = r % shape.q_len;
      const std::int64_t valid = b == 0 ? 0 : std::min<std::int64_t>(k, i);  // keys j <= i - 1
      double sum = 0.0;
      for (std::int64_t j = 0; j < k; ++j) {
        const float v = yh[static_cast<std::size_t>(r * k + j)];
        if (j >= valid) {
          ASSERT_EQ(v, 0.0f) << "row " << r << " key " << j;
          ASSERT_EQ(dxh[static_cast<std::size_t>(r * k + j)], 0.0f) << "row " << r << " key " << j;
        }
        sum += v;
      }
      if (valid > 0) {
        EXPECT_NEAR(sum, 1.0, 1e-5) << "row " << r;
      }
    }
  }
}

// A NaN score makes its row NaN on every path, the unfused baseline included. A row whose valid
// scores are all NaN used to come out as zeros: fmaxf skipped every NaN, the row max stayed -inf
// and the row passed for fully masked. Row 0: all valid scores NaN (the masked tail after them);
// row 1: one NaN among finite scores; row 2: finite (sums to 1, untouched by its neighbours).
template <class T>
void expect_nan_rows(std::int64_t k_len, const SoftmaxConfig* config) {
  SCOPED_TRACE(std::string(DTypeTraits<T>::name) + " k_len=" + std::to_string(k_len) + " " +
               (config ? config->to_string() : std::string("unfused")));
  const SoftmaxShape shape{1, 1, 3, k_len};
  const auto k = static_cast<std::size_t>(k_len), n = 3 * k;
  std::vector<T> xh = random_values<T>(n, 9);
  const std::size_t valid = k > 1 ? k - 1 : k;  // key_lengths masks the last key
  for (std::size_t j = 0; j < valid; ++j) xh[j] = from_float<T>(NAN);
  xh[k + valid / 2] = from_float<T>(NAN);
  DeviceBuffer<std::int32_t> len(std::vector<std::int32_t>{static_cast<std::int32_t>(valid)});
  SoftmaxMask mask;
  mask.key_lengths = len.data();
  DeviceBuffer<T> x(xh), y(n);
  // Poisoned with a finite non-zero value (0x3C bytes: about 0.0115 in f32 and bf16), so that an
  // unwritten element passes neither the NaN checks nor the zero check of a masked key.
  y.fill_bytes(0x3C);
  if (config) {
    kernels::launch_softmax_forward<T>(y.data(), x.data(), shape, 0.5f, mask, nullptr, config);
  } else {
    DeviceBuffer<unsigned char> ws(
        kernels::softmax_unfused_forward_workspace_bytes(DTypeTraits<T>::dtype, shape));
    kernels::launch_softmax_forward_unfused<T>(y.data(), x.data(), shape, 0.5f, mask, ws.data(), ws.size(),
                                               nullptr);
  }
  SEQBENCH_CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<T> yh = y.copy_to_host();
  for (std::size_t r = 0; r < 2; ++r) {
    for (std::size_t j = 0; j < valid; ++j)
      ASSERT_TRUE(std::isnan(to_float(yh[r * k + j]))) << "row " << r << " key " << j << " is not NaN";
    // The masked key: 0 from every fused path, NaN from the unfused (eager) one (kernels/softmax.h).
    for (std::size_t j = valid; j < k; ++j) {
      const float got = to_float(yh[r * k + j]);
      if (config)
        ASSERT_EQ(got, 0.0f) << "row " << r << " masked key " << j;
      else
        ASSERT_TRUE(std::isnan(got)) << "row " << r << " masked key " << j << " (unfused) is not NaN";
    }
  }
  double sum = 0.0;
  for (std::size_t j = 0; j < k; ++j) sum += to_float(yh[2 * k + j]);
  // Each output rounds once to T (relative u_T <= 2^-8), so the sum is within 2^-8 (+ fp32 sums) of 1.
  EXPECT_NEAR(sum, 1.0, 0.01) << "the finite row";
}

TEST(SoftmaxGpu, NanScoresGiveNanRowsOnEveryPath) {
  SEQBENCH_REQUIRE_GPU();
  for (const std::int64_t k : {1, 7, 1000, 4096, 20000}) {
    for (const SoftmaxConfig& c : kernels::softmax_candidate_configs(DType::bf16, k, k % 8 == 0))
      expect_nan_rows<__nv_bfloat16>(k, &c);
    expect_nan_rows<__nv_bfloat16>(k, nullptr);
    for (const SoftmaxConfig& c : kernels::softmax_candidate_configs(DType::f32, k, k % 4 == 0))
      expect_nan_rows<float>(k, &c);
    expect_nan_rows<float>(k, nullptr);
  }
}

TEST(SoftmaxGpu, VeryLongRowsSumToOne) {
  SEQBENCH_REQUIRE_GPU();
  const std::int64_t k = (1 << 20) + 3;
  const SoftmaxShape shape{1, 1, 2, k};
  const auto n = static_cast<std::size_t>(shape.rows() * k);
  DeviceBuffer<float> x(random_values<float>(n, 8, 10.0)), y(n);
  y.fill_bytes(0xFF);
  kernels::launch_softmax_forward<float>(y.data(), x.data(), shape, 1.0f, SoftmaxMask{}, nullptr);
  SEQBENCH_CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<float> yh = y.copy_to_host();
  for (std::int64_t r = 0; r < shape.rows(); ++r) {
    double sum = 0.0;
    for (std::int64_t j = 0; j < k; ++j) {
      const float v = yh[static_cast<std::size_t>(r * k + j)];
      ASSERT_TRUE(v >= 0.0f && v <= 1.0f) << "row " << r << " key " << j << ": " << v;
      sum += v;
    }
    // The fp32 sum's chains are <= k/1024 + 10 additions long: 1035 u; plus the normalization.
    EXPECT_NEAR(sum, 1.0, 1040.0 * std::ldexp(1.0, -24)) << "row " << r;
  }
}

}  // namespace
}  // namespace seqbench
