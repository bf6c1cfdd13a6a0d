// BaselineEmbeddingLayer without a GPU: construction and argument validation, every check before
// any CUDA call and before any allocation (the first forward's sinusoid table and temporaries come
// after its checks), through a host-memory fake allocator that is never reached.
#include <gtest/gtest.h>

#include <cstdint>

#include "core/error.h"
#include "kernels/embedding.h"
#include "layers/baseline_embedding_layer.h"
#include "layers/caching_allocator.h"
#include "tests/common/expect_error.h"
#include "tests/layers/fake_allocators.h"
#include "tests/layers/layer_test_support.h"

namespace seqbench::layers {
namespace {

using testing::expect_error;
using testing::expect_error_all;

using layer_test::FakeTables;
using layer_test::RecordingBackend;
using layer_test::small_embedding;

TEST(BaselineEmbeddingLayerValidation, ConfigAndParametersAreCheckedAtConstruction) {
  RecordingBackend backend;
  CachingAllocator cache(backend);
  FakeTables t;
  EmbeddingLayerConfig c = small_embedding();
  c.vocab_size = 0;
  c.dropout = 1.0;
  expect_error_all([&] { BaselineEmbeddingLayer layer(c, t.weights, t.grads, cache); },
                   {"vocab_size (0) must be positive", "dropout (1)"});
  EmbeddingLayerWeights w = t.weights;
  EmbeddingLayerGrads g = t.grads;
  w.position_table = nullptr;
  g.token_table = nullptr;
  expect_error_all(
      [&] { BaselineEmbeddingLayer layer(small_embedding(), w, g, cache); },
      {"BaselineEmbeddingLayer: null parameter pointer", "weights.position_table", "grads.token_table"});
  expect_error(
      [&] {
        BaselineEmbeddingLayer layer(small_embedding(kernels::PositionEncoding::sinusoidal), t.weights,
                                     t.grads, cache);
      },
      "sinusoidal positions have none");
  w = t.weights;
  w.token_table = t.storage + 1;  // not 2-byte aligned for f16
  expect_error([&] { BaselineEmbeddingLayer layer(small_embedding(), w, t.grads, cache); },
               "weights.token_table");
  EXPECT_EQ(backend.calls, 0);
}

TEST(BaselineEmbeddingLayerValidation, ForwardAndBackwardArgumentsAreCheckedBeforeAnyCudaCall) {
  RecordingBackend backend;
  CachingAllocator cache(backend);
  FakeTables t;
  BaselineEmbeddingLayer layer(small_embedding(), t.weights, t.grads, cache);
  alignas(16) static char host[1 << 14];
  void* y = host;
  const auto* tokens = reinterpret_cast<const std::int32_t*>(host + 8192);
  expect_error_all([&] { layer.forward(y, tokens, 8, 16, 1, 0, nullptr); },
                   {"batch tokens 8 x 16 = 128", "max_batch_tokens 64"});
  expect_error_all([&] { layer.forward(y, tokens, 1, 17, 1, 0, nullptr); }, {"seq_len 17", "max_seq_len 16"});
  expect_error([&] { layer.forward(y, tokens, 0, 4, 1, 0, nullptr); }, "batch_size 0");
  expect_error([&] { layer.forward(nullptr, tokens, 2, 4, 1, 0, nullptr); },
               "BaselineEmbeddingLayer::forward: y is null");
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
  // y over a weight table (the eager sequence writes y last: refused before the first launch).
  expect_error([&] { layer.forward(t.storage, tokens, 2, 4, 1, 0, nullptr); }, "overlaps a weight table");
  expect_error([&] { layer.forward(t.storage + 48, tokens, 2, 4, 1, 0, nullptr); },
               "overlaps a weight table");
  expect_error([&] { layer.backward(y, tokens, nullptr); }, "no forward() to differentiate");
  expect_error([&] { layer.backward(y, tokens, nullptr, true); }, "no forward() to differentiate");
  EXPECT_EQ(layer.saved_bytes(), 0u);
  EXPECT_EQ(layer.buffer_bytes(), 0u);
  EXPECT_EQ(backend.calls, 0);
  EXPECT_EQ(cache.stats().requests, 0u);
}

}  // namespace
}  // namespace seqbench::layers
