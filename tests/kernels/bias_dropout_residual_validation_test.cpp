// The bias + dropout + residual family on the CPU: workspace arithmetic and every launcher's
// argument validation (fake non-null pointers: launchers validate before any CUDA call; each
// expectation checks the message, since without a GPU a call that slipped through would still
// throw at the launch).
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <string>

#include "core/error.h"
#include "kernels/bias_dropout_residual.h"
#include "kernels/dropout_mask.h"
#include "tests/common/expect_error.h"

namespace seqbench::kernels {
namespace {

using namespace dropout_detail;

using seqbench::testing::expect_error;

template <class T>
T* fake(std::uintptr_t slot) {
  return reinterpret_cast<T*>(slot << 32);
}

TEST(BiasDropoutResidualWorkspace, IsRowBlocksTimesColsFloats) {
  for (const std::int64_t rows : {0, 1, 33, 4096, 16384}) {
    for (const std::int64_t cols : {0, 1, 1023, 1024, 4096}) {
      const RowTilePlan plan = make_row_tile_plan(rows, cols);
      EXPECT_EQ(bias_dropout_residual_bwd_workspace_bytes(rows, cols),
                static_cast<std::size_t>(plan.row_blocks * cols) * sizeof(float))
          << rows << "x" << cols;
    }
  }
  EXPECT_EQ(bias_dropout_residual_bwd_workspace_bytes(16384, 4096), 1024u * 1024u);
}

TEST(BiasDropoutResidualLaunchers, RejectBadProbabilityAndShape) {
  float* y = fake<float>(1);
  const float *x = fake<float>(2), *bias = fake<float>(3), *residual = fake<float>(4);
  for (const float p : {-1.0f, 2.0f, std::numeric_limits<float>::quiet_NaN()}) {
    expect_error(
        [&] {
          launch_bias_dropout_residual_fwd<float>(y, x, bias, residual, 4, 8, {p, 1, 2}, nullptr);
        },
        "bias_dropout_residual_fwd: dropout probability p = ");
    expect_error(
        [&] {
          launch_bias_dropout_residual_bwd<float>(y, fake<float>(5), x, 4, 8, {p, 1, 2}, fake<void>(6),
                                                  1 << 20, nullptr);
        },
        "bias_dropout_residual_bwd: dropout probability p = ");
  }
  expect_error(
      [&] {
        launch_bias_dropout_residual_fwd<float>(y, x, bias, residual, 4, -8, {0.1f, 1, 2}, nullptr);
      },
      "shape 4x-8 is negative");
  expect_error([&] { launch_residual_add<float>(y, x, residual, -4, 8, nullptr); },
               "residual_add: shape -4x8");
}

TEST(BiasDropoutResidualLaunchers, EmptyShapesLaunchNothing) {
  EXPECT_NO_THROW(launch_bias_dropout_residual_fwd<__half>(nullptr, nullptr, nullptr, nullptr, 0, 1024,
                                                           {0.1f, 1, 2}, nullptr));
  EXPECT_NO_THROW(launch_bias_dropout_residual_bwd<__half>(nullptr, nullptr, nullptr, 1024, 0, {0.1f, 1, 2},
                                                           nullptr, 0, nullptr));
  EXPECT_NO_THROW(launch_residual_add<__nv_bfloat16>(nullptr, nullptr, nullptr, 0, 0, nullptr));
}

TEST(BiasDropoutResidualLaunchers, RejectNullPointers) {
  float* y = fake<float>(1);
  const float *x = fake<float>(2), *bias = fake<float>(3), *residual = fake<float>(4);
  const DropoutConfig ok{0.1f, 1, 2};
  expect_error(
      [&] { launch_bias_dropout_residual_fwd<float>(nullptr, x, bias, residual, 4, 8, ok, nullptr); },
      "y is null");
  expect_error(
      [&] { launch_bias_dropout_residual_fwd<float>(y, nullptr, bias, residual, 4, 8, ok, nullptr); },
      "x is null");
  expect_error([&] { launch_bias_dropout_residual_fwd<float>(y, x, nullptr, residual, 4, 8, ok, nullptr); },
               "bias is null");
  expect_error([&] { launch_bias_dropout_residual_fwd<float>(y, x, bias, nullptr, 4, 8, ok, nullptr); },
               "residual is null");
  const std::size_t ws = bias_dropout_residual_bwd_workspace_bytes(4, 8);
  void* workspace = fake<void>(6);
  expect_error(
      [&] { launch_bias_dropout_residual_bwd<float>(y, nullptr, x, 4, 8, ok, workspace, ws, nullptr); },
      "dbias is null");
  expect_error(
      [&] {
        launch_bias_dropout_residual_bwd<float>(nullptr, fake<float>(5), x, 4, 8, ok, workspace, ws, nullptr);
      },
      "dx is null");
  expect_error(
      [&] {
        launch_bias_dropout_residual_bwd<float>(y, fake<float>(5), nullptr, 4, 8, ok, workspace, ws, nullptr);
      },
      "dy is null");
  expect_error([&] { launch_residual_add<float>(y, x, nullptr, 4, 8, nullptr); },
               "residual_add: residual is null");
}

TEST(BiasDropoutResidualLaunchers, RejectSmallWorkspaceAndOverlaps) {
  float* base = fake<float>(1);
  float* far = base + 100000;
  const DropoutConfig ok{0.1f, 1, 2};
  const std::size_t ws = bias_dropout_residual_bwd_workspace_bytes(1000, 1000);
  expect_error(
      [&] {
        launch_bias_dropout_residual_bwd<float>(base, far, base + 2000000, 1000, 1000, ok, far + 4096, ws / 2,
                                                nullptr);
      },
      "workspace of " + std::to_string(ws / 2) + " bytes, needs " + std::to_string(ws));
  expect_error(
      [&] { launch_bias_dropout_residual_fwd<float>(base, base + 31, far, far + 100, 4, 8, ok, nullptr); },
      "output y overlaps input x");
  expect_error(
      [&] { launch_bias_dropout_residual_fwd<float>(base, far, far + 100, base + 16, 4, 8, ok, nullptr); },
      "output y overlaps input residual");
  expect_error(
      [&] { launch_bias_dropout_residual_fwd<float>(base, far, base + 4, far + 100, 4, 8, ok, nullptr); },
      "output y overlaps input bias");
  expect_error(
      [&] {
        launch_bias_dropout_residual_bwd<float>(base, far, base + 1, 4, 8, ok, far + 100, 4096, nullptr);
      },
      "output dx overlaps input dy");
  expect_error(
      [&] {
        launch_bias_dropout_residual_bwd<float>(base, far, far + 100, 4, 8, ok, far + 2, 4096, nullptr);
      },
      "output dbias overlaps input workspace");
  expect_error(
      [&] {
        launch_bias_dropout_residual_bwd<float>(base, far, far + 100, 4, 8, ok, far + 120, 4096, nullptr);
      },
      "bias_dropout_residual_bwd: output workspace overlaps input dy");
  expect_error([&] { launch_residual_add<float>(base, far, base, 4, 8, nullptr); },
               "output y overlaps input residual");
}

}  // namespace
}  // namespace seqbench::kernels
