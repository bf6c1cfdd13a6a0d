// BaselineCriterionLayer without a GPU: configuration and argument validation, every check before
// any CUDA call and before any allocation (the baseline allocates nothing at construction; its
// forward's tensors come after the forward's checks), through a host-memory fake allocator.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>

#include "core/error.h"
#include "layers/baseline_criterion_layer.h"
#include "layers/caching_allocator.h"
#include "tests/common/expect_error.h"
#include "tests/layers/fake_allocators.h"
#include "tests/layers/layer_test_support.h"

namespace seqbench::layers {
namespace {

using testing::expect_error;
using testing::expect_error_all;

using layer_test::RecordingBackend;
using layer_test::small_criterion;

TEST(BaselineCriterionLayerValidation, ConfigIsCheckedAndNothingAllocatedAtConstruction) {
  RecordingBackend backend;
  CachingAllocator cache(backend);
  CriterionLayerConfig c = small_criterion();
  c.max_batch_tokens = 0;
  c.epsilon = std::nan("");
  c.convention = "szegedy";
  expect_error_all([&] { BaselineCriterionLayer layer(c, cache); },
                   {"max_batch_tokens (0) must be positive", "epsilon (nan)", "'fairseq' or 'paper'"});
  { BaselineCriterionLayer layer(small_criterion(), cache); }
  EXPECT_EQ(backend.calls, 0);
}

TEST(BaselineCriterionLayerValidation, ForwardAndBackwardArgumentsAreCheckedBeforeAnyCudaCall) {
  RecordingBackend backend;
  CachingAllocator cache(backend);
  BaselineCriterionLayer layer(small_criterion(), cache);
  alignas(16) static char host[1 << 14];
  const void* logits = host;
  const auto* targets = reinterpret_cast<const std::int32_t*>(host + 8192);
  expect_error_all([&] { layer.forward(logits, targets, 65, 7, nullptr); },
                   {"rows 65", "max_batch_tokens 64"});
  expect_error([&] { layer.forward(logits, targets, 0, 7, nullptr); }, "rows 0");
  expect_error([&] { layer.forward(logits, targets, 4, 0, nullptr); }, "vocab 0");
  expect_error([&] { layer.forward(logits, targets, 4, 1, nullptr); }, "needs vocabulary >= 2, got 1");
  expect_error([&] { layer.forward(nullptr, targets, 4, 7, nullptr); },
               "BaselineCriterionLayer::forward: logits is null");
  expect_error([&] { layer.forward(logits, nullptr, 4, 7, nullptr); }, "targets is null");
  expect_error([&] { layer.forward(host + 1, targets, 4, 7, nullptr); }, "logits (");
  void* dlogits = host + 4096;
  expect_error([&] { layer.backward(dlogits, logits, targets, 1.0f, nullptr); },
               "no forward() to differentiate");
  expect_error([&] { layer.backward(dlogits, logits, targets, static_cast<const float*>(nullptr), nullptr); },
               "no forward() to differentiate");
  EXPECT_EQ(layer.saved_bytes(), 0u);
  EXPECT_EQ(backend.calls, 0);
  EXPECT_EQ(cache.stats().requests, 0u);
}

}  // namespace
}  // namespace seqbench::layers
