// DecoderLayer without a GPU: construction and argument validation (every check runs before any
// CUDA call), the one planned allocation (host-memory fake allocator), and the layer's dry run
// (op sequence, tensor set per config, cross-attention shapes, sound plan).
#include <gtest/gtest.h>

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "core/error.h"
#include "layers/decoder_layer.h"
#include "layers/memory_planner.h"
#include "tests/common/expect_error.h"
#include "tests/layers/fake_allocators.h"
#include "tests/layers/layer_test_support.h"

namespace seqbench::layers {
namespace {

using testing::expect_error;
using testing::expect_error_all;

using namespace layer_test;
using FakeParams = FakeDecoderParams;

TEST(DecoderLayerValidation, InvalidConfigAndNullParametersAreRefusedBeforeAnyAllocation) {
  HostBackend backend;
  CountingAllocator counter(backend);
  FakeParams params;
  LayerConfig c = small_config();
  c.hidden = 10;
  expect_error([&] { DecoderLayer layer(c, params.weights, params.grads, counter); },
               "hidden (10) must be a multiple of heads (3)");
  params.weights.cross_kv_bias = nullptr;
  params.grads.cross_q_weight = nullptr;
  expect_error_all([&] { DecoderLayer layer(small_config(), params.weights, params.grads, counter); },
                   {"null parameter pointer", "weights.cross_kv_bias", "grads.cross_q_weight"});
  FakeParams ok;
  DecoderLayerOptions options;
  options.prefix = "";
  expect_error([&] { DecoderLayer layer(small_config(), ok.weights, ok.grads, counter, options); },
               "options.prefix is empty");
  EXPECT_EQ(counter.stats().allocations, 0u);
}

TEST(DecoderLayerValidation, OneAllocationOfThePlannedBlock) {
  HostBackend backend;
  CountingAllocator counter(backend);
  FakeParams params;
  {
    DecoderLayer layer(small_config(), params.weights, params.grads, counter);
    EXPECT_EQ(counter.stats().allocations, 1u);
    EXPECT_EQ(counter.stats().bytes_allocated, layer.block_bytes());
    const std::vector<TensorLifetime>& tensors = layer.memory().tensors();
    EXPECT_LE(layer.block_bytes(), naive_bytes(tensors));
    EXPECT_GE(layer.block_bytes(), max_live_bytes(tensors, /*padded=*/false));
    EXPECT_TRUE(find_plan_violations(tensors, layer.memory().plan()).empty());
    EXPECT_EQ(tensors.at(layer.memory().id("dec0.gemm_workspace")).bytes, kGemmWorkspaceBytes);
  }
  EXPECT_EQ(counter.stats().deallocations, 1u);
  EXPECT_EQ(counter.stats().live_bytes, 0u);
}

TEST(DecoderLayerValidation, ForwardAndBackwardArgumentsAreCheckedBeforeAnyCudaCall) {
  HostBackend backend;
  CountingAllocator counter(backend);
  FakeParams params;
  DecoderLayer layer(small_config(), params.weights, params.grads, counter);
  std::vector<char> host(1 << 16);
  void* x = host.data();
  void* enc = host.data() + 8192;
  void* y = host.data() + 16384;
  expect_error_all([&] { layer.forward(y, x, enc, 8, 16, 4, nullptr, nullptr, 1, 0, nullptr); },
                   {"batch tokens 8 x 16 = 128", "max_batch_tokens 64"});
  // The source side is checked too: S above max_seq_len, and B·S above max_batch_tokens.
  expect_error_all([&] { layer.forward(y, x, enc, 1, 4, 17, nullptr, nullptr, 1, 0, nullptr); },
                   {"seq_len 17", "max_seq_len 16"});
  expect_error_all([&] { layer.forward(y, x, enc, 8, 4, 16, nullptr, nullptr, 1, 0, nullptr); },
                   {"batch tokens 8 x 16 = 128", "max_batch_tokens 64"});
  expect_error([&] { layer.forward(y, nullptr, enc, 2, 4, 3, nullptr, nullptr, 1, 0, nullptr); },
               "x is null");
  expect_error([&] { layer.forward(y, x, nullptr, 2, 4, 3, nullptr, nullptr, 1, 0, nullptr); },
               "encoder_out is null");
  expect_error([&] { layer.forward(nullptr, x, enc, 2, 4, 3, nullptr, nullptr, 1, 0, nullptr); },
               "y is null");
  // 2·4 tokens · 12 · 2 bytes = 192 bytes.
  expect_error([&] { layer.forward(host.data() + 100, x, enc, 2, 4, 3, nullptr, nullptr, 1, 0, nullptr); },
               "y overlaps x or encoder_out");
  expect_error(
      [&] { layer.forward(static_cast<char*>(enc) + 8, x, enc, 2, 4, 3, nullptr, nullptr, 1, 0, nullptr); },
      "y overlaps x or encoder_out");
  expect_error(
      [&] { layer.forward(layer.memory().block(), x, enc, 2, 4, 3, nullptr, nullptr, 1, 0, nullptr); },
      "overlaps the layer's planned block");
  expect_error([&] { layer.forward(y, x, enc, 2, 4, 3, nullptr, nullptr, 1, UINT64_MAX - 5, nullptr); },
               "leaves no room for the 6 dropout streams");
  expect_error([&] { layer.backward(y, enc, x, x, enc, nullptr); }, "no forward() to differentiate");
  EXPECT_EQ(counter.stats().allocations, 1u);
}

TEST(DecoderLayerValidation, DryRunFollowsTheConfig) {
  for_each_dry_run_variant([](const LayerConfig& c, Recompute recompute) {
    const bool pre = c.pre_layer_norm;
    const double attn_dropout = c.attn_dropout;
    const DryRun run = dry_run(decoder_layer_lifetimes, c, "dec2.", recompute, 4096);
    const auto& [tensors, ops, forward_ops] = run;
    const std::set<std::string> names = names_of(tensors);
    const bool pointwise = recompute == Recompute::pointwise;
    for (const char* sub : {"self.", "cross."})
      expect_attention_recompute(tensors, ops, forward_ops, std::string("dec2.") + sub, attn_dropout > 0,
                                 pointwise);
    expect_ffn_recompute(tensors, ops, forward_ops, "dec2.ffn.", pointwise);
    for (const char* sub : {"self.", "cross."}) {
      const std::string s = std::string("dec2.") + sub;
      EXPECT_EQ(names.count(s + "probs_dropped"), attn_dropout > 0 ? 1u : 0u);
      EXPECT_EQ(names.count(s + "residual"), pre ? 0u : 1u);
      EXPECT_EQ(names.count(s + "ln_out"), pre ? 1u : 0u);
    }
    for (const char* always :
         {"x", "y", "dy", "dx", "encoder_out", "d_encoder_out", "dec2.gemm_workspace", "dec2.self.qkv_heads",
          "dec2.cross.q_heads", "dec2.cross.kv_heads", "dec2.cross.d_kv", "dec2.cross.d_q_heads",
          "dec2.self_out", "dec2.cross_out", "dec2.d_self_out", "dec2.d_cross_out", "dec2.ffn.ff1_raw"})
      EXPECT_EQ(names.count(always), 1u) << always;
    EXPECT_EQ(names.count("dec2.self.kv_heads"), 0u);
    EXPECT_EQ(names.count("dec2.cross.qkv_heads"), 0u);
    for (const TensorLifetime& t : tensors) {
      if (t.name == "dec2.self.probs" || t.name == "dec2.cross.probs") {
        EXPECT_EQ(t.bytes, 1024u * 3u * 2u) << t.name;  // max B·L·S = B·L² = 1024, N = 3, fp16
      }
      if (t.name == "dec2.self.qkv_heads") {
        EXPECT_EQ(t.bytes, 64u * 36u * 2u);
      }
      if (t.name == "dec2.cross.q_heads" || t.name == "dec2.cross.q_raw") {
        EXPECT_EQ(t.bytes, 64u * 12u * 2u) << t.name;
      }
      if (t.name == "dec2.cross.kv_heads" || t.name == "dec2.cross.kv_raw" || t.name == "dec2.cross.d_kv") {
        EXPECT_EQ(t.bytes, 64u * 24u * 2u) << t.name;
      }
      if (t.name == "x" || t.name == "encoder_out" || t.name == "d_encoder_out") {
        EXPECT_TRUE(t.external) << t.name;
      }
    }
    // Forward: self-attention 9 ops (a LayerNorm, QKV GEMM, split, scores GEMM, softmax, context
    // GEMM, merge, out GEMM, bias_dropout_residual), cross-attention 11 (+ K/V GEMM and split),
    // FFN 5 (LayerNorm, 2 GEMMs, 2 epilogues); + one probability dropout per attention.
    EXPECT_EQ(forward_ops, 9 + 11 + 5 + (attn_dropout > 0 ? 2 : 0));
    for (const std::string& op : ops) EXPECT_EQ(op.rfind("dec2.", 0), 0u) << op;
    EXPECT_EQ(ops.back(), "dec2.self.residual_add_bwd");
    EXPECT_EQ(ops.at(static_cast<std::size_t>(forward_ops)),
              pre ? "dec2.ffn.bias_dropout_residual_bwd" : "dec2.ffn.ln_bwd");
    // The cross-attention's K/V backward writes the encoder output's gradient before its Q side.
    const auto at = [&](const std::string& name) { return step_of(ops, name); };
    EXPECT_GE(at("dec2.cross.kv_gemm_bwd"), 0);
    EXPECT_LT(at("dec2.cross.kv_gemm_bwd"), at("dec2.cross.q_gemm_bwd"));
    EXPECT_LT(at("dec2.cross.residual_add_bwd"), at("dec2.self.bias_dropout_residual_bwd"));
    EXPECT_NO_THROW(check_plan(tensors, plan_memory(tensors)));
  });
}

// retain_forward (layers/decoder_layer.h): what the forward keeps lives through the whole backward,
// in every dry-run variant, with the layer's own K/V projection and with external K/V heads.
TEST(DecoderLayerValidation, RetainedForwardLivesThroughTheBackward) {
  for_each_dry_run_variant([](const LayerConfig& c, Recompute recompute) {
    for (const bool external : {false, true}) {
      SCOPED_TRACE(external ? "external K/V" : "own K/V");
      DecoderLayerOptions options;
      options.prefix = "dec2.";
      options.recompute = recompute;
      options.external_kv = external;
      DryRun consumed, retained;
      consumed.tensors = decoder_layer_lifetimes(c, options, &consumed.ops, &consumed.forward_ops);
      options.retain_forward = true;
      retained.tensors = decoder_layer_lifetimes(c, options, &retained.ops, &retained.forward_ops);
      EXPECT_EQ(retained.ops, consumed.ops);
      expect_forward_retained(consumed.tensors, retained.tensors, consumed.forward_ops,
                              static_cast<int>(consumed.ops.size()));
    }
  });
  expect_retained_block_larger<DecoderLayer, DecoderLayerOptions, FakeParams>(small_config());
}

TEST(DecoderLayerValidation, ParameterShapes) {
  const std::vector<DecoderTensorShape> shapes = decoder_layer_parameter_shapes(small_config());
  ASSERT_EQ(shapes.size(), 20u);
  std::vector<std::string> order;
  FakeParams params;
  for_each_decoder_tensor(params.weights, [&](const char* name, const void*) { order.emplace_back(name); });
  for (std::size_t i = 0; i < shapes.size(); ++i) EXPECT_EQ(shapes[i].name, order[i]);
  EXPECT_EQ(shapes[2].rows, 36u);   // self_qkv_weight [3H, H]
  EXPECT_EQ(shapes[8].rows, 12u);   // cross_q_weight [H, H]
  EXPECT_EQ(shapes[10].rows, 24u);  // cross_kv_weight [2H, H]
  EXPECT_EQ(shapes[11].cols, 24u);  // cross_kv_bias [2H]
  EXPECT_EQ(shapes[16].elements(), 37u * 12u);
}

}  // namespace
}  // namespace seqbench::layers
