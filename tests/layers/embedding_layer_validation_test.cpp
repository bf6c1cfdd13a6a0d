// EmbeddingLayer without a GPU: construction and argument validation (every check runs before any
// CUDA call and before the layer's lazy allocation), the one planned allocation (through a host-memory
// fake allocator: the atomic backward's plan is sized on the host), and the workspaces at the maxima.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "core/error.h"
#include "kernels/embedding.h"
#include "layers/baseline_embedding_layer.h"
#include "layers/embedding_layer.h"
#include "layers/memory_planner.h"
#include "tests/common/expect_error.h"
#include "tests/layers/fake_allocators.h"
#include "tests/layers/layer_test_support.h"

namespace seqbench::layers {
namespace {

using testing::expect_error;
using testing::expect_error_all;

using layer_test::FakeTables;
using layer_test::HostBackend;
using layer_test::small_embedding;

EmbeddingLayerOptions atomic_options() {
  EmbeddingLayerOptions o;
  o.deterministic_backward = false;  // host-sized plan: reserve() runs without a device
  return o;
}

TEST(EmbeddingLayerValidation, ConfigRulesAreAllNamed) {
  EmbeddingLayerConfig c = small_embedding();
  c.vocab_size = 0;
  c.max_seq_len = 65;
  c.dropout = 1.0;
  c.position_offset = -1;
  expect_error_all([&] { c.validate(); }, {"vocab_size (0) must be positive",
                                           "max_seq_len (65) must not exceed max_batch_tokens (64)",
                                           "dropout (1)", "position_offset (-1)"});
  c = small_embedding();
  c.dropout = 0.99999999;  // below 1, but 1.0f in the kernels: every element would be dropped
  expect_error([&] { c.validate(); }, "dropout (0.99999998999999995) rounds to 1 as the kernels' float");
  c.dropout = 1e300;  // far above FLT_MAX (its float cast would be undefined): refused by the double's range
  expect_error([&] { c.validate(); }, "dropout (1e+300) must be in [0, 1)");
  c.dropout = static_cast<double>(std::nextafter(1.0f, 0.0f));
  EXPECT_NO_THROW(c.validate());
  c = small_embedding();
  c.padding_idx = 50;
  expect_error([&] { c.validate(); }, "padding_idx (50) must be -1 (none) or in [0, vocab_size 50)");
  c = small_embedding();
  c.scale = std::numeric_limits<double>::infinity();
  expect_error([&] { c.validate(); }, "scale (inf) must be finite");
  // The kernels' limit: sinusoid positions below 2^24 (offset + max_seq_len).
  c = small_embedding(kernels::PositionEncoding::sinusoidal);
  c.position_offset = 1 << 24;
  expect_error([&] { c.validate(); }, "EmbeddingLayerConfig");
}

TEST(EmbeddingLayerValidation, DefaultsAreLightSeqs) {
  EmbeddingLayerConfig c = small_embedding();
  EXPECT_DOUBLE_EQ(c.effective_scale(), std::sqrt(12.0));
  c.scale = 1.0;
  EXPECT_DOUBLE_EQ(c.effective_scale(), 1.0);
  EXPECT_EQ(c.num_positions(), 16 + 2);
  const EmbeddingLayerConfig d;
  EXPECT_EQ(d.positions, kernels::PositionEncoding::sinusoidal);
  EXPECT_EQ(d.indexing, kernels::PositionIndexing::nonpad_count);
  EXPECT_EQ(d.position_offset, 0);
  EXPECT_TRUE(EmbeddingLayerOptions{}.deterministic_backward);
  const std::vector<ParameterShape> shapes = embedding_layer_parameter_shapes(small_embedding());
  ASSERT_EQ(shapes.size(), 2u);
  EXPECT_EQ(shapes[0].rows, 50u);
  EXPECT_EQ(shapes[1].rows, 18u);
  EXPECT_EQ(shapes[1].cols, 12u);
  EXPECT_EQ(embedding_layer_parameter_shapes(small_embedding(kernels::PositionEncoding::sinusoidal)).size(),
            1u);
}

TEST(EmbeddingLayerValidation, ParametersAreCheckedAtConstruction) {
  HostBackend backend;
  CountingAllocator counter(backend);
  FakeTables t;
  EmbeddingLayerWeights w = t.weights;
  EmbeddingLayerGrads g = t.grads;
  w.position_table = nullptr;
  g.token_table = nullptr;
  expect_error_all([&] { EmbeddingLayer layer(small_embedding(), w, g, counter); },
                   {"null parameter pointer", "weights.position_table", "grads.token_table"});
  // Sinusoidal positions have no table: one given is a configuration mistake.
  expect_error(
      [&] {
        EmbeddingLayer layer(small_embedding(kernels::PositionEncoding::sinusoidal), t.weights, t.grads,
                             counter);
      },
      "sinusoidal positions have none");
  w = t.weights;
  w.token_table = t.storage + 1;  // not 2-byte aligned for f16
  expect_error([&] { EmbeddingLayer layer(small_embedding(), w, t.grads, counter); }, "weights.token_table");
  // Gradient tables that share bytes with each other or a weight: both would be zeroed and then
  // scattered into, so one table's rows would hold the other's gradient.
  g = t.grads;
  g.position_table = t.storage + 4096 + 1024;  // inside grads.token_table's 1200 bytes
  expect_error_all(
      [&] { EmbeddingLayer layer(small_embedding(), t.weights, g, counter); },
      {"EmbeddingLayer: grads.position_table (432 bytes", "overlaps grads.token_table (1200 bytes"});
  g = t.grads;
  g.token_table = t.storage + 2048 + 16;  // on weights.position_table
  expect_error_all([&] { BaselineEmbeddingLayer layer(small_embedding(), t.weights, g, counter); },
                   {"BaselineEmbeddingLayer: ", "grads.token_table", "weights.position_table"});
  EXPECT_EQ(counter.stats().allocations, 0u);
}

TEST(EmbeddingLayerValidation, ForwardAndBackwardArgumentsAreCheckedBeforeAnyCudaCall) {
  HostBackend backend;
  CountingAllocator counter(backend);
  FakeTables t;
  EmbeddingLayer layer(small_embedding(), t.weights, t.grads, counter);  // deterministic: lazy block
  EXPECT_FALSE(layer.reserved());
  EXPECT_EQ(counter.stats().allocations, 0u);
  alignas(16) static char host[1 << 14];
  void* y = host;
  const auto* tokens = reinterpret_cast<const std::int32_t*>(host + 8192);
  expect_error_all([&] { layer.forward(y, tokens, 8, 16, 1, 0, nullptr); },
                   {"batch tokens 8 x 16 = 128", "max_batch_tokens 64"});
  expect_error_all([&] { layer.forward(y, tokens, 1, 17, 1, 0, nullptr); }, {"seq_len 17", "max_seq_len 16"});
  expect_error([&] { layer.forward(y, tokens, 0, 4, 1, 0, nullptr); }, "batch_size 0");
  expect_error([&] { layer.forward(nullptr, tokens, 2, 4, 1, 0, nullptr); }, "y is null");
  expect_error([&] { layer.forward(y, nullptr, 2, 4, 1, 0, nullptr); }, "tokens is null");
  expect_error([&] { layer.forward(host + 1, tokens, 2, 4, 1, 0, nullptr); }, "y (");
  expect_error(
      [&] { layer.forward(y, reinterpret_cast<const std::int32_t*>(host + 8194), 2, 4, 1, 0, nullptr); },
      "tokens (");
  // 2·4 tokens · 12 · 2 bytes = 192 bytes of y: tokens 100 bytes in overlap it.
  expect_error(
      [&] { layer.forward(y, reinterpret_cast<const std::int32_t*>(host + 100), 2, 4, 1, 0, nullptr); },
      "overlaps tokens");
  expect_error([&] { layer.forward(y, tokens, 2, 4, 1, UINT64_MAX, nullptr); }, "leaves no room");
  expect_error([&] { layer.backward(y, tokens, nullptr); }, "no forward() to differentiate");
  expect_error([&] { (void)layer.memory(); }, "no planned block yet");
  EXPECT_EQ(counter.stats().allocations, 0u);
}

TEST(EmbeddingLayerValidation, OneAllocationOfThePlannedBlock) {
  HostBackend backend;
  CountingAllocator counter(backend);
  FakeTables t;
  for (const auto positions : {kernels::PositionEncoding::learned, kernels::PositionEncoding::sinusoidal}) {
    for (const auto indexing : {kernels::PositionIndexing::slot, kernels::PositionIndexing::nonpad_count}) {
      EmbeddingLayerConfig c = small_embedding(positions);
      c.indexing = indexing;
      const bool learned = positions == kernels::PositionEncoding::learned;
      const EmbeddingLayerWeights w{t.weights.token_table, learned ? t.weights.position_table : nullptr};
      const EmbeddingLayerGrads g{t.grads.token_table, learned ? t.grads.position_table : nullptr};
      const AllocationStats before = counter.stats();
      {
        EmbeddingLayer layer(c, w, g, counter, atomic_options());
        layer.reserve();
        layer.reserve();  // once
        ASSERT_TRUE(layer.reserved());
        const std::vector<TensorLifetime>& tensors = layer.memory().tensors();
        ASSERT_EQ(tensors.size(), 2u);
        // At the maxima: 64 tokens (B·L), H = 12.
        const kernels::EmbeddingShape s = c.kernel_shape(64, 1);
        const kernels::EmbeddingConfig k = c.kernel_config(0, 0);
        // The forward's: enough for every admitted (B, L), the sinusoid table of the longest
        // sentences included, and no more than the largest of them needs.
        const std::size_t fwd = tensors[layer.memory().id("emb.fwd_workspace")].bytes;
        std::size_t largest = 0;
        for (std::int64_t len = 1; len <= c.max_seq_len; ++len) {
          for (std::int64_t batch = 1; batch * len <= c.max_batch_tokens; ++batch) {
            const std::size_t need = kernels::embedding_fwd_workspace_bytes(c.kernel_shape(batch, len), k);
            ASSERT_LE(need, fwd) << "B = " << batch << ", L = " << len;
            largest = std::max(largest, need);
          }
        }
        EXPECT_EQ(fwd, largest);
        EXPECT_EQ(tensors[layer.memory().id("emb.bwd_workspace")].bytes,
                  kernels::embedding_bwd_atomic_workspace_bytes(s, k, /*forked=*/true));
        // Forward and backward never run at once: the two workspaces share bytes.
        EXPECT_EQ(layer.block_bytes(), max_live_bytes(tensors, /*padded=*/true));
        const std::uint64_t blocks = layer.block_bytes() > 0 ? 1u : 0u;
        EXPECT_EQ(counter.stats().allocations - before.allocations, blocks);
        alignas(16) static char host[4096];
        const auto* tokens = reinterpret_cast<const std::int32_t*>(host);
        if (layer.block_bytes() > 0) {
          expect_error([&] { layer.forward(layer.memory().block(), tokens, 2, 4, 1, 0, nullptr); },
                       "overlaps the layer's planned block");
        }
      }
      EXPECT_EQ(counter.stats().live_bytes, 0u);
    }
  }
}

}  // namespace
}  // namespace seqbench::layers
