// The QKV bias + split / merge family on the CPU: shape validation, the workspace arithmetic of
// the deterministic bias gradient, and every launcher's argument validation with fake pointers
// (launchers validate before any CUDA call; each expectation checks the message, since without a
// GPU a call that slipped through would still throw at the launch). Also the layout contract
// against reference/attention.h: the index formula the kernels use is split_heads'.
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <string>

#include "core/error.h"
#include "kernels/dropout_mask.h"
#include "kernels/qkv_reshape.h"
#include "reference/attention.h"
#include "tests/common/expect_error.h"
#include "tests/kernels/heads_shape.h"

namespace seqbench::kernels {
namespace {

using seqbench::testing::expect_error;
using seqbench::testing::expect_error_all;

template <class T>
T* fake(std::uintptr_t slot) {
  return reinterpret_cast<T*>(slot << 32);
}

using qkv_test::shape;

TEST(HeadsShape, Accessors) {
  const HeadsShape s = shape(3, 5, 8, 1000, 3);
  EXPECT_EQ(s.rows(), 15);
  EXPECT_EQ(s.cols(), 3000);
  EXPECT_EQ(s.head_dim(), 125);
  EXPECT_EQ(s.elements(), 45000);
}

TEST(HeadsShape, RejectsBadShapes) {
  expect_error_all([] { require_heads_shape(shape(2, 3, 0, 512, 1), "op"); }, {"op: heads 0", ">= 1", "512"});
  expect_error_all([] { require_heads_shape(shape(2, 3, 3, 1000, 1), "op"); },
                   {"op: hidden 1000", "multiple of heads 3"});
  expect_error_all([] { require_heads_shape(shape(2, 3, 8, -8, 1), "op"); }, {"hidden -8", "heads 8"});
  for (const std::int64_t p : {0, 4, -1}) {
    expect_error([&] { require_heads_shape(shape(2, 3, 8, 512, p), "op"); },
                 "op: projections " + std::to_string(p) + " is outside [1, 3]");
  }
  expect_error([] { require_heads_shape(shape(-1, 3, 8, 512, 1), "op"); }, "batch -1 and len 3 must be >= 0");
  expect_error([] { require_heads_shape(shape(1, -3, 8, 512, 1), "op"); }, "len -3 must be >= 0");
  expect_error([] { require_heads_shape(shape(1, 1, 1, std::int64_t{1} << 31, 1), "op"); },
               "hidden 2147483648 > 2147483647");
  expect_error([] { require_heads_shape(shape(1, 1, 1, (std::int64_t{1} << 30) + 1, 2), "op"); },
               "cols 2147483650 > 2147483647");
  expect_error(
      [] { require_heads_shape(shape(std::int64_t{1} << 40, std::int64_t{1} << 30, 1, 8, 1), "op"); },
      "exceeds 2^62 rows");
  expect_error(
      [] { require_heads_shape(shape(std::int64_t{1} << 30, std::int64_t{1} << 30, 1, 64, 1), "op"); },
      "exceeds 2^62 elements");
  // Odd sizes are fine: H = 4097 = 17·241, heads 17, odd d, L = B = 1.
  EXPECT_NO_THROW(require_heads_shape(shape(1, 1, 17, 4097, 3), "op"));
  EXPECT_NO_THROW(require_heads_shape(shape(0, 0, 1, 0, 1), "op"));
}

// The projected side's row stride (projected_ld): 0 is packed; otherwise at least P·H, within
// the 32-bit column limit, with rows·ld <= 2^62; the span counts the gaps between rows.
TEST(HeadsShape, ProjectedLeadingDimension) {
  HeadsShape s = shape(3, 5, 8, 512, 2);
  EXPECT_EQ(s.ld(), 1024);
  EXPECT_EQ(s.projected_span(), s.elements());
  s.projected_ld = 3 * 1024;  // layer 1 of a 3-layer [rows, 3·2H] K/V projection
  EXPECT_EQ(s.ld(), 3072);
  EXPECT_EQ(s.projected_span(), 14 * 3072 + 1024);
  EXPECT_EQ(s.elements(), 15 * 1024);  // the heads side stays packed
  EXPECT_NO_THROW(require_heads_shape(s, "op"));
  s.projected_ld = 1024;  // = P·H: packed, spelled out
  EXPECT_NO_THROW(require_heads_shape(s, "op"));
  s.projected_ld = 1023;
  expect_error([&] { require_heads_shape(s, "op"); },
               "op: projected_ld 1023 is below the row length P·H = 1024 (0 means packed)");
  s.projected_ld = -1;
  expect_error([&] { require_heads_shape(s, "op"); }, "op: projected_ld -1 is below the row length");
  s.projected_ld = std::int64_t{1} << 31;
  expect_error([&] { require_heads_shape(s, "op"); }, "op: cols 2147483648 > 2147483647");
  HeadsShape big = shape(std::int64_t{1} << 20, std::int64_t{1} << 20, 1, 8, 1);
  big.projected_ld = std::int64_t{1} << 30;
  expect_error([&] { require_heads_shape(big, "op"); }, "exceeds 2^62 elements");
  EXPECT_EQ(shape(0, 5, 8, 512, 2).projected_span(), 0);
  HeadsShape empty_cols = shape(4, 5, 8, 0, 2);
  empty_cols.projected_ld = 16;
  EXPECT_EQ(empty_cols.projected_span(), 0);
  // The workspace depends on rows and P·H only, not on the stride.
  HeadsShape strided = shape(7, 9, 3, 1023, 2);
  strided.projected_ld = 5 * 2046;
  EXPECT_EQ(qkv_bias_split_bwd_workspace_bytes(strided),
            qkv_bias_split_bwd_workspace_bytes(shape(7, 9, 3, 1023, 2)));
}

// The baseline's strided copy of one projection's column block follows the row pitch too:
// [B, L, N, d] with strides (L·ld, d, ld, 1) on the projected side, packed on the heads side.
TEST(HeadsShape, StridedCopyFollowsTheRowPitch) {
  HeadsShape s = shape(3, 5, 4, 64, 2);  // d = 16, P·H = 128
  s.projected_ld = 384;
  const StridedCopy4 to_heads = heads_strided_copy(s, true);
  const std::int64_t dims[4] = {3, 4, 5, 16}, heads[4] = {4 * 5 * 16, 5 * 16, 16, 1},
                     projected[4] = {5 * 384, 16, 384, 1};
  for (int k = 0; k < 4; ++k) {
    EXPECT_EQ(to_heads.dims[k], dims[k]) << k;
    EXPECT_EQ(to_heads.out_stride[k], heads[k]) << k;
    EXPECT_EQ(to_heads.in_stride[k], projected[k]) << k;
  }
  const StridedCopy4 back = heads_strided_copy(s, false);
  for (int k = 0; k < 4; ++k) {
    EXPECT_EQ(back.in_stride[k], heads[k]) << k;
    EXPECT_EQ(back.out_stride[k], projected[k]) << k;
  }
  s.projected_ld = 0;  // packed: the pitch is P·H
  EXPECT_EQ(heads_strided_copy(s, true).in_stride[2], 128);
}

// With a stride, the overlap checks cover the projected side's whole span (gaps included), and
// every launcher refuses a bad stride before any CUDA call.
TEST(QkvReshapeLaunchers, StridedProjectedSide) {
  HeadsShape s = shape(2, 3, 2, 8, 2);  // rows 6, cols 16
  s.projected_ld = 48;                  // span 5·48 + 16 = 256 elements
  float* base = fake<float>(1);
  const float* bias = fake<float>(4);
  void* ws = fake<void>(5);
  const std::size_t need = qkv_bias_split_bwd_workspace_bytes(s);
  // heads_out right after the span: fine (nothing launches past validation without a GPU, so
  // only the refusals are checked here); one element earlier: overlap.
  expect_error([&] { launch_qkv_bias_split_fwd<float>(base + 255, base, bias, s, nullptr); },
               "qkv_bias_split_fwd: output heads_out overlaps input projected");
  expect_error([&] { launch_split_heads<float>(base + 255, base, s, nullptr); },
               "split_heads: output heads_out overlaps input projected");
  expect_error([&] { launch_merge_heads<float>(base, base + 255, s, nullptr); },
               "merge_heads: output projected overlaps input heads_in");
  expect_error(
      [&] { launch_qkv_bias_split_bwd<float>(base, fake<float>(2), base + 255, s, ws, need, nullptr); },
      "qkv_bias_split_bwd: output d_projected overlaps input d_heads");
  expect_error(
      [&] { launch_qkv_bias_split_bwd<float>(base, base + 200, fake<float>(3), s, ws, need, nullptr); },
      "qkv_bias_split_bwd: output dbias overlaps input d_projected");
  s.projected_ld = 15;
  const std::string msg = "projected_ld 15 is below the row length P·H = 16";
  expect_error([&] { launch_qkv_bias_split_fwd<float>(base + 1000, base, bias, s, nullptr); },
               "qkv_bias_split_fwd: " + msg);
  expect_error(
      [&] { launch_qkv_bias_split_bwd<float>(base, fake<float>(2), base + 1000, s, ws, 1 << 20, nullptr); },
      "qkv_bias_split_bwd: " + msg);
  expect_error([&] { launch_merge_heads<float>(base, base + 1000, s, nullptr); }, "merge_heads: " + msg);
  expect_error([&] { launch_split_heads<float>(base + 1000, base, s, nullptr); }, "split_heads: " + msg);
}

TEST(QkvBiasSplit, WorkspaceIsTheColumnPartials) {
  for (const auto& s : {shape(64, 64, 8, 512, 3), shape(7, 9, 3, 1023, 2), shape(1, 1, 1, 1, 1),
                        shape(0, 5, 8, 512, 3), shape(5, 5, 8, 0, 3)}) {
    EXPECT_EQ(qkv_bias_split_bwd_workspace_bytes(s),
              dropout_detail::bias_grad_workspace_bytes(s.rows(), s.cols()));
  }
  EXPECT_EQ(qkv_bias_split_bwd_workspace_bytes(shape(0, 5, 8, 512, 3)), 0u);
  // 16384 tokens x 3·1024 columns: 86 row blocks of 192 rows (kernels/dropout_mask.h's plan).
  EXPECT_EQ(qkv_bias_split_bwd_workspace_bytes(shape(64, 256, 16, 1024, 3)), 86u * 3072u * sizeof(float));
  expect_error([] { qkv_bias_split_bwd_workspace_bytes(shape(1, 1, 3, 4, 1)); },
               "qkv_bias_split_bwd_workspace_bytes: hidden 4 is not a non-negative multiple of heads 3");
}

// heads[p, b, h, l, j] = projected[b·L + l, p·H + h·d + j] (the header's formula) is
// reference/attention.h's split_heads of projection p's column block, and merge_heads inverts it.
TEST(HeadsLayout, MatchesTheReference) {
  const ref::Index batch = 3, len = 5, heads = 3, d = 7, hidden = heads * d, projections = 2;
  const ref::Index rows = batch * len, cols = projections * hidden;
  ref::Matrix projected(rows, cols);
  for (ref::Index i = 0; i < projected.size(); ++i) projected.data()[i] = static_cast<double>(i);
  for (ref::Index p = 0; p < projections; ++p) {
    const ref::Matrix block = projected.middleCols(p * hidden, hidden);
    const ref::Matrix split = ref::split_heads(block, batch, len, heads);
    for (ref::Index b = 0; b < batch; ++b)
      for (ref::Index h = 0; h < heads; ++h)
        for (ref::Index l = 0; l < len; ++l)
          for (ref::Index j = 0; j < d; ++j) {
            const ref::Index heads_index = (((p * batch + b) * heads + h) * len + l) * d + j;
            const ref::Index local = heads_index - p * rows * hidden;  // within projection p's block
            ASSERT_EQ(split.data()[local], projected((b * len + l), p * hidden + h * d + j));
          }
    EXPECT_EQ(ref::merge_heads(split, batch, len, heads), block);
  }
}

struct Pointers {
  float* out = fake<float>(1);
  float* dbias = fake<float>(2);
  const float* in = fake<float>(3);
  const float* bias = fake<float>(4);
  void* workspace = fake<void>(5);
};

TEST(QkvReshapeLaunchers, RejectBadShapes) {
  Pointers p;
  const HeadsShape bad = shape(2, 3, 3, 1000, 3);
  const std::string msg = "hidden 1000 is not a non-negative multiple of heads 3";
  expect_error([&] { launch_qkv_bias_split_fwd<float>(p.out, p.in, p.bias, bad, nullptr); },
               "qkv_bias_split_fwd: " + msg);
  expect_error(
      [&] { launch_qkv_bias_split_bwd<float>(p.out, p.dbias, p.in, bad, p.workspace, 1 << 20, nullptr); },
      "qkv_bias_split_bwd: " + msg);
  expect_error([&] { launch_merge_heads<float>(p.out, p.in, bad, nullptr); }, "merge_heads: " + msg);
  expect_error([&] { launch_split_heads<float>(p.out, p.in, bad, nullptr); }, "split_heads: " + msg);
  expect_error([&] { launch_split_heads<float>(p.out, p.in, shape(2, 3, 8, 512, 4), nullptr); },
               "split_heads: projections 4 is outside [1, 3]");
  expect_error([&] { launch_merge_heads<__half>(nullptr, nullptr, shape(2, 3, 0, 512, 1), nullptr); },
               "merge_heads: heads 0 must be >= 1");
}

TEST(QkvReshapeLaunchers, EmptyShapesLaunchNothing) {
  for (const auto& s : {shape(0, 5, 8, 512, 3), shape(5, 0, 8, 512, 3), shape(5, 5, 8, 0, 3)}) {
    EXPECT_NO_THROW(launch_qkv_bias_split_fwd<float>(nullptr, nullptr, nullptr, s, nullptr));
    EXPECT_NO_THROW(launch_merge_heads<__nv_bfloat16>(nullptr, nullptr, s, nullptr));
    EXPECT_NO_THROW(launch_split_heads<__half>(nullptr, nullptr, s, nullptr));
  }
  EXPECT_NO_THROW(
      launch_qkv_bias_split_bwd<float>(nullptr, nullptr, nullptr, shape(5, 5, 8, 0, 3), nullptr, 0, nullptr));
  StridedCopy4 c;
  c.dims[0] = 4;  // dims[1..3] = 0
  EXPECT_NO_THROW(launch_strided_copy<float>(nullptr, nullptr, c, nullptr));
}

TEST(QkvReshapeLaunchers, RejectNullPointers) {
  Pointers p;
  const HeadsShape s = shape(2, 3, 8, 512, 3);
  const std::size_t ws = qkv_bias_split_bwd_workspace_bytes(s);
  expect_error([&] { launch_qkv_bias_split_fwd<float>(nullptr, p.in, p.bias, s, nullptr); },
               "qkv_bias_split_fwd: heads_out is null");
  expect_error([&] { launch_qkv_bias_split_fwd<float>(p.out, nullptr, p.bias, s, nullptr); },
               "qkv_bias_split_fwd: projected is null");
  expect_error([&] { launch_qkv_bias_split_fwd<float>(p.out, p.in, nullptr, s, nullptr); },
               "qkv_bias_split_fwd: bias is null");
  expect_error([&] { launch_qkv_bias_split_bwd<float>(p.out, nullptr, p.in, s, p.workspace, ws, nullptr); },
               "qkv_bias_split_bwd: dbias is null");
  expect_error([&] { launch_qkv_bias_split_bwd<float>(nullptr, p.dbias, p.in, s, p.workspace, ws, nullptr); },
               "qkv_bias_split_bwd: d_projected is null");
  expect_error(
      [&] { launch_qkv_bias_split_bwd<float>(p.out, p.dbias, nullptr, s, p.workspace, ws, nullptr); },
      "qkv_bias_split_bwd: d_heads is null");
  // rows = 0: dbias (zeros) is still written, so it must exist.
  expect_error(
      [&] {
        launch_qkv_bias_split_bwd<float>(nullptr, nullptr, nullptr, shape(0, 3, 8, 512, 3), nullptr, 0,
                                         nullptr);
      },
      "qkv_bias_split_bwd: dbias is null");
  expect_error([&] { launch_merge_heads<float>(nullptr, p.in, s, nullptr); },
               "merge_heads: projected is null");
  expect_error([&] { launch_merge_heads<float>(p.out, nullptr, s, nullptr); },
               "merge_heads: heads_in is null");
  expect_error([&] { launch_split_heads<float>(nullptr, p.in, s, nullptr); },
               "split_heads: heads_out is null");
  expect_error([&] { launch_split_heads<float>(p.out, nullptr, s, nullptr); },
               "split_heads: projected is null");
}

TEST(QkvReshapeLaunchers, RejectSmallOrMisalignedWorkspace) {
  Pointers p;
  const HeadsShape s = shape(64, 64, 8, 512, 3);
  const std::size_t ws = qkv_bias_split_bwd_workspace_bytes(s);
  ASSERT_GT(ws, 0u);
  expect_error(
      [&] { launch_qkv_bias_split_bwd<float>(p.out, p.dbias, p.in, s, p.workspace, ws - 1, nullptr); },
      "qkv_bias_split_bwd: workspace of " + std::to_string(ws - 1) + " bytes, needs " + std::to_string(ws));
  expect_error([&] { launch_qkv_bias_split_bwd<float>(p.out, p.dbias, p.in, s, nullptr, ws, nullptr); },
               "workspace is null");
  expect_error(
      [&] {
        launch_qkv_bias_split_bwd<float>(p.out, p.dbias, p.in, s, static_cast<char*>(p.workspace) + 2, ws,
                                         nullptr);
      },
      "workspace is not 4-byte aligned");
}

TEST(QkvReshapeLaunchers, RejectOverlaps) {
  float* base = fake<float>(1);
  float* far = base + 100000;
  const HeadsShape s = shape(2, 3, 2, 8, 3);  // 6 rows x 24 columns = 144 elements
  expect_error([&] { launch_qkv_bias_split_fwd<float>(base, base + 143, far, s, nullptr); },
               "qkv_bias_split_fwd: output heads_out overlaps input projected");
  expect_error([&] { launch_qkv_bias_split_fwd<float>(base, far, base + 100, s, nullptr); },
               "output heads_out overlaps input bias");
  const std::size_t ws = qkv_bias_split_bwd_workspace_bytes(s);
  expect_error([&] { launch_qkv_bias_split_bwd<float>(base, far, base + 10, s, far + 1000, ws, nullptr); },
               "output d_projected overlaps input d_heads");
  expect_error([&] { launch_qkv_bias_split_bwd<float>(base, far, far + 1000, s, base + 8, ws, nullptr); },
               "output d_projected overlaps input workspace");
  expect_error([&] { launch_qkv_bias_split_bwd<float>(base, base + 140, far + 1000, s, far, ws, nullptr); },
               "output dbias overlaps input d_projected");
  expect_error(
      [&] { launch_qkv_bias_split_bwd<float>(base, far + 1000 + 120, far + 1000, s, far, ws, nullptr); },
      "output dbias overlaps input d_heads");
  expect_error([&] { launch_qkv_bias_split_bwd<float>(base, far + 4, far + 1000, s, far, ws, nullptr); },
               "output dbias overlaps input workspace");
  expect_error([&] { launch_qkv_bias_split_bwd<float>(base, far, far + 1000, s, far + 1100, ws, nullptr); },
               "qkv_bias_split_bwd: output workspace overlaps input d_heads");
  expect_error([&] { launch_merge_heads<float>(base + 1, base, s, nullptr); },
               "merge_heads: output projected overlaps input heads_in");
  expect_error([&] { launch_split_heads<float>(base, base, s, nullptr); },
               "split_heads: output heads_out overlaps input projected");
}

StridedCopy4 copy4(std::int64_t d0, std::int64_t d1, std::int64_t d2, std::int64_t d3,
                   std::initializer_list<std::int64_t> out, std::initializer_list<std::int64_t> in) {
  StridedCopy4 c;
  c.dims[0] = d0;
  c.dims[1] = d1;
  c.dims[2] = d2;
  c.dims[3] = d3;
  int k = 0;
  for (const std::int64_t s : out) c.out_stride[k++] = s;
  k = 0;
  for (const std::int64_t s : in) c.in_stride[k++] = s;
  return c;
}

TEST(StridedCopy, RejectsBadArguments) {
  float* base = fake<float>(1);
  float* far = base + 100000;
  // [2, 3, 4, 5] transposed 0213: out contiguous [2, 4, 3, 5] written as (i0, i1, i2, i3).
  const StridedCopy4 ok = copy4(2, 3, 4, 5, {60, 5, 15, 1}, {60, 20, 5, 1});
  expect_error([&] { launch_strided_copy<float>(nullptr, far, ok, nullptr); }, "strided_copy: out is null");
  expect_error([&] { launch_strided_copy<float>(base, nullptr, ok, nullptr); }, "strided_copy: in is null");
  expect_error([&] { launch_strided_copy<float>(base, base + 119, ok, nullptr); },
               "strided_copy: output out overlaps input in");
  expect_error(
      [&] {
        launch_strided_copy<float>(base, far, copy4(2, -3, 4, 5, {60, 5, 15, 1}, {1, 1, 1, 1}), nullptr);
      },
      "dims[1] = -3");
  expect_error(
      [&] {
        launch_strided_copy<float>(base, far, copy4(2, 3, 4, 5, {60, 5, -15, 1}, {1, 1, 1, 1}), nullptr);
      },
      "out_stride[2] = -15");
  // Two indices, one element: a broadcast write, and equal strides.
  expect_error(
      [&] {
        launch_strided_copy<float>(base, far, copy4(2, 3, 4, 5, {60, 5, 0, 1}, {60, 20, 5, 1}), nullptr);
      },
      "out_stride[2] = 0 makes distinct indices write the same element");
  expect_error(
      [&] {
        launch_strided_copy<float>(base, far, copy4(2, 3, 4, 5, {60, 5, 5, 1}, {60, 20, 5, 1}), nullptr);
      },
      "out_stride[2] = 5 makes distinct indices write the same element (needs > 14)");
  expect_error(
      [&] {
        launch_strided_copy<float>(base, far, copy4(2, 3, 4, 5, {60, 20, 5, 2}, {60, 20, 5, 1}), nullptr);
      },
      "out_stride[2] = 5 makes distinct indices write the same element (needs > 8)");
  const std::int64_t big = std::int64_t{1} << 31;
  expect_error(
      [&] {
        launch_strided_copy<float>(base, far, copy4(big, big, 2, 1, {1, 1, 1, 1}, {1, 1, 1, 1}), nullptr);
      },
      "exceed 2^62 elements");
  expect_error(
      [&] {
        launch_strided_copy<float>(
            base, far, copy4(3, 1, 1, 1, {std::int64_t{1} << 60, 1, 1, 1}, {1, 1, 1, 1}), nullptr);
      },
      "out offset (dims[0] - 1)·stride = 2·1152921504606846976 exceeds 2^58 elements");
  // An axis of extent 1 may have any stride (it is never stepped): validation gets as far as the
  // null pointer.
  expect_error(
      [&] {
        launch_strided_copy<float>(nullptr, far, copy4(1, 7, 1, 5, {0, 5, 0, 1}, {0, 0, 0, 0}), nullptr);
      },
      "strided_copy: out is null");
}

}  // namespace
}  // namespace seqbench::kernels
