// The bias + activation + dropout kernels on the GPU: every launcher (fused and unfused) against
// reference/bias_act_dropout.h through the suite's checks (which `seqbench check` also runs),
// plus the family's own properties: the backward uses exactly the forward's mask, ReLU's
// derivative at 0 is 0, and an empty batch gives a zero bias gradient.

#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <set>
#include <string>
#include <vector>

#include "core/device_buffer.h"
#include "core/philox.h"
#include "kernels/bias_act_dropout.h"
#include "suites/operators/check_util.h"
#include "suites/operators/operators.h"
#include "tests/common/gpu_test.h"

namespace seqbench {
namespace {

using kernels::Activation;
using kernels::DropoutConfig;
using operators::check_util::random_values;

constexpr std::uint64_t kSeed = 20240918;

TEST(BiasActDropoutGpu, EveryLauncherMatchesTheReference) {
  SEQBENCH_REQUIRE_GPU();
  const std::vector<CheckResult> results = operators::bias_act_dropout_gpu_checks(kSeed);
  std::set<std::string> names;
  for (const CheckResult& r : results) {
    names.insert(r.name);
    EXPECT_TRUE(r.passed) << r.name << ": " << r.detail;
  }
  EXPECT_EQ(results.size(), 3u * 3u * 9u);
  for (const std::string act : {"relu", "gelu_erf", "gelu_tanh"}) {
    for (const std::string dtype : {"f32", "f16", "bf16"}) {
      for (const std::string kernel :
           {"fwd", "bwd_dx", "bwd_dbias", "determinism", "bwd_in_place", "unfused_bias_add", "unfused_fwd",
            "unfused_bwd_dx", "unfused_bwd_dbias"}) {
        EXPECT_EQ(names.count("operators/bias_act_dropout/" + act + "/" + kernel + "/" + dtype), 1u)
            << act << "/" << kernel << "/" << dtype;
      }
    }
  }
}

template <class T>
struct Problem {
  std::int64_t rows, cols;
  std::size_t misalign;
  std::vector<T> x, bias, dy;
  DeviceBuffer<T> x_d, bias_d, dy_d, y, dx, dbias;
  DeviceBuffer<unsigned char> workspace;
  Problem(std::int64_t r, std::int64_t c, std::size_t m, std::vector<T> xs, std::vector<T> bs,
          std::vector<T> dys)
      : rows(r),
        cols(c),
        misalign(m),
        x(std::move(xs)),
        bias(std::move(bs)),
        dy(std::move(dys)),
        x_d(x.size() + m),
        bias_d(bias.size() + m),
        dy_d(dy.size() + m),
        y(x.size() + m),
        dx(x.size() + m),
        dbias(bias.size() + m),
        workspace(kernels::bias_act_dropout_bwd_workspace_bytes(r, c)) {
    const auto put = [m](DeviceBuffer<T>& d, const std::vector<T>& h) {
      if (!h.empty())
        SEQBENCH_CUDA_CHECK(cudaMemcpy(d.data() + m, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
    };
    put(x_d, x);
    put(bias_d, bias);
    put(dy_d, dy);
    for (auto* b : {&y, &dx, &dbias}) b->fill_bytes(0xFF);
    workspace.fill_bytes(0xFF);
  }
  void run(Activation act, const DropoutConfig& config) {
    const std::size_t m = misalign;
    kernels::launch_bias_act_dropout_fwd<T>(y.data() + m, x_d.data() + m, bias_d.data() + m, rows, cols, act,
                                            config, nullptr);
    kernels::launch_bias_act_dropout_bwd<T>(dx.data() + m, dbias.data() + m, dy_d.data() + m, x_d.data() + m,
                                            bias_d.data() + m, rows, cols, act, config, workspace.data(),
                                            workspace.size(), nullptr);
    SEQBENCH_CUDA_CHECK(cudaDeviceSynchronize());
  }
};

// With x + bias > 0 and ReLU, y = 0 exactly where the forward dropped; with dy != 0, dx = 0
// exactly where the backward dropped. The two patterns must agree, element by element, with
// each other and with philox_keep at the flat index r·cols + c.
template <class T>
void expect_backward_uses_forward_mask(std::int64_t rows, std::int64_t cols, std::size_t misalign) {
  const std::size_t n = static_cast<std::size_t>(rows * cols);
  Problem<T> prob(rows, cols, misalign, random_values<T>(n, 1, 0.5f, 1.5f),
                  random_values<T>(static_cast<std::size_t>(cols), 2, 0.1f, 0.5f),
                  random_values<T>(n, 3, 0.5f, 1.5f));
  const DropoutConfig config{0.4f, 31, 4};
  prob.run(Activation::relu, config);
  const auto y = prob.y.copy_to_host(), dx = prob.dx.copy_to_host();
  std::size_t kept = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const bool fwd_kept = to_float(y[misalign + i]) != 0.0f;
    ASSERT_EQ(to_float(dx[misalign + i]) != 0.0f, fwd_kept) << rows << "x" << cols << " element " << i;
    ASSERT_EQ(fwd_kept, philox_keep(config.seed, config.offset, i, config.p))
        << rows << "x" << cols << " element " << i;
    kept += fwd_kept;
  }
  EXPECT_GT(kept, 0u);
  EXPECT_LT(kept, n);
}

TEST(BiasActDropoutGpu, BackwardUsesExactlyTheForwardsMask) {
  SEQBENCH_REQUIRE_GPU();
  expect_backward_uses_forward_mask<float>(300, 1024, 0);  // vector path
  expect_backward_uses_forward_mask<float>(301, 1023, 0);  // scalar path (cols % 4 != 0)
  expect_backward_uses_forward_mask<__half>(64, 4096, 3);  // scalar path (misaligned)
  expect_backward_uses_forward_mask<__nv_bfloat16>(1000, 72, 0);
  expect_backward_uses_forward_mask<__nv_bfloat16>(7, 4097, 0);
}

// ReLU'(0) = 0 (PyTorch threshold_backward and the reference): where x = -bias exactly, dx = 0;
// elsewhere, with p = 0, dx is dy (z > 0) or 0 (z < 0), exactly.
// And NaN as PyTorch: relu(NaN) is NaN, and the gradient passes through it (threshold_backward's
// z <= 0 is false); `z > 0 ? z : 0` turned a NaN pre-activation into 0, hiding it.
TEST(BiasActDropoutGpu, ReluDerivativeAtZeroIsZero) {
  SEQBENCH_REQUIRE_GPU();
  const std::int64_t rows = 16, cols = 37;
  const std::size_t n = static_cast<std::size_t>(rows * cols);
  std::vector<float> bias = random_values<float>(static_cast<std::size_t>(cols), 5, -1.0f, 1.0f);
  std::vector<float> x = random_values<float>(n, 6, -1.0f, 1.0f);
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t c = 0; c < cols; c += 2)
      x[static_cast<std::size_t>(r * cols + c)] = -bias[static_cast<std::size_t>(c)];
    x[static_cast<std::size_t>(r * cols + (r * 3 + 1) % cols)] = std::numeric_limits<float>::quiet_NaN();
  }
  Problem<float> prob(rows, cols, 0, x, bias, random_values<float>(n, 7, 0.5f, 1.5f));
  prob.run(Activation::relu, {0.0f, 1, 2});
  const auto y = prob.y.copy_to_host(), dx = prob.dx.copy_to_host();
  for (std::size_t i = 0; i < n; ++i) {
    const float z = x[i] + bias[i % static_cast<std::size_t>(cols)];
    if (std::isnan(z)) {
      EXPECT_TRUE(std::isnan(y[i])) << "element " << i << ": relu(NaN) must stay NaN";
      EXPECT_EQ(dx[i], prob.dy[i]) << "element " << i << ": the gradient passes through NaN";
      continue;
    }
    EXPECT_EQ(y[i], z > 0.0f ? z : 0.0f) << "element " << i;
    EXPECT_EQ(dx[i], z > 0.0f ? prob.dy[i] : 0.0f) << "element " << i << " z=" << z;
  }
}

// In place (dx == dy, what the layers' FFN backward runs): dx and dbias are bitwise the
// out-of-place launch's, on the vector path, the scalar tail (cols % K != 0), a misaligned start,
// with and without the mask (p = 0 runs the mask-free instance), for every dtype and activation.
template <class T>
void expect_in_place_backward_is_out_of_place(std::int64_t rows, std::int64_t cols, std::size_t misalign,
                                              Activation act, float p, std::uint64_t seed) {
  const std::size_t n = static_cast<std::size_t>(rows * cols);
  Problem<T> prob(rows, cols, misalign, random_values<T>(n, seed, -2.0f, 2.0f),
                  random_values<T>(static_cast<std::size_t>(cols), seed + 1, -0.5f, 0.5f),
                  random_values<T>(n, seed + 2, -1.0f, 1.0f));
  const DropoutConfig config{p, seed, 12};
  prob.run(act, config);  // out of place: dx, dbias
  DeviceBuffer<T> dbias_in_place(prob.bias.size() + misalign);
  dbias_in_place.fill_bytes(0xA5);
  prob.workspace.fill_bytes(0x5A);
  T* dy = prob.dy_d.data() + misalign;
  kernels::launch_bias_act_dropout_bwd<T>(
      dy, dbias_in_place.data() + misalign, dy, prob.x_d.data() + misalign, prob.bias_d.data() + misalign,
      rows, cols, act, config, prob.workspace.data(), prob.workspace.size(), nullptr);
  SEQBENCH_CUDA_CHECK(cudaDeviceSynchronize());
  const std::string what = std::to_string(rows) + "x" + std::to_string(cols) + " misalign " +
                           std::to_string(misalign) + " " + kernels::activation_name(act) +
                           " p=" + std::to_string(p);
  // The buffers' first `misalign` elements are not the tensors' (and hold different poison).
  const auto tensor = [misalign](const DeviceBuffer<T>& b) {
    const std::vector<T> all = b.copy_to_host();
    return std::vector<T>(all.begin() + static_cast<std::ptrdiff_t>(misalign), all.end());
  };
  EXPECT_TRUE(operators::check_util::same_bits(tensor(prob.dy_d), tensor(prob.dx))) << what << ": dx";
  EXPECT_TRUE(operators::check_util::same_bits(tensor(dbias_in_place), tensor(prob.dbias)))
      << what << ": dbias";
}

TEST(BiasActDropoutGpu, InPlaceBackwardIsBitwiseTheOutOfPlaceOne) {
  SEQBENCH_REQUIRE_GPU();
  std::uint64_t seed = 900;
  for (const Activation act : {Activation::relu, Activation::gelu_erf, Activation::gelu_tanh}) {
    for (const float p : {0.0f, 0.3f}) {
      expect_in_place_backward_is_out_of_place<float>(257, 1024, 0, act, p, seed += 3);
      expect_in_place_backward_is_out_of_place<float>(33, 1023, 0, act, p, seed += 3);
      expect_in_place_backward_is_out_of_place<__half>(129, 4096, 0, act, p, seed += 3);
      expect_in_place_backward_is_out_of_place<__half>(64, 4096, 3, act, p, seed += 3);
      expect_in_place_backward_is_out_of_place<__nv_bfloat16>(1000, 72, 0, act, p, seed += 3);
      expect_in_place_backward_is_out_of_place<__nv_bfloat16>(7, 4097, 1, act, p, seed += 3);
    }
  }
}

// An empty batch: dbias = Σ over no rows = 0, written (not left poisoned).
TEST(BiasActDropoutGpu, ZeroRowsGiveAZeroBiasGradient) {
  SEQBENCH_REQUIRE_GPU();
  for (const std::int64_t cols : {1, 1000, 4097}) {
    DeviceBuffer<__nv_bfloat16> dbias(static_cast<std::size_t>(cols));
    dbias.fill_bytes(0xFF);
    kernels::launch_bias_act_dropout_bwd<__nv_bfloat16>(nullptr, dbias.data(), nullptr, nullptr, nullptr, 0,
                                                        cols, Activation::gelu_erf, {0.1f, 1, 2}, nullptr, 0,
                                                        nullptr);
    DeviceBuffer<float> sum(static_cast<std::size_t>(cols));
    sum.fill_bytes(0xFF);
    kernels::launch_column_sum<float>(sum.data(), nullptr, 0, cols, nullptr, 0, nullptr);
    SEQBENCH_CUDA_CHECK(cudaDeviceSynchronize());
    for (const auto v : dbias.copy_to_host()) ASSERT_EQ(to_float(v), 0.0f) << "cols=" << cols;
    for (const float v : sum.copy_to_host()) ASSERT_EQ(v, 0.0f) << "cols=" << cols;
  }
}

}  // namespace
}  // namespace seqbench
