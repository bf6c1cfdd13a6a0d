// EncoderStack without a GPU: its dry run (a layer's ops and tensors exactly as an EncoderLayer
// records them, layers in forward then reverse order, the hidden states between layers), the one
// planned allocation, the memory it saves over separate layers, and argument validation (every
// check runs before any CUDA call).
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "core/error.h"
#include "layers/config.h"
#include "layers/encoder_layer.h"
#include "layers/encoder_stack.h"
#include "layers/memory_planner.h"
#include "tests/common/expect_error.h"
#include "tests/layers/fake_allocators.h"
#include "tests/layers/layer_test_support.h"

namespace seqbench::layers {
namespace {

using testing::expect_error;
using testing::expect_error_all;

using namespace layer_test;

// The ops of an EncoderLayer with prefix "enc<i>." (its forward, its backward).
struct LayerOps {
  std::vector<std::string> forward, backward;
};
LayerOps layer_ops(const LayerConfig& c, int i, Recompute recompute) {
  const DryRun d = dry_run(encoder_layer_lifetimes, c, "enc" + std::to_string(i) + ".", recompute);
  LayerOps r;
  r.forward.assign(d.ops.begin(), d.ops.begin() + d.forward_ops);
  r.backward.assign(d.ops.begin() + d.forward_ops, d.ops.end());
  return r;
}

const TensorLifetime& find(const std::vector<TensorLifetime>& tensors, const std::string& name) {
  for (const TensorLifetime& t : tensors)
    if (t.name == name) return t;
  SEQBENCH_FAIL("no tensor " << name);
}

TEST(EncoderStackValidation, OpsAreTheLayersForwardsThenTheirBackwardsInReverse) {
  for_each_dry_run_variant([](const LayerConfig& c, Recompute recompute) {
    const int n = 3;
    std::vector<std::string> ops;
    EncoderStackSteps steps;
    EncoderStackOptions options;
    options.recompute = recompute;
    const std::vector<TensorLifetime> tensors = encoder_stack_lifetimes(c, n, options, &ops, &steps);
    std::vector<std::string> want;
    for (int i = 0; i < n; ++i) {
      EXPECT_EQ(steps.forward_start[static_cast<std::size_t>(i)], static_cast<int>(want.size()));
      const LayerOps l = layer_ops(c, i, recompute);
      want.insert(want.end(), l.forward.begin(), l.forward.end());
    }
    EXPECT_EQ(steps.forward_steps, static_cast<int>(want.size()));
    for (int i = n - 1; i >= 0; --i) {
      EXPECT_EQ(steps.backward_start[static_cast<std::size_t>(i)], static_cast<int>(want.size()));
      const LayerOps l = layer_ops(c, i, recompute);
      want.insert(want.end(), l.backward.begin(), l.backward.end());
    }
    EXPECT_EQ(ops, want);
    // The hidden states: layer i's output lives from its forward's last op into layer i+1's
    // backward (which reads its input) and ends before layer i's backward; the gradients from
    // layer i+1's backward into layer i's, and no further.
    for (int i = 0; i + 1 < n; ++i) {
      const std::string p = "enc" + std::to_string(i) + ".";
      const TensorLifetime& out = find(tensors, p + "out");
      EXPECT_EQ(out.first_step, steps.forward_start[static_cast<std::size_t>(i) + 1] - 1);
      EXPECT_GE(out.last_step, steps.backward_start[static_cast<std::size_t>(i) + 1]);
      const int layer_i_backward_end =
          i > 0 ? steps.backward_start[static_cast<std::size_t>(i) - 1] : static_cast<int>(ops.size());
      // Layer i's own backward never reads its output: the last reader is layer i+1's backward.
      EXPECT_LT(out.last_step, steps.backward_start[static_cast<std::size_t>(i)]);
      const TensorLifetime& d_out = find(tensors, p + "d_out");
      EXPECT_GE(d_out.first_step, steps.backward_start[static_cast<std::size_t>(i) + 1]);
      EXPECT_GE(d_out.last_step, steps.backward_start[static_cast<std::size_t>(i)]);
      EXPECT_LT(d_out.last_step, layer_i_backward_end);
      EXPECT_EQ(out.bytes, 64u * 12u * 2u);
    }
    EXPECT_EQ(find(tensors, "enc.gemm_workspace").bytes, kGemmWorkspaceBytes);
    EXPECT_NO_THROW(check_plan(tensors, plan_memory(tensors)));
  });
}

TEST(EncoderStackValidation, EveryLayersTensorsAreTheLayersOwn) {
  // Each layer of the stack plans exactly the tensors (names, bytes) an EncoderLayer with its
  // prefix plans, apart from the externals and the GEMM workspace the stack shares.
  const LayerConfig c = small_config();
  for (const Recompute recompute : {Recompute::none, Recompute::pointwise}) {
    SCOPED_TRACE(recompute_name(recompute));
    EncoderStackOptions so;
    so.recompute = recompute;
    const std::vector<TensorLifetime> stack = encoder_stack_lifetimes(c, 2, so);
    std::size_t layer_tensors = 0;
    for (int i = 0; i < 2; ++i) {
      EncoderLayerOptions o;
      o.prefix = "enc" + std::to_string(i) + ".";
      o.recompute = recompute;
      for (const TensorLifetime& t : encoder_layer_lifetimes(c, o)) {
        if (t.external || t.name == o.prefix + "gemm_workspace") continue;
        EXPECT_EQ(find(stack, t.name).bytes, t.bytes) << t.name;
        ++layer_tensors;
      }
    }
    // Besides: 4 externals, the shared workspace, one hidden state and its gradient.
    EXPECT_EQ(stack.size(), layer_tensors + 7);
  }
}

TEST(EncoderStackValidation, OneLayerStackPlansAsMuchAsTheLayer) {
  for (const bool pre : {true, false}) {
    const LayerConfig c = small_config(pre, 0.1);
    const std::vector<TensorLifetime> stack = encoder_stack_lifetimes(c, 1);
    const std::vector<TensorLifetime> layer = encoder_layer_lifetimes(c);
    EXPECT_EQ(stack.size(), layer.size());
    EXPECT_EQ(plan_memory(stack).block_bytes, plan_memory(layer).block_bytes);
  }
}

// retain_forward over a stack: every layer's kept tensors live to the stack's last step.
TEST(EncoderStackValidation, RetainedForwardLivesThroughTheWholeBackward) {
  for (const Recompute recompute : {Recompute::none, Recompute::pointwise}) {
    SCOPED_TRACE(recompute_name(recompute));
    EncoderStackOptions options;
    options.recompute = recompute;
    std::vector<std::string> ops;
    EncoderStackSteps steps;
    const std::vector<TensorLifetime> consumed =
        encoder_stack_lifetimes(small_config(false, 0.1), 3, options);
    options.retain_forward = true;
    const std::vector<TensorLifetime> retained =
        encoder_stack_lifetimes(small_config(false, 0.1), 3, options, &ops, &steps);
    expect_forward_retained(consumed, retained, steps.forward_steps, static_cast<int>(ops.size()));
  }
}

TEST(EncoderStackValidation, DeepStacksPlanAtTheLowerBoundBelowSeparateLayers) {
  // Transformer-big (6 layers) and bert-large (24): the stack's one block against one
  // EncoderLayer's block per layer. Host only (plans, no allocation).
  for (const char* name : {"transformer-big", "bert-large"}) {
    const ModelPreset& m = preset(name);
    const LayerConfig& c = m.layer;
    const int n = m.encoder_layers;
    ASSERT_GE(n, 2) << name;
    const std::vector<TensorLifetime> stack = encoder_stack_lifetimes(c, n);
    const std::size_t stack_block = plan_memory(stack).block_bytes;
    const std::size_t layer_block = plan_memory(encoder_layer_lifetimes(c)).block_bytes;
    SCOPED_TRACE(name);
    // No plan beats the most bytes live at one step, and the greedy planner reaches it for these
    // stacks; separate layers pay n full blocks. (What a layer's forward keeps for its backward
    // a stack keeps n times too: the saving is the backward's temporaries and the forward's
    // scratch, which every layer of a stack shares.)
    const std::size_t bound = max_live_bytes(stack, /*padded=*/true);
    EXPECT_EQ(stack_block, bound);
    EXPECT_LT(stack_block, static_cast<std::size_t>(n) * layer_block);
    std::printf("%s: %d layers, stack block %.1f MiB (lower bound %.1f), %d layer blocks %.1f MiB\n", name, n,
                static_cast<double>(stack_block) / (1 << 20), static_cast<double>(bound) / (1 << 20), n,
                static_cast<double>(static_cast<std::size_t>(n) * layer_block) / (1 << 20));
  }
}

TEST(EncoderStackValidation, RecomputeShrinksTheStackByWhatEachLayerNoLongerKeeps) {
  // Recompute::pointwise keeps neither the dropped probabilities (B·N·L² elements at the planned
  // maximum) nor the FFN activation (T·F) of any layer: the stack's block shrinks by that much for
  // every layer but the one whose backward is running (the redrawn copies live there) and at most
  // the one before it. The layers suite's shape (transformer-big at 8192 tokens, L <= 256, fp16,
  // Fig. 20's stack) and the preset maxima; host only.
  struct Shape {
    const char* name;
    int tokens, max_len;
  };
  for (const Shape& shape :
       {Shape{"transformer-big", 8192, 256}, Shape{"transformer-big", 0, 0}, Shape{"bert-large", 0, 0}}) {
    const ModelPreset& m = preset(shape.name);
    LayerConfig c = m.layer;
    if (shape.tokens > 0) {
      c.max_batch_tokens = shape.tokens;
      c.max_seq_len = shape.max_len;
    }
    c.dtype = DType::f16;
    const int n = m.encoder_layers;
    SCOPED_TRACE(std::string(shape.name) + " tokens " + std::to_string(c.max_batch_tokens));
    ASSERT_GT(c.attn_dropout, 0.0);
    EncoderStackOptions keep, redraw;
    keep.recompute = Recompute::none;
    redraw.recompute = Recompute::pointwise;
    const std::size_t kept_block = plan_memory(encoder_stack_lifetimes(c, n, keep)).block_bytes;
    const std::size_t redrawn_block = plan_memory(encoder_stack_lifetimes(c, n, redraw)).block_bytes;
    const std::size_t per_layer =
        align_up(encoder_layer_max_score_elements(c) * static_cast<std::size_t>(c.heads) * 2,
                 kBlockAlignment) +
        align_up(static_cast<std::size_t>(c.max_batch_tokens) * static_cast<std::size_t>(c.ffn) * 2,
                 kBlockAlignment);
    ASSERT_LT(redrawn_block, kept_block);
    EXPECT_GE(kept_block - redrawn_block, static_cast<std::size_t>(n - 2) * per_layer);
    EXPECT_LE(kept_block - redrawn_block, static_cast<std::size_t>(n) * per_layer);
    std::printf(
        "%s, %d tokens, L <= %d, %d layers: stack block %.1f MiB keeping, %.1f MiB recomputing "
        "(%.1f MiB a layer not kept)\n",
        shape.name, c.max_batch_tokens, c.max_seq_len, n, static_cast<double>(kept_block) / (1 << 20),
        static_cast<double>(redrawn_block) / (1 << 20), static_cast<double>(per_layer) / (1 << 20));
  }
}

TEST(EncoderStackValidation, ConstructionChecksEveryLayerBeforeAnyAllocation) {
  HostBackend backend;
  CountingAllocator counter(backend);
  FakeEncoderParams a, b;
  expect_error([&] { EncoderStack s(small_config(), {}, {}, counter); }, "layers = 0 (must be >= 1)");
  expect_error(
      [&] {
        EncoderStack s(small_config(), {a.weights, b.weights}, {a.grads}, counter);
      },
      "2 weights but 1 grads entries");
  FakeEncoderParams bad;
  bad.weights.fc2_bias = nullptr;
  expect_error_all(
      [&] {
        EncoderStack s(small_config(), {a.weights, bad.weights}, {a.grads, bad.grads}, counter);
      },
      {"layer 1: null parameter pointer", "weights.fc2_bias"});
  LayerConfig c = small_config();
  c.heads = 5;
  expect_error([&] { EncoderStack s(c, {a.weights}, {a.grads}, counter); }, "multiple of heads (5)");
  EncoderStackOptions o;
  o.prefix = "";
  expect_error([&] { EncoderStack s(small_config(), {a.weights}, {a.grads}, counter, o); },
               "options.prefix is empty");
  EXPECT_EQ(counter.stats().allocations, 0u);
  EXPECT_THROW(encoder_stack_lifetimes(small_config(), 0), Error);
  EXPECT_THROW(encoder_stack_dropout_offsets(0), Error);
  EXPECT_EQ(encoder_stack_dropout_offsets(6), 24u);
}

TEST(EncoderStackValidation, OneAllocationAndArgumentsCheckedBeforeAnyCudaCall) {
  HostBackend backend;
  CountingAllocator counter(backend);
  FakeEncoderParams a, b, d;
  {
    EncoderStack stack(small_config(), {a.weights, b.weights, d.weights}, {a.grads, b.grads, d.grads},
                       counter);
    EXPECT_EQ(stack.layers(), 3);
    EXPECT_EQ(counter.stats().allocations, 1u);
    EXPECT_EQ(counter.stats().bytes_allocated, stack.block_bytes());
    EXPECT_TRUE(find_plan_violations(stack.memory().tensors(), stack.memory().plan()).empty());
    std::vector<char> host(1 << 16);
    void* x = host.data();
    void* y = host.data() + 8192;
    expect_error_all([&] { stack.forward(y, x, 8, 16, nullptr, 1, 0, nullptr); },
                     {"batch tokens 8 x 16 = 128", "max_batch_tokens 64"});
    expect_error([&] { stack.forward(y, nullptr, 2, 4, nullptr, 1, 0, nullptr); }, "x is null");
    expect_error([&] { stack.forward(nullptr, x, 2, 4, nullptr, 1, 0, nullptr); }, "y is null");
    expect_error([&] { stack.forward(host.data() + 100, x, 2, 4, nullptr, 1, 0, nullptr); }, "y overlaps x");
    expect_error([&] { stack.forward(stack.memory().block(), x, 2, 4, nullptr, 1, 0, nullptr); },
                 "overlaps the layer's planned block");
    expect_error([&] { stack.forward(y, x, 2, 4, nullptr, 1, UINT64_MAX - 11, nullptr); },
                 "leaves no room for the 12 dropout streams of 3 layers");
    expect_error([&] { stack.backward(y, x, x, nullptr); }, "no forward() to differentiate");
    EXPECT_EQ(counter.stats().allocations, 1u);
  }
  EXPECT_EQ(counter.stats().live_bytes, 0u);
}

}  // namespace
}  // namespace seqbench::layers
