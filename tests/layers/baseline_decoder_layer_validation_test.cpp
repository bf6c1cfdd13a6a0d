// BaselineDecoderLayer without a GPU: construction and argument validation (every check before
// any CUDA call), and the one allocation at construction (the GEMM workspace, through the
// caller's allocator), on a host-memory fake allocator.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "layers/baseline_decoder_layer.h"
#include "layers/caching_allocator.h"
#include "layers/device_allocator.h"
#include "tests/common/expect_error.h"
#include "tests/layers/fake_allocators.h"
#include "tests/layers/layer_test_support.h"

namespace seqbench::layers {
namespace {

using testing::expect_error;

using namespace layer_test;
using FakeParams = FakeDecoderParams;

TEST(BaselineDecoderLayerValidation, ConfigAndParametersAreCheckedBeforeAnyAllocation) {
  HostBackend host;
  CountingAllocator counter(host);
  FakeParams f;
  LayerConfig bad = small_config();
  bad.heads = 5;  // 12 is not a multiple of 5
  expect_error([&] { BaselineDecoderLayer layer(bad, f.weights, f.grads, counter); }, "heads");
  FakeParams g;
  g.weights.cross_kv_bias = nullptr;
  g.grads.self_qkv_weight = nullptr;
  expect_error(
      [&] { BaselineDecoderLayer layer(small_config(), g.weights, g.grads, counter); },
      "BaselineDecoderLayer: null parameter pointer(s): weights.cross_kv_bias, grads.self_qkv_weight");
  EXPECT_EQ(counter.stats().allocations, 0u);
}

TEST(BaselineDecoderLayerValidation, AllocatesOnlyTheGemmWorkspaceAtConstruction) {
  expect_only_gemm_workspace_at_construction<BaselineDecoderLayer, BaselineDecoderLayerOptions, FakeParams>();
}

TEST(BaselineDecoderLayerValidation, ForwardAndBackwardArgumentsAreCheckedBeforeAnyCudaCall) {
  HostBackend host;
  FakeParams f;
  BaselineDecoderLayerOptions o;
  o.gemm_workspace_bytes = 0;
  BaselineDecoderLayer layer(small_config(), f.weights, f.grads, host, o);
  std::vector<char> buf(4096);
  void* x = buf.data();
  void* enc = buf.data() + 1024;
  void* y = buf.data() + 2048;
  // small_config: max_batch_tokens 64, max_seq_len 16, H = 12, f16.
  expect_error([&] { layer.forward(y, x, enc, 5, 16, 8, nullptr, nullptr, 1, 0, nullptr); },
               "max_batch_tokens");
  expect_error([&] { layer.forward(y, x, enc, 5, 8, 16, nullptr, nullptr, 1, 0, nullptr); },
               "max_batch_tokens");
  expect_error([&] { layer.forward(y, x, enc, 1, 17, 4, nullptr, nullptr, 1, 0, nullptr); }, "max_seq_len");
  expect_error([&] { layer.forward(y, x, enc, 1, 4, 17, nullptr, nullptr, 1, 0, nullptr); }, "max_seq_len");
  expect_error([&] { layer.forward(y, nullptr, enc, 2, 8, 4, nullptr, nullptr, 1, 0, nullptr); },
               "BaselineDecoderLayer::forward: x is null");
  expect_error([&] { layer.forward(y, x, nullptr, 2, 8, 4, nullptr, nullptr, 1, 0, nullptr); },
               "BaselineDecoderLayer::forward: encoder_out is null");
  expect_error([&] { layer.forward(nullptr, x, enc, 2, 8, 4, nullptr, nullptr, 1, 0, nullptr); },
               "BaselineDecoderLayer::forward: y is null");
  // y, x: 2·8·12 f16 = 384 bytes; encoder_out 2·4·12 f16 = 192 bytes.
  expect_error([&] { layer.forward(buf.data() + 100, x, enc, 2, 8, 4, nullptr, nullptr, 1, 0, nullptr); },
               "BaselineDecoderLayer::forward: y overlaps x or encoder_out (y, x 384 bytes, encoder_out 192 "
               "bytes)");
  expect_error([&] { layer.forward(buf.data() + 900, x, enc, 2, 8, 4, nullptr, nullptr, 1, 0, nullptr); },
               "y overlaps x or encoder_out");
  expect_error([&] { layer.forward(y, x, enc, 2, 8, 4, nullptr, nullptr, 1, UINT64_MAX - 5, nullptr); },
               "leaves no room for the 6 dropout streams");
  expect_error([&] { layer.backward(y, buf.data() + 3072, x, x, enc, nullptr); },
               "BaselineDecoderLayer::backward: no forward() to differentiate");
  EXPECT_EQ(layer.saved_bytes(), 0u);
  layer.release();  // nothing saved: a no-op
}

}  // namespace
}  // namespace seqbench::layers
