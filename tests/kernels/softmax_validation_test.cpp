// kernels/softmax on the CPU: configurations (bucket, default heuristic, tuner candidates), launcher
// argument validation with fake device pointers (every launcher validates before its first CUDA
// call), the tuner's refusals and its JSON dump when empty.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "kernels/softmax.h"
#include "tests/common/expect_error.h"

namespace seqbench::kernels {
namespace {

using seqbench::testing::expect_error;

template <class T>
T* fake(std::uintptr_t slot, std::uintptr_t offset = 0) {
  return reinterpret_cast<T*>((slot << 28) + offset);
}

const std::vector<std::int64_t>& lengths() {
  static const std::vector<std::int64_t> v = {
      1,    2,    3,    7,    8,    31,   32,   33,   64,    127,   128,   500,   512,   513,    1000,
      1023, 1024, 1025, 2048, 4096, 4097, 8192, 9000, 16383, 16384, 16385, 32768, 65537, 1 << 20};
  return v;
}

TEST(SoftmaxConfig, BucketsArePowersOfTwo) {
  EXPECT_EQ(softmax_k_len_bucket(0), 1);
  EXPECT_EQ(softmax_k_len_bucket(1), 1);
  EXPECT_EQ(softmax_k_len_bucket(3), 4);
  EXPECT_EQ(softmax_k_len_bucket(1000), 1024);
  EXPECT_EQ(softmax_k_len_bucket(1024), 1024);
  EXPECT_EQ(softmax_k_len_bucket(1025), 2048);
  EXPECT_EQ(softmax_k_len_bucket(16385), 32768);
  expect_error([] { softmax_k_len_bucket(-1); }, "k_len -1 outside [0, 1073741824]");
}

TEST(SoftmaxConfig, DefaultHeuristic) {
  const SoftmaxConfig a = softmax_default_config(DType::bf16, 1000, true);
  EXPECT_EQ(a.path, SoftmaxPath::warp);
  EXPECT_EQ(a.vector, 8);
  EXPECT_EQ(a.items, 4);
  EXPECT_EQ(a.threads, 128);
  EXPECT_EQ(a.to_string(), "warp/t128/v8/i4");
  const SoftmaxConfig b = softmax_default_config(DType::bf16, 2048, true);
  EXPECT_EQ(b.path, SoftmaxPath::block);
  EXPECT_EQ(b.threads, 256);
  EXPECT_EQ(b.items, 1);
  const SoftmaxConfig c = softmax_default_config(DType::f32, 16384, true);
  EXPECT_EQ(c.path, SoftmaxPath::block);
  EXPECT_EQ(c.threads, 1024);
  EXPECT_EQ(c.items, 4);
  EXPECT_EQ(c.capacity(), 16384);
  const SoftmaxConfig d = softmax_default_config(DType::f16, 16385, true);
  EXPECT_EQ(d.path, SoftmaxPath::multipass);
  EXPECT_EQ(d.vector, 1);  // 16385 is odd
  EXPECT_EQ(softmax_default_config(DType::f32, 1, true).vector, 1);
  EXPECT_EQ(softmax_default_config(DType::f32, 1, true).items, 1);
}

TEST(SoftmaxConfig, EveryCandidateRunsTheWholeBucketAndTheDefaultIsOne) {
  for (const DType dtype : {DType::f32, DType::f16, DType::bf16}) {
    for (const std::int64_t k : lengths()) {
      for (const bool vectorizable : {false, true}) {
        SCOPED_TRACE(std::string(dtype_name(dtype)) + " k_len=" + std::to_string(k) +
                     (vectorizable ? " vec" : ""));
        const std::vector<SoftmaxConfig> cands = softmax_candidate_configs(dtype, k, vectorizable);
        ASSERT_FALSE(cands.empty());
        const SoftmaxConfig def = softmax_default_config(dtype, k, vectorizable);
        EXPECT_NE(std::find(cands.begin(), cands.end(), def), cands.end()) << def.to_string();
        const std::int64_t bucket = softmax_k_len_bucket(k);
        for (std::size_t i = 0; i < cands.size(); ++i) {
          const SoftmaxConfig& c = cands[i];
          EXPECT_NO_THROW(validate_softmax_config(c, dtype, k, vectorizable)) << c.to_string();
          EXPECT_GE(c.capacity(), bucket) << c.to_string();
          for (std::size_t j = 0; j < i; ++j) EXPECT_FALSE(cands[j] == c) << "duplicate " << c.to_string();
        }
        // Rows beyond the register paths always have the multipass fallback, and only it.
        if (k > kSoftmaxMaxBlockKLen) {
          for (const SoftmaxConfig& c : cands) EXPECT_EQ(c.path, SoftmaxPath::multipass);
        }
      }
    }
  }
}

TEST(SoftmaxConfig, ValidationNamesTheProblem) {
  SoftmaxConfig c{SoftmaxPath::warp, 128, 8, 4};
  expect_error([&] { validate_softmax_config(c, DType::bf16, 1032, true); },
               "warp/t128/v8/i4 holds 1024 elements per row, k_len is 1032");
  expect_error([&] { validate_softmax_config(c, DType::bf16, 1000, false); }, "needs k_len % 8 == 0");
  expect_error([&] { validate_softmax_config(c, DType::f32, 1000, true); }, "vector 8 must be 1 or 4");
  c = {SoftmaxPath::warp, 512, 1, 1};
  expect_error([&] { validate_softmax_config(c, DType::f32, 10, false); },
               "threads 512 must be a multiple of 32 in [32, 256]");
  c = {SoftmaxPath::block, 100, 1, 1};
  expect_error([&] { validate_softmax_config(c, DType::f32, 10, false); }, "threads 100");
  c = {SoftmaxPath::block, 256, 1, 3};
  expect_error([&] { validate_softmax_config(c, DType::f32, 10, false); }, "items 3 must be a power of two");
  c = {SoftmaxPath::block, 256, 4, 8};
  expect_error([&] { validate_softmax_config(c, DType::f32, 16, true); }, "items*vector <= 16");
  c = {SoftmaxPath::multipass, 1024, 1, 0};
  EXPECT_NO_THROW(validate_softmax_config(c, DType::f32, 1 << 30, false));
  c = {static_cast<SoftmaxPath>(3), 128, 1, 1};  // would launch nothing if it were accepted
  expect_error([&] { validate_softmax_config(c, DType::f32, 10, false); },
               "path 3 is not warp (0), block (1) or multipass (2)");
}

TEST(SoftmaxConfig, Vectorizable) {
  EXPECT_TRUE(softmax_vectorizable(DType::bf16, 64, {fake<void>(1), fake<void>(2)}));
  EXPECT_FALSE(softmax_vectorizable(DType::bf16, 63, {fake<void>(1)}));
  EXPECT_FALSE(softmax_vectorizable(DType::bf16, 64, {fake<void>(1), fake<void>(2, 2)}));
  EXPECT_TRUE(softmax_vectorizable(DType::f32, 4, {fake<void>(1)}));
}

using bf16 = __nv_bfloat16;

TEST(SoftmaxValidation, ForwardRejectsBadArguments) {
  bf16 *y = fake<bf16>(1), *x = fake<bf16>(2);
  const SoftmaxShape s{2, 4, 8, 100};
  const SoftmaxMask none{};
  const auto fwd = [&](bf16* yy, const bf16* xx, SoftmaxShape sh, float scale, SoftmaxMask m) {
    launch_softmax_forward<bf16>(yy, xx, sh, scale, m, nullptr);
  };
  expect_error(
      [&] {
        fwd(y, x, {2, -1, 8, 100}, 1.0f, none);
      },
      "softmax_forward: shape [2, -1, 8, 100] has a negative extent");
  expect_error(
      [&] {
        fwd(y, x, {2, 4, 8, (std::int64_t{1} << 30) + 1}, 1.0f, none);
      },
      "k_len 1073741825 exceeds 1073741824");
  expect_error(
      [&] {
        fwd(y, x, {1 << 20, 1 << 10, 4, 8}, 1.0f, none);
      },
      "rows = batch*heads*q_len = 1048576*1024*4 exceeds 2147483647");
  expect_error(
      [&] {
        fwd(y, x, {std::int64_t{1} << 40, std::int64_t{1} << 40, 1 << 20, 8}, 1.0f, none);
      },
      "exceeds 2147483647");
  expect_error([&] { fwd(y, x, s, NAN, none); }, "scale nan must be finite");
  expect_error([&] { fwd(y, x, s, INFINITY, none); }, "scale inf must be finite");
  expect_error([&] { fwd(nullptr, x, s, 1.0f, none); }, "softmax_forward: y is null");
  expect_error([&] { fwd(y, nullptr, s, 1.0f, none); }, "x is null");
  expect_error([&] { fwd(y, fake<bf16>(2, 1), s, 1.0f, none); }, "x (0x20000001) is not aligned to 2 bytes");
  expect_error([&] { fwd(y, y + 1, s, 1.0f, none); }, "y partially overlaps x");
  SoftmaxMask bad;
  bad.causal = true;
  bad.causal_offset = (std::int64_t{1} << 40) + 1;
  expect_error([&] { fwd(y, x, s, 1.0f, bad); }, "causal_offset 1099511627777 outside");
  bad = {};
  bad.key_lengths = fake<std::int32_t>(3, 2);
  expect_error([&] { fwd(y, x, s, 1.0f, bad); }, "key_lengths (0x30000002) is not aligned to 4 bytes");
  const SoftmaxConfig small{SoftmaxPath::warp, 128, 1, 1};
  expect_error([&] { launch_softmax_forward<bf16>(y, x, s, 1.0f, none, nullptr, &small); },
               "warp/t128/v1/i1 holds 32 elements per row, k_len is 100");
  const SoftmaxConfig vec{SoftmaxPath::warp, 128, 8, 1};
  expect_error([&] { launch_softmax_forward<bf16>(y, x, s, 1.0f, none, nullptr, &vec); },
               "needs k_len % 8 == 0");
}

TEST(SoftmaxValidation, EmptyShapesAreNoOps) {
  // Nothing to compute: no pointer is needed and no CUDA call is made.
  const SoftmaxMask none{};
  EXPECT_NO_THROW(launch_softmax_forward<float>(nullptr, nullptr, {0, 4, 8, 100}, 1.0f, none, nullptr));
  EXPECT_NO_THROW(launch_softmax_forward<float>(nullptr, nullptr, {2, 4, 8, 0}, 1.0f, none, nullptr));
  EXPECT_NO_THROW(launch_softmax_backward<float>(nullptr, nullptr, nullptr, {2, 0, 8, 10}, 1.0f, nullptr));
  EXPECT_EQ(softmax_unfused_forward_workspace_bytes(DType::f32, {0, 4, 8, 100}), 0u);
  EXPECT_EQ(softmax_unfused_backward_workspace_bytes(DType::f32, {2, 4, 8, 0}), 0u);
}

TEST(SoftmaxValidation, BackwardRejectsBadArguments) {
  bf16 *dx = fake<bf16>(1), *dy = fake<bf16>(2), *y = fake<bf16>(3);
  const SoftmaxShape s{1, 2, 3, 50};
  expect_error([&] { launch_softmax_backward<bf16>(nullptr, dy, y, s, 1.0f, nullptr); },
               "softmax_backward: dx is null");
  expect_error([&] { launch_softmax_backward<bf16>(dx, nullptr, y, s, 1.0f, nullptr); }, "dy is null");
  expect_error([&] { launch_softmax_backward<bf16>(dx, dy, nullptr, s, 1.0f, nullptr); }, "y is null");
  expect_error([&] { launch_softmax_backward<bf16>(dy + 2, dy, y, s, 1.0f, nullptr); },
               "dx partially overlaps dy");
  expect_error([&] { launch_softmax_backward<bf16>(y + 7, dy, y, s, 1.0f, nullptr); },
               "dx partially overlaps y");
  expect_error([&] { launch_softmax_backward<bf16>(dx, dy, y, s, -INFINITY, nullptr); }, "scale -inf");
}

TEST(SoftmaxValidation, UnfusedWorkspace) {
  float *y = fake<float>(1), *x = fake<float>(2);
  const SoftmaxShape s{2, 2, 2, 100};  // 8 rows: 3200 bytes of z, then 2 x 256 bytes of row scalars
  const std::size_t need = softmax_unfused_forward_workspace_bytes(DType::f32, s);
  EXPECT_EQ(need, 3328u + 256u + 256u);
  EXPECT_EQ(softmax_unfused_backward_workspace_bytes(DType::f32, s), 3328u + 256u);
  const SoftmaxMask none{};
  expect_error([&] { launch_softmax_forward_unfused<float>(y, x, s, 1.0f, none, nullptr, need, nullptr); },
               "softmax_forward_unfused: workspace is null, 3840 bytes are needed");
  expect_error(
      [&] { launch_softmax_forward_unfused<float>(y, x, s, 1.0f, none, fake<void>(3), need - 1, nullptr); },
      "workspace has 3839 bytes, 3840 are needed");
  expect_error(
      [&] { launch_softmax_forward_unfused<float>(y, x, s, 1.0f, none, fake<void>(3, 16), need, nullptr); },
      "is not aligned to 256 bytes");
  expect_error([&] { launch_softmax_backward_unfused<float>(y, x, x, s, 1.0f, nullptr, 0, nullptr); },
               "softmax_backward_unfused: workspace is null");
}

// The unfused launchers keep intermediates in the workspace while later kernels read the tensors:
// a workspace on x, y, key_lengths, dx or dy (at its start or anywhere in its needed bytes) is
// refused, as it would silently change the result (a workspace on dy gave dx off by 4e-3 in f32).
TEST(SoftmaxValidation, UnfusedWorkspaceApartFromEveryTensor) {
  float *y = fake<float>(1), *x = fake<float>(2), *dy = fake<float>(3);
  auto* lengths = fake<std::int32_t>(4);
  const SoftmaxShape s{2, 2, 2, 100};  // 3200 bytes a tensor
  const std::size_t fwd = softmax_unfused_forward_workspace_bytes(DType::f32, s);
  const std::size_t bwd = softmax_unfused_backward_workspace_bytes(DType::f32, s);
  SoftmaxMask masked;
  masked.key_lengths = lengths;
  const auto forward = [&](void* ws) {
    launch_softmax_forward_unfused<float>(y, x, s, 1.0f, masked, ws, fwd, nullptr);
  };
  const auto backward = [&](float* dx, void* ws) {
    launch_softmax_backward_unfused<float>(dx, dy, y, s, 1.0f, ws, bwd, nullptr);
  };
  expect_error([&] { forward(x); }, "softmax_forward_unfused: workspace (its first 3840 bytes) overlaps x");
  expect_error([&] { forward(fake<void>(2, 3072)); }, "overlaps x");  // the last 128 bytes of x
  expect_error([&] { forward(y); }, "overlaps y");
  expect_error([&] { forward(fake<void>(0, (1u << 28) - 3584)); }, "overlaps y");  // ends 256 B into y
  expect_error([&] { forward(lengths); }, "overlaps key_lengths");
  float* dx = fake<float>(5);
  expect_error([&] { backward(dx, dx); },
               "softmax_backward_unfused: workspace (its first 3584 bytes) overlaps dx");
  expect_error([&] { backward(dx, dy); }, "overlaps dy");
  expect_error([&] { backward(dx, fake<void>(3, 2816)); }, "overlaps dy");
  expect_error([&] { backward(dx, y); }, "overlaps y");
  // In place (dx == dy) is allowed; the workspace on both is not.
  expect_error([&] { backward(dy, dy); }, "overlaps dx");
}

TEST(SoftmaxTunerHost, RefusesInPlaceAndBadArgumentsAndStartsEmpty) {
  expect_error([] { SoftmaxTuner t(0); }, "repetitions 0 must be in [1, 1000]");
  SoftmaxTuner tuner(3);
  EXPECT_EQ(tuner.size(), 0u);
  EXPECT_EQ(tuner.to_json(), "{\"repetitions\": 3, \"entries\": []}");
  bf16* x = fake<bf16>(1);
  const SoftmaxShape s{1, 1, 4, 64};
  expect_error([&] { tuner.forward<bf16>(x, x, s, 1.0f, SoftmaxMask{}, nullptr); },
               "tuning writes y repeatedly, so it cannot run in place (y == x)");
  expect_error([&] { tuner.backward<bf16>(x, x, fake<bf16>(2), s, 1.0f, nullptr); }, "cannot run in place");
  expect_error([&] { tuner.forward<bf16>(fake<bf16>(2), nullptr, s, 1.0f, SoftmaxMask{}, nullptr); },
               "SoftmaxTuner::forward: x is null");
  EXPECT_EQ(tuner.size(), 0u);
  EXPECT_EQ(tuner.find({DType::bf16, false, true, 64}), nullptr);
}

}  // namespace
}  // namespace seqbench::kernels
