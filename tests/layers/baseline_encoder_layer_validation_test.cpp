// BaselineEncoderLayer without a GPU: construction and argument validation (every check before
// any CUDA call), and the one allocation at construction (the GEMM workspace, through the
// caller's allocator), on a host-memory fake allocator.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "layers/baseline_encoder_layer.h"
#include "layers/caching_allocator.h"
#include "layers/device_allocator.h"
#include "tests/common/expect_error.h"
#include "tests/layers/fake_allocators.h"
#include "tests/layers/layer_test_support.h"

namespace seqbench::layers {
namespace {

using testing::expect_error;

using namespace layer_test;
using FakeParams = FakeEncoderParams;

TEST(BaselineEncoderLayerValidation, ConfigAndParametersAreCheckedBeforeAnyAllocation) {
  HostBackend host;
  CountingAllocator counter(host);
  FakeParams f;
  LayerConfig bad = small_config();
  bad.heads = 5;  // 12 is not a multiple of 5
  expect_error([&] { BaselineEncoderLayer layer(bad, f.weights, f.grads, counter); }, "heads");
  FakeParams g;
  g.weights.fc1_bias = nullptr;
  g.grads.qkv_weight = nullptr;
  expect_error([&] { BaselineEncoderLayer layer(small_config(), g.weights, g.grads, counter); },
               "BaselineEncoderLayer: null parameter pointer(s): weights.fc1_bias, grads.qkv_weight");
  EXPECT_EQ(counter.stats().allocations, 0u);
}

TEST(BaselineEncoderLayerValidation, AllocatesOnlyTheGemmWorkspaceAtConstruction) {
  expect_only_gemm_workspace_at_construction<BaselineEncoderLayer, BaselineEncoderLayerOptions, FakeParams>();
}

TEST(BaselineEncoderLayerValidation, ForwardAndBackwardArgumentsAreCheckedBeforeAnyCudaCall) {
  HostBackend host;
  FakeParams f;
  BaselineEncoderLayerOptions o;
  o.gemm_workspace_bytes = 0;
  BaselineEncoderLayer layer(small_config(), f.weights, f.grads, host, o);
  std::vector<char> buf(4096);
  void* x = buf.data();
  void* y = buf.data() + 2048;
  expect_error([&] { layer.forward(y, x, 5, 16, nullptr, 1, 0, nullptr); }, "max_batch_tokens");
  expect_error([&] { layer.forward(y, x, 1, 17, nullptr, 1, 0, nullptr); }, "max_seq_len");
  expect_error([&] { layer.forward(y, nullptr, 2, 8, nullptr, 1, 0, nullptr); },
               "BaselineEncoderLayer::forward: x is null");
  expect_error([&] { layer.forward(nullptr, x, 2, 8, nullptr, 1, 0, nullptr); },
               "BaselineEncoderLayer::forward: y is null");
  // 2·8·12 f16 = 384 bytes: y at x + 100 overlaps.
  expect_error([&] { layer.forward(buf.data() + 100, x, 2, 8, nullptr, 1, 0, nullptr); },
               "BaselineEncoderLayer::forward: y overlaps x (384 bytes each)");
  expect_error([&] { layer.forward(y, x, 2, 8, nullptr, 1, UINT64_MAX - 3, nullptr); },
               "leaves no room for the 4 dropout streams");
  expect_error([&] { layer.backward(y, x, x, nullptr); },
               "BaselineEncoderLayer::backward: no forward() to differentiate");
  EXPECT_EQ(layer.saved_bytes(), 0u);
  layer.release();  // nothing saved: a no-op
}

}  // namespace
}  // namespace seqbench::layers
