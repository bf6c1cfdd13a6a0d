// The bias + activation + dropout family on the CPU: the row-tile plan and the workspace
// arithmetic of the deterministic bias gradient, and every launcher's argument validation
// (fake non-null pointers: launchers validate before any CUDA call; each expectation checks the
// message, since without a GPU a call that slipped through would still throw at the launch).
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <string>
#include <utility>

#include "core/error.h"
#include "kernels/bias_act_dropout.h"
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

// The plan is a function of the shape only, covers every row exactly once, and keeps grid.y and
// the partials small.
TEST(RowTilePlan, CoversEveryRowWithBoundedRowBlocks) {
  for (const std::int64_t rows : {1, 2, 7, 8, 31, 32, 33, 1000, 4096, 4097, 16384, 100000, 1 << 24}) {
    for (const std::int64_t cols : {1, 3, 127, 256, 1000, 1024, 4096, 4097, 300000}) {
      const RowTilePlan plan = make_row_tile_plan(rows, cols);
      EXPECT_EQ(plan.rows_per_block % kTileRows, 0) << rows << "x" << cols;
      EXPECT_GE(plan.rows_per_block, kMinRowsPerBlock) << rows << "x" << cols;
      EXPECT_GE(plan.row_blocks * plan.rows_per_block, rows) << rows << "x" << cols;
      EXPECT_LT((plan.row_blocks - 1) * plan.rows_per_block, rows) << rows << "x" << cols;
      EXPECT_LE(plan.row_blocks, kTargetBlocks) << rows << "x" << cols;
      EXPECT_EQ(bias_act_dropout_bwd_workspace_bytes(rows, cols),
                static_cast<std::size_t>(plan.row_blocks * cols) * sizeof(float));
      EXPECT_EQ(column_sum_workspace_bytes(rows, cols), bias_act_dropout_bwd_workspace_bytes(rows, cols));
    }
  }
}

// The suite's shapes (kernels/NOTES-dropout-bias.md quotes these numbers).
TEST(RowTilePlan, TransformerShapes) {
  RowTilePlan plan = make_row_tile_plan(4096, 1024);
  EXPECT_EQ(plan.rows_per_block, 32);
  EXPECT_EQ(plan.row_blocks, 128);
  EXPECT_EQ(bias_act_dropout_bwd_workspace_bytes(4096, 1024), 512u * 1024u);
  plan = make_row_tile_plan(16384, 4096);
  EXPECT_EQ(plan.rows_per_block, 256);
  EXPECT_EQ(plan.row_blocks, 64);
  EXPECT_EQ(bias_act_dropout_bwd_workspace_bytes(16384, 4096), 1024u * 1024u);
  plan = make_row_tile_plan(16384, 1024);
  EXPECT_EQ(plan.rows_per_block, 64);
  EXPECT_EQ(plan.row_blocks, 256);
  plan = make_row_tile_plan(4096, 4096);
  EXPECT_EQ(plan.rows_per_block, 64);
  EXPECT_EQ(plan.row_blocks, 64);
}

TEST(RowTilePlan, EmptyShapesNeedNoWorkspace) {
  EXPECT_EQ(make_row_tile_plan(0, 1024).row_blocks, 0);
  EXPECT_EQ(make_row_tile_plan(1024, 0).row_blocks, 0);
  EXPECT_EQ(bias_act_dropout_bwd_workspace_bytes(0, 1024), 0u);
  EXPECT_EQ(bias_act_dropout_bwd_workspace_bytes(1024, 0), 0u);
}

TEST(Activation, Names) {
  EXPECT_STREQ(activation_name(Activation::relu), "relu");
  EXPECT_STREQ(activation_name(Activation::gelu_erf), "gelu_erf");
  EXPECT_STREQ(activation_name(Activation::gelu_tanh), "gelu_tanh");
}

struct Pointers {
  float* out = fake<float>(1);
  float* dbias = fake<float>(2);
  const float* in0 = fake<float>(3);
  const float* in1 = fake<float>(4);
  const float* bias = fake<float>(5);
  void* workspace = fake<void>(6);
};

TEST(BiasActDropoutLaunchers, RejectBadActivationProbabilityAndShape) {
  Pointers p;
  const DropoutConfig ok{0.1f, 1, 2};
  const auto bad_act = static_cast<Activation>(7);
  expect_error([&] { launch_bias_act_dropout_fwd<float>(p.out, p.in0, p.bias, 4, 8, bad_act, ok, nullptr); },
               "bias_act_dropout_fwd: unknown activation 7");
  expect_error([&] { launch_activation_fwd<float>(p.out, p.in0, 4, 8, bad_act, nullptr); },
               "unknown activation 7");
  expect_error([&] { launch_activation_bwd<float>(p.out, p.in0, p.in1, 4, 8, bad_act, nullptr); },
               "unknown activation 7");
  for (const float bad_p : {-0.5f, 1.01f, std::numeric_limits<float>::quiet_NaN()}) {
    expect_error(
        [&] {
          launch_bias_act_dropout_fwd<float>(p.out, p.in0, p.bias, 4, 8, Activation::relu, {bad_p, 1, 2},
                                             nullptr);
        },
        "bias_act_dropout_fwd: dropout probability p = ");
    expect_error(
        [&] {
          launch_bias_act_dropout_bwd<float>(p.out, p.dbias, p.in0, p.in1, p.bias, 4, 8, Activation::relu,
                                             {bad_p, 1, 2}, p.workspace, 1 << 20, nullptr);
        },
        "bias_act_dropout_bwd: dropout probability p = ");
  }
  expect_error(
      [&] { launch_bias_act_dropout_fwd<float>(p.out, p.in0, p.bias, -1, 8, Activation::relu, ok, nullptr); },
      "shape -1x8 is negative");
  expect_error(
      [&] {
        launch_bias_act_dropout_fwd<float>(p.out, p.in0, p.bias, 4, std::int64_t{1} << 31, Activation::relu,
                                           ok, nullptr);
      },
      "cols 2147483648 > 2147483647");
  expect_error(
      [&] {
        launch_bias_act_dropout_fwd<float>(p.out, p.in0, p.bias, std::int64_t{1} << 40, std::int64_t{1} << 30,
                                           Activation::relu, ok, nullptr);
      },
      "exceeds 2^62 elements");
}

TEST(BiasActDropoutLaunchers, EmptyShapesLaunchNothing) {
  const DropoutConfig ok{0.1f, 1, 2};
  EXPECT_NO_THROW(
      launch_bias_act_dropout_fwd<float>(nullptr, nullptr, nullptr, 0, 8, Activation::relu, ok, nullptr));
  EXPECT_NO_THROW(
      launch_bias_act_dropout_fwd<float>(nullptr, nullptr, nullptr, 8, 0, Activation::relu, ok, nullptr));
  EXPECT_NO_THROW(launch_bias_act_dropout_bwd<float>(nullptr, nullptr, nullptr, nullptr, nullptr, 8, 0,
                                                     Activation::gelu_erf, ok, nullptr, 0, nullptr));
  EXPECT_NO_THROW(launch_bias_add<float>(nullptr, nullptr, nullptr, 0, 0, nullptr));
  EXPECT_NO_THROW(launch_column_sum<float>(nullptr, nullptr, 5, 0, nullptr, 0, nullptr));
}

TEST(BiasActDropoutLaunchers, RejectNullPointers) {
  Pointers p;
  const DropoutConfig ok{0.1f, 1, 2};
  const Activation a = Activation::gelu_tanh;
  expect_error([&] { launch_bias_act_dropout_fwd<float>(nullptr, p.in0, p.bias, 4, 8, a, ok, nullptr); },
               "y is null");
  expect_error([&] { launch_bias_act_dropout_fwd<float>(p.out, nullptr, p.bias, 4, 8, a, ok, nullptr); },
               "x is null");
  expect_error([&] { launch_bias_act_dropout_fwd<float>(p.out, p.in0, nullptr, 4, 8, a, ok, nullptr); },
               "bias is null");
  const std::size_t ws = bias_act_dropout_bwd_workspace_bytes(4, 8);
  expect_error(
      [&] {
        launch_bias_act_dropout_bwd<float>(p.out, nullptr, p.in0, p.in1, p.bias, 4, 8, a, ok, p.workspace, ws,
                                           nullptr);
      },
      "dbias is null");
  expect_error(
      [&] {
        launch_bias_act_dropout_bwd<float>(nullptr, p.dbias, p.in0, p.in1, p.bias, 4, 8, a, ok, p.workspace,
                                           ws, nullptr);
      },
      "dx is null");
  expect_error(
      [&] {
        launch_bias_act_dropout_bwd<float>(p.out, p.dbias, nullptr, p.in1, p.bias, 4, 8, a, ok, p.workspace,
                                           ws, nullptr);
      },
      "dy is null");
  expect_error(
      [&] {
        launch_bias_act_dropout_bwd<float>(p.out, p.dbias, p.in0, nullptr, p.bias, 4, 8, a, ok, p.workspace,
                                           ws, nullptr);
      },
      "x is null");
  expect_error(
      [&] {
        launch_bias_act_dropout_bwd<float>(p.out, p.dbias, p.in0, p.in1, nullptr, 4, 8, a, ok, p.workspace,
                                           ws, nullptr);
      },
      "bias is null");
  // rows = 0: dbias (zeros) is still written, so it must exist.
  expect_error(
      [&] {
        launch_bias_act_dropout_bwd<float>(nullptr, nullptr, nullptr, nullptr, nullptr, 0, 8, a, ok, nullptr,
                                           0, nullptr);
      },
      "dbias is null");
  expect_error([&] { launch_bias_add<float>(p.out, p.in0, nullptr, 4, 8, nullptr); },
               "bias_add: bias is null");
  expect_error([&] { launch_activation_bwd<float>(p.out, p.in0, nullptr, 4, 8, a, nullptr); },
               "activation_bwd: z is null");
  expect_error([&] { launch_column_sum<float>(nullptr, p.in0, 4, 8, p.workspace, ws, nullptr); },
               "column_sum: sum is null");
}

TEST(BiasActDropoutLaunchers, RejectSmallOrMisalignedWorkspace) {
  Pointers p;
  const DropoutConfig ok{0.1f, 1, 2};
  const std::size_t ws = bias_act_dropout_bwd_workspace_bytes(4096, 1024);
  ASSERT_GT(ws, 0u);
  expect_error(
      [&] {
        launch_bias_act_dropout_bwd<float>(p.out, p.dbias, p.in0, p.in1, p.bias, 4096, 1024, Activation::relu,
                                           ok, p.workspace, ws - 1, nullptr);
      },
      "workspace of " + std::to_string(ws - 1) + " bytes, needs " + std::to_string(ws));
  expect_error(
      [&] {
        launch_bias_act_dropout_bwd<float>(p.out, p.dbias, p.in0, p.in1, p.bias, 4096, 1024, Activation::relu,
                                           ok, nullptr, ws, nullptr);
      },
      "workspace is null");
  expect_error(
      [&] {
        launch_bias_act_dropout_bwd<float>(p.out, p.dbias, p.in0, p.in1, p.bias, 4096, 1024, Activation::relu,
                                           ok, static_cast<char*>(p.workspace) + 2, ws, nullptr);
      },
      "workspace is not 4-byte aligned");
  expect_error([&] { launch_column_sum<float>(p.out, p.in0, 4096, 1024, p.workspace, 100, nullptr); },
               "column_sum: workspace of 100 bytes, needs " + std::to_string(ws));
}

TEST(BiasActDropoutLaunchers, RejectOverlaps) {
  float* base = fake<float>(1);
  const DropoutConfig ok{0.1f, 1, 2};
  const Activation a = Activation::relu;
  const std::int64_t rows = 4, cols = 8;  // 32 floats
  expect_error(
      [&] { launch_bias_act_dropout_fwd<float>(base, base + 16, base + 100, rows, cols, a, ok, nullptr); },
      "output y overlaps input x");
  expect_error(
      [&] { launch_bias_act_dropout_fwd<float>(base, base + 100, base + 31, rows, cols, a, ok, nullptr); },
      "output y overlaps input bias");
  const std::size_t ws = bias_act_dropout_bwd_workspace_bytes(rows, cols);
  auto* far = base + 1000;
  // dx == dy (in place) is allowed; dx overlapping dy without being it is not.
  for (float* dy : {base + 1, base + 31, base - 31}) {
    expect_error(
        [&] {
          launch_bias_act_dropout_bwd<float>(base, far, dy, far + 100, far + 200, rows, cols, a, ok,
                                             far + 300, ws, nullptr);
        },
        "bias_act_dropout_bwd: output dx overlaps input dy without being it (in place means dx == dy)");
  }
  // In place, dx (= dy) must still be disjoint from x.
  expect_error(
      [&] {
        launch_bias_act_dropout_bwd<float>(base, far, base, base + 16, far + 200, rows, cols, a, ok,
                                           far + 300, ws, nullptr);
      },
      "output dx overlaps input x");
  expect_error(
      [&] {
        launch_bias_act_dropout_bwd<float>(base, far, far + 100, far + 200, far + 300, rows, cols, a, ok,
                                           base + 8, ws, nullptr);
      },
      "output dx overlaps input workspace");
  expect_error(
      [&] {
        launch_bias_act_dropout_bwd<float>(base, far, far + 100, far + 200, far + 300, rows, cols, a, ok,
                                           far + 4, ws, nullptr);
      },
      "output dbias overlaps input workspace");
  // The workspace (written by the first kernel) must not share a byte with any input.
  for (const auto& [at, name] :
       {std::pair<float*, const char*>{far + 96, "dy"}, {far + 196, "x"}, {far + 302, "bias"}}) {
    expect_error(
        [&] {
          launch_bias_act_dropout_bwd<float>(base, far, far + 100, far + 200, far + 300, rows, cols, a, ok,
                                             at, ws, nullptr);
        },
        std::string("bias_act_dropout_bwd: output workspace overlaps input ") + name);
  }
  expect_error([&] { launch_column_sum<float>(far, base, rows, cols, base + 16, ws, nullptr); },
               "column_sum: output workspace overlaps input x");
}

}  // namespace
}  // namespace seqbench::kernels
