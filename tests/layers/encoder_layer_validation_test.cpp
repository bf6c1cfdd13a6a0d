// EncoderLayer without a GPU: construction and argument validation (every check runs before any
// CUDA call), the one planned allocation (through a host-memory fake allocator), and the layer's
// dry run (op sequence, tensor set per config, sound plan, the largest scores shape).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "core/error.h"
#include "layers/encoder_layer.h"
#include "layers/memory_planner.h"
#include "tests/common/expect_error.h"
#include "tests/layers/fake_allocators.h"
#include "tests/layers/layer_test_support.h"

namespace seqbench::layers {
namespace {

using testing::expect_error;
using testing::expect_error_all;

using namespace layer_test;
using FakeParams = FakeEncoderParams;

TEST(EncoderLayerValidation, InvalidConfigIsRefusedBeforeAnyAllocation) {
  HostBackend backend;
  CountingAllocator counter(backend);
  FakeParams params;
  LayerConfig c = small_config();
  c.hidden = 10;
  expect_error([&] { EncoderLayer layer(c, params.weights, params.grads, counter); },
               "hidden (10) must be a multiple of heads (3)");
  c = small_config();
  c.max_seq_len = 65;
  expect_error([&] { EncoderLayer layer(c, params.weights, params.grads, counter); },
               "max_seq_len (65) must not exceed max_batch_tokens (64)");
  EXPECT_EQ(counter.stats().allocations, 0u);
}

TEST(EncoderLayerValidation, NullParametersAreNamed) {
  HostBackend backend;
  CountingAllocator counter(backend);
  FakeParams params;
  params.weights.fc1_bias = nullptr;
  params.grads.qkv_weight = nullptr;
  expect_error_all([&] { EncoderLayer layer(small_config(), params.weights, params.grads, counter); },
                   {"null parameter pointer", "weights.fc1_bias", "grads.qkv_weight"});
  FakeParams ok;
  EncoderLayerOptions options;
  options.prefix = "";
  expect_error([&] { EncoderLayer layer(small_config(), ok.weights, ok.grads, counter, options); },
               "options.prefix is empty");
  EXPECT_EQ(counter.stats().allocations, 0u);
}

TEST(EncoderLayerValidation, OneAllocationOfThePlannedBlock) {
  HostBackend backend;
  CountingAllocator counter(backend);
  FakeParams params;
  {
    EncoderLayer layer(small_config(), params.weights, params.grads, counter);
    const AllocationStats s = counter.stats();
    EXPECT_EQ(s.allocations, 1u);
    EXPECT_EQ(s.bytes_allocated, layer.block_bytes());
    const std::vector<TensorLifetime>& tensors = layer.memory().tensors();
    EXPECT_LE(layer.block_bytes(), naive_bytes(tensors));
    EXPECT_GE(layer.block_bytes(), max_live_bytes(tensors, /*padded=*/false));
    EXPECT_TRUE(find_plan_violations(tensors, layer.memory().plan()).empty());
    // The GEMM workspace is planned in the block when the layer owns its Gemm.
    EXPECT_EQ(tensors.at(layer.memory().id("enc0.gemm_workspace")).bytes, kGemmWorkspaceBytes);
  }
  EXPECT_EQ(counter.stats().deallocations, 1u);
  EXPECT_EQ(counter.stats().live_bytes, 0u);
}

TEST(EncoderLayerValidation, ForwardAndBackwardArgumentsAreCheckedBeforeAnyCudaCall) {
  HostBackend backend;
  CountingAllocator counter(backend);
  FakeParams params;
  EncoderLayer layer(small_config(), params.weights, params.grads, counter);
  std::vector<char> host(1 << 16);
  void* x = host.data();
  void* y = host.data() + 8192;
  expect_error_all([&] { layer.forward(y, x, 8, 16, nullptr, 1, 0, nullptr); },
                   {"batch tokens 8 x 16 = 128", "max_batch_tokens 64"});
  expect_error_all([&] { layer.forward(y, x, 1, 17, nullptr, 1, 0, nullptr); },
                   {"seq_len 17", "max_seq_len 16"});
  expect_error([&] { layer.forward(y, x, 0, 4, nullptr, 1, 0, nullptr); }, "batch_size 0");
  expect_error([&] { layer.forward(y, nullptr, 2, 4, nullptr, 1, 0, nullptr); }, "x is null");
  expect_error([&] { layer.forward(nullptr, x, 2, 4, nullptr, 1, 0, nullptr); }, "y is null");
  // 2·4 tokens · 12 · 2 bytes = 192 bytes: y 100 bytes after x overlaps it.
  expect_error([&] { layer.forward(host.data() + 100, x, 2, 4, nullptr, 1, 0, nullptr); }, "y overlaps x");
  expect_error([&] { layer.forward(layer.memory().block(), x, 2, 4, nullptr, 1, 0, nullptr); },
               "overlaps the layer's planned block");
  expect_error([&] { layer.forward(y, x, 2, 4, nullptr, 1, UINT64_MAX - 1, nullptr); },
               "leaves no room for the 4 dropout streams");
  expect_error([&] { layer.backward(y, x, x, nullptr); }, "no forward() to differentiate");
  EXPECT_EQ(counter.stats().allocations, 1u);
}

TEST(EncoderLayerValidation, MaxScoreElementsIsTheLargestFeasibleBatchTimesLengthSquared) {
  LayerConfig c = small_config();
  EXPECT_EQ(encoder_layer_max_score_elements(c), 4u * 16u * 16u);  // B = 4, L = 16
  c.max_batch_tokens = 10;
  c.max_seq_len = 7;
  EXPECT_EQ(encoder_layer_max_score_elements(c), 2u * 5u * 5u);  // L = 5 beats L = 7 (1·49)
}

TEST(EncoderLayerValidation, DryRunFollowsTheConfig) {
  for_each_dry_run_variant([](const LayerConfig& c, Recompute recompute) {
    const bool pre = c.pre_layer_norm;
    const double attn_dropout = c.attn_dropout;
    const DryRun run = dry_run(encoder_layer_lifetimes, c, "enc3.", recompute, 4096);
    const auto& [tensors, ops, forward_ops] = run;
    const std::set<std::string> names = names_of(tensors);
    const bool pointwise = recompute == Recompute::pointwise;
    EXPECT_EQ(names.count("enc3.attn.probs_dropped"), attn_dropout > 0 ? 1u : 0u);
    expect_attention_recompute(tensors, ops, forward_ops, "enc3.attn.", attn_dropout > 0, pointwise);
    expect_ffn_recompute(tensors, ops, forward_ops, "enc3.ffn.", pointwise);
    EXPECT_EQ(names.count("enc3.attn.residual"), pre ? 0u : 1u);
    EXPECT_EQ(names.count("enc3.ffn.residual"), pre ? 0u : 1u);
    EXPECT_EQ(names.count("enc3.attn.ln_out"), pre ? 1u : 0u);
    EXPECT_EQ(names.count("enc3.ffn.d_ln_in"), pre ? 1u : 0u);
    for (const char* always : {"x", "y", "dy", "dx", "enc3.gemm_workspace", "enc3.attn.qkv_heads",
                               "enc3.attn.probs", "enc3.attn.d_probs", "enc3.ffn.ff1_raw", "enc3.d_attn_out"})
      EXPECT_EQ(names.count(always), 1u) << always;
    for (const TensorLifetime& t : tensors) {
      if (t.name == "enc3.attn.probs") {
        EXPECT_EQ(t.bytes, 1024u * 3u * 2u);  // B·L²·N fp16
      }
      if (t.name == "enc3.attn.qkv_heads") {
        EXPECT_EQ(t.bytes, 64u * 36u * 2u);
      }
      if (t.name == "enc3.ffn.ff1_raw") {
        EXPECT_EQ(t.bytes, 64u * 37u * 2u);
      }
      if (t.name == "enc3.attn.ln_mean") {
        EXPECT_EQ(t.bytes, 64u * 4u);
      }
      if (t.name == "enc3.gemm_workspace") {
        EXPECT_EQ(t.bytes, 4096u);
      }
      if (t.name == "x" || t.name == "dx") {
        EXPECT_TRUE(t.external);
      }
    }
    // Forward: 14 ops (2 LayerNorms, 6 GEMMs, split, softmax, merge, 3 epilogues) pre- and
    // post-LN alike (the LayerNorms move), + the probability dropout.
    EXPECT_EQ(forward_ops, 14 + (attn_dropout > 0 ? 1 : 0));
    for (const std::string& op : ops) EXPECT_EQ(op.rfind("enc3.", 0), 0u) << op;
    EXPECT_EQ(ops.back(), "enc3.attn.residual_add_bwd");
    EXPECT_EQ(ops.at(static_cast<std::size_t>(forward_ops)),
              pre ? "enc3.ffn.bias_dropout_residual_bwd" : "enc3.ffn.ln_bwd");
    EXPECT_NO_THROW(check_plan(tensors, plan_memory(tensors)));
  });
  // A shared Gemm: no workspace is planned.
  int dummy = 0;
  EncoderLayerOptions shared;
  shared.gemm = reinterpret_cast<Gemm*>(&dummy);  // never used by the dry run
  EXPECT_EQ(names_of(encoder_layer_lifetimes(small_config(), shared)).count("enc0.gemm_workspace"), 0u);
}

// retain_forward (a backward repeated on one forward, as the layer suite's timing does): what the
// forward keeps lives through the whole backward, and no backward op writes it in place (the
// recorder would refuse), in every dry-run variant; the layer plans it into its one block.
TEST(EncoderLayerValidation, RetainedForwardLivesThroughTheBackward) {
  for_each_dry_run_variant([](const LayerConfig& c, Recompute recompute) {
    const DryRun consumed = dry_run(encoder_layer_lifetimes, c, "enc3.", recompute, 4096);
    const DryRun retained = dry_run(encoder_layer_lifetimes, c, "enc3.", recompute, 4096, true);
    EXPECT_EQ(retained.ops, consumed.ops);
    expect_forward_retained(consumed.tensors, retained.tensors, consumed.forward_ops,
                            static_cast<int>(consumed.ops.size()));
  });
  expect_retained_block_larger<EncoderLayer, EncoderLayerOptions, FakeParams>(small_config());
}

TEST(EncoderLayerValidation, ParameterShapes) {
  const std::vector<EncoderTensorShape> shapes = encoder_layer_parameter_shapes(small_config());
  ASSERT_EQ(shapes.size(), 12u);
  std::vector<std::string> order;
  FakeParams params;
  for_each_encoder_tensor(params.weights, [&](const char* name, const void*) { order.emplace_back(name); });
  for (std::size_t i = 0; i < shapes.size(); ++i) EXPECT_EQ(shapes[i].name, order[i]);
  EXPECT_EQ(shapes[2].rows, 36u);  // qkv_weight [3H, H]
  EXPECT_EQ(shapes[2].cols, 12u);
  EXPECT_EQ(shapes[8].elements(), 37u * 12u);  // fc1 [ffn, H]
  EXPECT_EQ(shapes[10].rows, 12u);             // fc2 [H, ffn]
}

}  // namespace
}  // namespace seqbench::layers
